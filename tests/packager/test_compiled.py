"""A .cast under torch.compile (inductor on the CPU): kernels in the graph, no break, no recompile."""

from pathlib import Path

import pytest
import torch

from packager import CastApplyError, load_cast
from packager.format import build_cast
from packager.manifest import PRUNED, ModeVerdict
from tests.packager.conftest import (
    FAILING,
    MODEL,
    SCALED_RELU,
    SOFTMAX,
    ScaledRelu,
    SmallNet,
    aten_card,
    compiled_kept,
    entry,
    module_card,
    softmax_card,
)


def test_cast_compile_runs_module_and_aten_kernels_inside_inductor_graphs(net_cast) -> None:
    net, x, block, head, cast = net_cast
    with torch.inference_mode():
        want = net(x)
        compiled = cast.compile(net, fullgraph=True)
        got, again = compiled(x), compiled(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(again, want)
    stats = cast.stats()
    assert stats[block.id] == {"calls": 4, "hits": 4, "fallbacks": {}}  # two blocks, two calls
    assert stats[head.id] == {"calls": 2, "hits": 2, "fallbacks": {}}
    cast.remove()
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), want)  # removed: the graph's op runs the original
    assert cast.stats()[head.id]["fallbacks"] == {"removed": 1}


def test_a_compile_call_of_ones_own_takes_the_backend_and_its_mode(net_cast) -> None:
    net, x, block, head, cast = net_cast
    with torch.inference_mode():
        want = net(x)
        compiled = torch.compile(net, backend=cast.backend(net), mode="max-autotune-no-cudagraphs")
        torch.testing.assert_close(compiled(x), want)
    assert cast.stats()[head.id]["hits"] == 1 and cast.stats()[block.id]["hits"] == 2
    with pytest.raises(CastApplyError, match="chooses the backend"):
        cast.compile(net, backend="eager")


def test_the_cast_adds_no_graph_break_and_no_recompilation(net_cast) -> None:
    net, x, _, head, cast = net_cast
    calls = [x, x.clone(), torch.randn(6, 8), torch.randn(7, 8), x]  # a new shape recompiles, with or without

    def run(compile_fn) -> tuple[int, int]:
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        compiled = compile_fn()
        with torch.inference_mode():
            for c in calls:
                torch.testing.assert_close(compiled(c), net(c))
        return torch._dynamo.utils.counters["stats"]["unique_graphs"], len(torch._dynamo.utils.counters["graph_break"])

    without = run(lambda: torch.compile(net))
    with_cast = run(lambda: cast.compile(net))
    assert with_cast == without
    assert cast.stats()[head.id]["hits"] == 3  # the calls of the card's own shape
    explained = [torch._dynamo.explain(net)(x)]
    with cast.applied_to(net):
        explained.append(torch._dynamo.explain(net)(x))
    assert [(e.graph_count, e.graph_break_count) for e in explained] == [(1, 0), (1, 0)]


def test_a_traced_module_guards_nothing_of_the_override_but_its_token(net_cast) -> None:
    """Tracing reads the kernels' state outside dynamo: no guard reaches further into the override."""
    net, x, _, _, cast = net_cast
    with torch.inference_mode(), cast.applied_to(net):
        guards = torch._dynamo.explain(net)(x).out_guards
        assert torch._dynamo.explain(net)(x).graph_count == 1
    inside = [g.name for g in guards if "forward.__self__" in g.name]
    assert inside  # the override is traced: its token is guarded
    assert all(name.endswith(("forward.__self__", ".token", "._module_ref", "._module_ref()")) for name in inside)
    assert not [g.name for g in guards if "__closure__" in g.name or "trace_matcher" in g.name]


class GainedRelu(ScaledRelu):
    """``relu(x) * weight * gain``: its card's key holds ``gain``."""

    def __init__(self, width: int, gain: float) -> None:
        super().__init__(width)
        self.gain = gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.weight * self.gain


def test_a_traced_module_call_uses_the_kernel_only_for_its_cards_attributes(tmp_path: Path, artifacts) -> None:
    x = torch.randn(4, 8)
    block = module_card(GainedRelu(8, 1.0).eval(), x)  # the kernel computes relu(x) * weight: gain 1.0 only
    build_cast(tmp_path / "g.cast", MODEL, [entry(block, SCALED_RELU, artifacts["scaled_relu"], eager_us=5000.0)],
               [], verdicts=compiled_kept(block))
    cast = load_cast(tmp_path / "g.cast")
    net = torch.nn.Sequential(GainedRelu(8, 1.0), GainedRelu(8, 2.0), GainedRelu(8, 1.0)).eval()
    torch._dynamo.reset()
    calls = [x, torch.randn(6, 8), torch.randn(7, 8), x]  # the second shape on recompiles with dynamic sizes
    with torch.inference_mode():
        wants = [net(t) for t in calls]  # before the cast replaces the modules' forward
        compiled = cast.compile(net, fullgraph=True)
        for t, want in zip([*calls, x], [*wants, wants[0]], strict=True):
            torch.testing.assert_close(compiled(t), want)
    cast.remove()
    assert cast.stats()[block.id]["hits"] == 6  # two modules of gain 1.0, three calls of the card's shape
    assert len(torch._dynamo.utils.counters["graph_break"]) == 0


class ScaledByKeyword(ScaledRelu):
    """``relu(x) * weight * scale``, with ``scale`` a keyword of the call."""

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        return torch.relu(x) * self.weight * scale


class KeywordNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.plain, self.doubled = ScaledByKeyword(8), ScaledByKeyword(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.doubled(self.plain(x, scale=1.0), scale=2.0)


def test_a_traced_module_call_matches_its_keywords(tmp_path: Path, artifacts) -> None:
    x = torch.randn(4, 8)
    net = KeywordNet().eval()
    card = module_card(net.plain, x, {"scale": 1.0})  # the kernel computes relu(x) * weight
    build_cast(tmp_path / "k.cast", MODEL, [entry(card, SCALED_RELU, artifacts["scaled_relu"], eager_us=5000.0)],
               [], verdicts=compiled_kept(card))
    cast = load_cast(tmp_path / "k.cast")
    torch._dynamo.reset()
    with torch.inference_mode():
        want = net(x)
        torch.testing.assert_close(cast.compile(net, fullgraph=True)(x), want)
    cast.remove()
    assert cast.stats()[card.id]["hits"] == 1  # scale=1.0 only: the doubled call keeps its forward


def test_compiled_graphs_use_only_kernels_kept_for_compiled_use(tmp_path: Path, artifacts) -> None:
    """An unmeasured compiled verdict keeps the kernel out of graphs; eager calls still use it."""
    x = torch.randn(4, 8)
    head = softmax_card(x)
    build_cast(tmp_path / "u.cast", MODEL, [entry(head, SOFTMAX, artifacts["softmax"], eager_us=5000.0)], [])
    cast = load_cast(tmp_path / "u.cast")
    net = SmallNet().eval()
    torch._dynamo.reset()
    with torch.inference_mode():
        cast.compile(net)(x)
        assert cast.stats()[head.id]["calls"] == 0
        with cast.applied_to(net):
            net(x)
    assert cast.stats()[head.id]["hits"] == 1


def test_each_compiled_mode_uses_the_kernels_its_own_verdicts_keep(tmp_path: Path, artifacts) -> None:
    """The softmax kernel is kept in plain compiled graphs and pruned from CUDA-graph ones; the
    module kernel is kept in both. Inductor on the CPU skips the CUDA graphs themselves, but the
    mode still decides which kernels the graph holds."""
    net = SmallNet().eval()
    x = torch.randn(4, 8)
    block, head = module_card(net.block1, x), softmax_card(x)
    verdicts = {**compiled_kept(block, modes=("compiled", "cuda_graphs")), **compiled_kept(head),
                (head.id, "cuda_graphs"): ModeVerdict(PRUNED, "slower under CUDA graphs")}
    build_cast(tmp_path / "m.cast", MODEL, [entry(block, SCALED_RELU, artifacts["scaled_relu"], eager_us=5000.0),
                                            entry(head, SOFTMAX, artifacts["softmax"], eager_us=5000.0)], [],
               verdicts=verdicts)
    cast = load_cast(tmp_path / "m.cast")
    with torch.inference_mode():
        want = net(x)

    def hits(compile_fn) -> tuple[int, int]:
        torch._dynamo.reset()
        cast.reset_stats()
        with torch.inference_mode():
            torch.testing.assert_close(compile_fn()(x), want)
        cast.remove()
        stats = cast.stats()
        return stats[block.id]["hits"], stats[head.id]["hits"]

    assert hits(lambda: cast.compile(net)) == (2, 1)
    assert hits(lambda: cast.compile(net, mode="reduce-overhead")) == (2, 0)
    assert hits(lambda: cast.compile(net, options={"triton.cudagraphs": True})) == (2, 0)
    # The compile call's own mode reaches the backend: aten cards follow it.
    assert hits(lambda: torch.compile(net, backend=cast.backend(net), mode="reduce-overhead")) == (2, 0)


def test_a_module_kernel_pruned_in_one_compiled_mode_is_traced_only_where_the_mode_is_known(
        tmp_path: Path, artifacts) -> None:
    net = SmallNet().eval()
    x = torch.randn(4, 8)
    block = module_card(net.block1, x)
    verdicts = {**compiled_kept(block), (block.id, "cuda_graphs"): ModeVerdict(PRUNED, "slower under CUDA graphs")}
    build_cast(tmp_path / "b.cast", MODEL, [entry(block, SCALED_RELU, artifacts["scaled_relu"], eager_us=5000.0)],
               [], verdicts=verdicts)
    cast = load_cast(tmp_path / "b.cast")
    with torch.inference_mode():
        reference = net(x)
    for backend, want in ((lambda: cast.backend(net), 0), (lambda: cast.backend(net, mode="default"), 2),
                          (lambda: cast.backend(net, mode="reduce-overhead"), 0)):
        torch._dynamo.reset()
        cast.reset_stats()
        with torch.inference_mode():
            torch.testing.assert_close(torch.compile(net, backend=backend())(x), reference)
        cast.remove()
        assert cast.stats()[block.id]["hits"] == want
    torch._dynamo.reset()
    cast.reset_stats()
    with torch.inference_mode():
        cast.compile(net)(x)  # cast.compile knows its mode: the default one
    cast.remove()
    assert cast.stats()[block.id]["hits"] == 2


def test_compiled_graph_checks_what_tracing_cannot_see_and_falls_back(tmp_path: Path, artifacts) -> None:
    x = torch.randn(4, 8)
    head = softmax_card(x)
    failing = softmax_card(torch.randn(3, 8))
    build_cast(tmp_path / "f.cast", MODEL, [entry(head, SOFTMAX, artifacts["softmax"], eager_us=5000.0),
                                            entry(failing, FAILING, artifacts["failing"], eager_us=5000.0)], [],
               verdicts=compiled_kept(head, failing))
    cast = load_cast(tmp_path / "f.cast")
    torch._dynamo.reset()
    softmax = cast.compile(lambda t: torch.softmax(t, -1) * 2.0, dynamic=False)  # each shape its own graph
    offset = torch.randn(40)[8:].view(4, 8)  # the card's layout 32 bytes into a buffer: the same to a kernel
    unaligned = torch.randn(40)[1:33].view(4, 8)  # the card's shape and strides, not 16-byte aligned
    small = torch.randn(3, 8)
    with torch.inference_mode():
        torch.testing.assert_close(softmax(offset), torch.softmax(offset, -1) * 2.0)
        torch.testing.assert_close(softmax(unaligned), torch.softmax(unaligned, -1) * 2.0)
        torch.testing.assert_close(softmax(small), torch.softmax(small, -1) * 2.0)
    assert cast.stats()[head.id]["fallbacks"] == {"alignment": 1} and cast.stats()[head.id]["hits"] == 1
    assert cast.stats()[failing.id]["fallbacks"] == {"kernel_error": 1}


def test_training_graphs_keep_the_ops_own_gradient(net_cast) -> None:
    net, x, _, _, cast = net_cast
    net.train()
    x = x.clone().requires_grad_()
    net(x).pow(2).sum().backward()
    want = x.grad.clone()
    x.grad = None
    cast.compile(net)(x).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, want)


def test_an_applied_cast_leaves_the_tensors_of_a_trace_alone(tmp_path: Path, artifacts) -> None:
    """Compiling while a cast is applied eagerly: fake tensors reach the overrides of decomposed ops
    (softmax.int), which hand them to the original without looking at their data or counting them."""
    x = torch.randn(4, 8)
    card = aten_card("aten::softmax.int", [x, -1], {}, torch.softmax(x, -1))
    build_cast(tmp_path / "s.cast", MODEL, [entry(card, SOFTMAX, artifacts["softmax"], eager_us=5000.0)], [])
    cast = load_cast(tmp_path / "s.cast")
    torch._dynamo.reset()

    def fn(t: torch.Tensor) -> torch.Tensor:
        return torch.softmax(t * 2, -1) + 1

    with cast.applied_to():
        with torch.inference_mode():
            torch.testing.assert_close(torch.compile(fn)(x), fn(x))
        x_grad = x.clone().requires_grad_()
        torch.compile(fn)(x_grad).sum().backward()
        y = x.clone().requires_grad_()
        (torch.softmax(y, -1) * torch.arange(8.0)).sum().backward()  # decomposed: autograd records it
    want = x.clone().requires_grad_()
    (torch.softmax(want, -1) * torch.arange(8.0)).sum().backward()
    torch.testing.assert_close(y.grad, want.grad)
    assert x_grad.grad is not None
    assert cast.stats()[card.id] == {"calls": 1, "hits": 1, "fallbacks": {}}  # fn(x) eager: one hit


def test_a_decomposed_op_is_chosen_before_it_decomposes(tmp_path: Path, artifacts) -> None:
    """``softmax.int`` (CompositeImplicitAutograd) never reaches a decomposition table: the backend
    chooses it as the overload's Python kernel while AOTAutograd traces, and only while it does."""
    x = torch.randn(4, 8)
    card = aten_card("aten::softmax.int", [x, -1], {}, torch.softmax(x, -1))
    build_cast(tmp_path / "c.cast", MODEL, [entry(card, SOFTMAX, artifacts["softmax"], eager_us=5000.0)], [],
               verdicts=compiled_kept(card))
    cast = load_cast(tmp_path / "c.cast")
    torch._dynamo.reset()
    compiled = cast.compile(lambda t: torch.softmax(t, -1) * 2.0, dynamic=False)
    other = torch.randn(5, 8)
    needs_no_grad = x.clone().requires_grad_()  # grad is off: no gradient to keep, the kernel serves
    with torch.no_grad():
        torch.testing.assert_close(compiled(needs_no_grad), torch.softmax(x, -1) * 2.0)
        torch.testing.assert_close(compiled(other), torch.softmax(other, -1) * 2.0)
    assert cast.stats()[card.id] == {"calls": 1, "hits": 1, "fallbacks": {}}
    overload = torch.ops.aten.softmax.int
    assert torch._C.DispatchKey.CompositeImplicitAutograd not in overload.py_kernels
