"""Who keeps a graph op's owner: a removed cast holds no model, a compiled graph still finds its fallback."""

import gc
import weakref

import pytest
import torch

from tests.packager.conftest import SmallNet


@pytest.fixture(params=["1", "0"], ids=["native", "python"])
def native(request, monkeypatch) -> None:
    """Runs the test with the runtime's native library, and again without it."""
    monkeypatch.setenv("KFORGE_NATIVE", request.param)


def _collected(net: SmallNet, cast) -> list[weakref.ref]:
    """What must be freed once the model is: its modules and tensors, and the cast's guards on them."""
    guards = [weakref.ref(override) for override in cast._modules.values()]
    return [weakref.ref(net.block1), weakref.ref(net.block1.weight), weakref.ref(net.block2.weight), *guards]


def test_a_removed_cast_keeps_no_module_alive(net_cast, native) -> None:
    _, x, block, _, cast = net_cast
    net = SmallNet().eval()  # not the fixture's own, which pytest keeps for the test's length
    with torch.no_grad():
        cast.apply(net)
        net(x)
        net(x)
        refs = _collected(net, cast)
        cast.remove()
    assert cast.stats()[block.id]["hits"] == 4
    del net
    gc.collect()
    assert len(refs) == 5 and [ref() for ref in refs] == [None] * 5


def test_a_removed_cast_keeps_no_compiled_module_alive(net_cast, native) -> None:
    _, x, block, _, cast = net_cast
    net = SmallNet().eval()
    with torch.no_grad():
        compiled = cast.compile(net)
        compiled(x)
        net(x)  # compiling installed the module guards, which serve eager calls too
    assert cast.stats()[block.id]["hits"] == 4
    refs = _collected(net, cast)
    del net, compiled
    cast.remove()
    gc.collect()
    assert len(refs) == 5 and [ref() for ref in refs] == [None] * 5


def test_a_compiled_graph_outlives_its_removed_and_dropped_cast(net_cast, native) -> None:
    _, x, _, head, cast = net_cast
    net = SmallNet().eval()
    kernels = cast.kernels
    with torch.no_grad():
        want = net(x)
        compiled = cast.compile(net)
        compiled(x)
        cast.remove()
        del cast
        gc.collect()
        torch.testing.assert_close(compiled(x), want)  # the softmax graph's op runs the original
    assert kernels[head.id].stats.snapshot()["fallbacks"] == {"removed": 1}


def test_a_graph_that_recorded_a_module_guard_outlives_the_removed_cast(net_cast, native) -> None:
    _, x, block, _, cast = net_cast
    net = SmallNet().eval()
    graphs: list[tuple[torch.fx.GraphModule, list[torch.Tensor]]] = []

    def recording_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):
        graphs.append((gm, example_inputs))
        return gm.forward

    with torch.no_grad():
        want = net(x)
        cast.backend(net)  # the module guards, and their native slots where the library is here
        torch.compile(net, backend=recording_backend)(x)
        cast.remove()  # dynamo now recompiles the model; the graph made before still holds the op
        gc.collect()
        (graph, inputs), = graphs
        torch.testing.assert_close(graph(*inputs)[0], want)
    assert cast.stats()[block.id] == {"calls": 4, "hits": 2, "fallbacks": {"removed": 2}}
