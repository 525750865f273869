"""kforge_cast::native: compiled graphs run kernels from C++, and hand every other call to the Python op."""

import warnings

import pytest
import torch

from packager import graph_op
from packager.native import build as native_build
from packager.native import graph as native_graph
from packager.native.build import NativeBuildError, build
from packager.variant import TensorSignature


@pytest.fixture
def unloaded(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """``native_graph_op`` as in a process that has not loaded the library yet (restored afterwards)."""
    monkeypatch.setattr(native_build, "_loaded", {})
    monkeypatch.setattr(native_build, "_failures", {})
    return monkeypatch


def _owners(cast) -> list[graph_op.GraphOwner]:
    return [cast._graph_kernels, *cast._modules.values()]


def test_compiled_graphs_record_the_native_op_and_its_hits_are_counted(net_cast) -> None:
    net, x, block, head, cast = net_cast
    with torch.inference_mode():
        want = net(x)
        compiled = cast.compile(net, fullgraph=True)
        got = compiled(x)
    torch.testing.assert_close(got, want)
    slots = {card: slot for owner in _owners(cast) for card, slot in owner.native_slots.items()}
    assert set(slots) == {block.id, head.id}
    native = native_graph.native_graph_op()
    assert native is not None
    assert native.hits(slots[head.id]) == 1
    assert sum(native.hits(s) for c, s in slots.items() if c == block.id) >= 1
    assert cast.stats()[head.id] == {"calls": 1, "hits": 1, "fallbacks": {}}
    cast.reset_stats()
    assert cast.stats()[head.id] == {"calls": 0, "hits": 0, "fallbacks": {}}


def test_a_call_the_slot_turns_away_reaches_the_python_op_with_its_reason(net_cast) -> None:
    net, x, _, head, cast = net_cast
    cast.backend(net)
    slot = cast._graph_kernels.native_slots[head.id]
    shifted = torch.empty(x.numel() + 1)[1:].view_as(x).copy_(x)  # the card's shape, not 16-byte aligned
    with torch.inference_mode():
        (got,) = torch.ops.kforge_cast.native([shifted], slot)
        (hit,) = torch.ops.kforge_cast.native([x], slot)
    torch.testing.assert_close(got, torch.softmax(x, dim=-1))
    torch.testing.assert_close(hit, torch.softmax(x, dim=-1))
    assert cast.stats()[head.id] == {"calls": 2, "hits": 1, "fallbacks": {"alignment": 1}}
    cast.remove()  # the slot is switched off with its owner: the Python op counts the call as removed
    with torch.inference_mode():
        (again,) = torch.ops.kforge_cast.native([x], slot)
    torch.testing.assert_close(again, torch.softmax(x, dim=-1))
    assert cast.stats()[head.id]["fallbacks"] == {"alignment": 1, "removed": 1}


def test_an_unknown_slot_is_an_error_that_names_it() -> None:
    native = native_graph.native_graph_op()
    assert native is not None
    with pytest.raises(RuntimeError, match="no kernel is loaded in slot 65000"):
        torch.ops.kforge_cast.native([torch.ones(2)], 65000)


def test_slots_refuse_layouts_outside_the_contract() -> None:
    native = native_graph.native_graph_op()
    assert native is not None
    nine_dims = TensorSignature((1,) * 9, (1,) * 9, "float32", 0, True, "cpu")
    assert native.add_slot(1, "cpu", [nine_dims], [], 0, "t", "c") is None
    complex_input = TensorSignature((2,), (1,), "complex64", 0, True, "cpu")
    assert native.add_slot(1, "cpu", [complex_input], [], 0, "t", "c") is None
    assert native.add_slot(1, "cpu", [], [((1,) * 9, (1,) * 9, torch.float32)], 0, "t", "c") is None
    assert native.add_slot(1, "tpu", [], [], 0, "t", "c") is None


def test_without_a_compiler_the_runtime_warns_once_and_keeps_the_python_op(unloaded, tmp_path) -> None:
    unloaded.setenv("KFORGE_NATIVE_CACHE", str(tmp_path))
    unloaded.setenv("CXX", "kforge-no-such-compiler")
    expected = "in compiled graphs stays in Python .no C.. compiler: 'kforge-no-such-compiler'"
    with pytest.warns(RuntimeWarning, match=expected):
        assert native_graph.native_graph_op() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native_graph.native_graph_op() is None  # remembered: no second warning


def test_the_native_path_can_be_switched_off(monkeypatch, net_cast) -> None:
    monkeypatch.setenv("KFORGE_NATIVE", "0")
    net, x, _, head, cast = net_cast
    with torch.inference_mode():
        want = net(x)
        got = cast.compile(net, fullgraph=True)(x)
    torch.testing.assert_close(got, want)
    assert cast._graph_kernels.native_slots == {}
    assert cast.stats()[head.id]["hits"] == 1  # the Python op ran the kernel


def test_a_build_failure_names_the_compiler_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KFORGE_NATIVE_CACHE", str(tmp_path))
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr("packager.native.build.SOURCE_DIR", tmp_path)
    with pytest.raises(NativeBuildError, match=r"building broken\.cpp failed"):
        build("broken")
    assert not list(tmp_path.glob("*/broken.so"))


def test_the_library_is_cached_per_source_and_torch_build(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KFORGE_NATIVE_CACHE", str(tmp_path))
    first = build("graph_op")
    stamp = first.stat().st_mtime_ns
    assert build("graph_op") == first and first.stat().st_mtime_ns == stamp
