from pathlib import Path

import pytest
import torch

from packager import load_cast
from packager.format import build_cast
from tests.packager.conftest import (
    MODEL,
    SmallNet,
    compiled_kept,
    entry,
    module_card,
)


def test_matching_module_instances_run_the_kernel_and_match_eager(net_cast) -> None:
    net, x, block, _head, cast = net_cast
    with torch.no_grad():
        want = net(x)
        with cast.applied_to(net):
            got = net(x)
    torch.testing.assert_close(got, want)
    assert cast.stats()[block.id] == {"calls": 2, "hits": 2, "fallbacks": {}}
    assert "forward" not in net.block1.__dict__  # removed: the class's forward again


def test_module_misses_fall_back_to_the_original_forward(net_cast) -> None:
    net, x, block, _, cast = net_cast
    other = SmallNet(width=8).eval()  # same attributes (training) as the captured block
    other.block1.weight.data = torch.randn(16)[::2]  # same shape, other stride
    with torch.no_grad(), cast.applied_to(net):
        y = torch.randn(2, 8)
        torch.testing.assert_close(net.block1(y), torch.relu(y) * net.block1.weight)
        net.block1(x.double())
    with torch.no_grad(), cast.applied_to(other):
        other.block1(x)
    stats = cast.stats()[block.id]
    assert stats["hits"] == 0 and stats["fallbacks"] == {"shape": 1, "dtype": 1, "stride": 1}


def test_changes_to_an_applied_module_are_seen_on_the_next_call(net_cast) -> None:
    """The guard keeps what it read of a module, but never past a change to it."""
    net, x, block, _, cast = net_cast
    block1 = net.block1
    with torch.no_grad(), cast.applied_to(net):
        block1(x)
        block1.scale = 2.0  # a new plain attribute: another variant
        block1(x)
        del block1.scale
        block1(x)
        block1.weight = torch.nn.Parameter(torch.ones(8, dtype=torch.float64))  # replaced parameter
        block1(x)
        block1.weight = torch.nn.Parameter(torch.ones(8))
        torch.testing.assert_close(block1(x), torch.relu(x))
        block1.weight.data = torch.ones(16)[::2]  # same Parameter object, other stride
        block1(x)
        block1.train()
        block1(x)
    stats = cast.stats()[block.id]
    assert stats["hits"] == 3
    assert stats["fallbacks"] == {"args": 2, "dtype": 1, "stride": 1}


def test_module_on_another_device_is_a_device_miss(net_cast) -> None:
    _net, x, block, _, cast = net_cast
    meta_net = SmallNet().to("meta")
    with torch.no_grad(), cast.applied_to(meta_net):
        assert meta_net.block1(x.to("meta")).device.type == "meta"
    assert cast.stats()[block.id]["fallbacks"] == {"device": 1}


def test_calls_that_need_autograd_use_the_original_forward(net_cast) -> None:
    net, x, block, _, cast = net_cast
    with cast.applied_to(net):
        net.block1(x).sum().backward()
    torch.testing.assert_close(net.block1.weight.grad, torch.relu(x).sum(0))
    assert cast.stats()[block.id]["fallbacks"] == {"autograd": 1}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_module_kernels_stay_inside_compiled_graphs(net_cast, backend: str) -> None:
    net, x, block, _, cast = net_cast
    torch._dynamo.reset()
    graphs: list[torch.fx.GraphModule] = []

    def recording_backend(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm)
        return torch._dynamo.lookup_backend(backend)(gm, example_inputs)

    with torch.no_grad():
        want = net(x)
        with cast.applied_to(net):
            compiled = torch.compile(net, backend=recording_backend)
            got = compiled(x)
            got_again = compiled(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_again, want)
    ops = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert sum("kforge_cast.kernel" in op for op in ops) == 2
    assert cast.stats()[block.id] == {"calls": 4, "hits": 4, "fallbacks": {}}


def test_compiled_graph_falls_back_when_the_kernel_fails(tmp_path: Path, artifacts) -> None:
    net = SmallNet().eval()
    x = torch.randn(4, 8)
    block = module_card(net.block1, x)
    build_cast(tmp_path / "f.cast", MODEL, [entry(block, "// fails", artifacts["failing"], eager_us=5000.0)], [],
               verdicts=compiled_kept(block))
    cast = load_cast(tmp_path / "f.cast")
    torch._dynamo.reset()
    with torch.no_grad():
        want = net(x)
        with cast.applied_to(net):
            got = torch.compile(net, backend="aot_eager")(x)
    torch.testing.assert_close(got, want)
    assert cast.stats()[block.id]["fallbacks"] == {"kernel_error": 2}
