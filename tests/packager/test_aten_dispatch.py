from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from packager import load_cast
from packager.format import build_cast
from packager.native.build import ENABLE_ENV
from packager.variant import variant_key
from tests.packager.conftest import FAILING, MODEL, RELU, SOFTMAX, aten_card, entry, relu_card
from tests.packager.test_guard import unaligned


def test_hits_run_the_kernel_and_match_eager(relu_softmax_cast) -> None:
    cast = load_cast(relu_softmax_cast.path)
    x = relu_softmax_cast.x
    with torch.inference_mode():
        want_relu, want_softmax = torch.relu(x), torch.softmax(x, -1)
        with cast.applied_to():
            got_relu, got_softmax = torch.relu(x), torch.softmax(x, dim=-1)
    assert torch.equal(got_relu, want_relu)
    torch.testing.assert_close(got_softmax, want_softmax)
    assert got_softmax.stride() == want_softmax.stride()
    stats = cast.stats()
    assert stats[relu_softmax_cast.relu.id] == {"calls": 1, "hits": 1, "fallbacks": {}}
    assert stats[relu_softmax_cast.softmax.id]["hits"] == 1


@pytest.mark.parametrize("native", ["1", "0"], ids=["native front", "python override"])
def test_every_kind_of_guard_miss_falls_back_to_eager(relu_softmax_cast, native, monkeypatch) -> None:
    monkeypatch.setenv(ENABLE_ENV, native)
    cast = load_cast(relu_softmax_cast.path)
    x = relu_softmax_cast.x
    misses = {
        "shape": torch.randn(5, 8),
        "stride": torch.randn(4, 16)[:, ::2],
        "dtype": x.double(),
        "alignment": unaligned((4, 8)),
    }
    shifted = torch.randn(36)[4:].view(4, 8)
    with torch.inference_mode():
        expected = [torch.softmax(tensor, -1) for tensor in misses.values()]
        shifted_want = torch.softmax(shifted, -1)
    with torch.inference_mode(), cast.applied_to():
        assert all((o.front is not None) == (native == "1") for o in cast._aten)
        for tensor, want in zip(misses.values(), expected, strict=True):
            torch.testing.assert_close(torch.softmax(tensor, -1), want)
        torch.softmax(x, 0)  # a different non-tensor argument
        torch.softmax(x.to("meta"), -1)  # a device the kernel was not built for never reaches the CPU override
        # the card's layout 16 bytes into a buffer: a kernel reads it as it reads x, so it is a hit
        torch.testing.assert_close(torch.softmax(shifted, -1), shifted_want)
    stats = cast.stats()[relu_softmax_cast.softmax.id]
    assert stats["fallbacks"] == {**dict.fromkeys(misses, 1), "args": 1} and stats["hits"] == 1


def test_kernels_of_one_op_each_take_their_own_shape_and_other_shapes_miss_them_all(
    tmp_path: Path, artifacts
) -> None:
    small, large, other = torch.randn(4, 8), torch.randn(6, 8), torch.randn(5, 8)
    cards = [relu_card(small), relu_card(large)]
    build_cast(tmp_path / "two.cast", MODEL, [entry(c, RELU, artifacts["relu"]) for c in cards], [])
    cast = load_cast(tmp_path / "two.cast")
    with torch.inference_mode(), cast.applied_to():
        results = [torch.relu(t) for t in (small, large, other, large)]
        torch.relu(small.double())  # the first argument's shape is a kernel's, its dtype is not
    assert all(torch.equal(r, torch.relu(t)) for r, t in zip(results, (small, large, other, large), strict=True))
    stats = cast.stats()
    assert stats[cards[0].id] == {"calls": 3, "hits": 1, "fallbacks": {"shape": 1, "dtype": 1}}
    assert stats[cards[1].id] == {"calls": 4, "hits": 2, "fallbacks": {"shape": 2}}


def test_failing_kernel_falls_back_and_is_counted(tmp_path: Path, artifacts) -> None:
    x = torch.randn(4, 8)
    card = relu_card(x)
    build_cast(tmp_path / "f.cast", MODEL, [entry(card, FAILING, artifacts["failing"])], [])
    cast = load_cast(tmp_path / "f.cast")
    with torch.inference_mode(), cast.applied_to():
        assert torch.equal(torch.relu(x), x.clamp(min=0))
        assert torch.equal(torch.relu(x), x.clamp(min=0))
    assert cast.stats()[card.id] == {"calls": 2, "hits": 0, "fallbacks": {"kernel_error": 2}}


class _Capture(TorchDispatchMode):
    """Records the (op, args, kwargs) of each call, as capture does."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((f"{func._schema.name}.{func._overloadname}", args, kwargs or {}))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    ("grad_mode", "captured_op"),
    [(torch.inference_mode, "aten::softmax.int"), (torch.no_grad, "aten::_softmax.default")],
)
def test_a_card_captured_under_a_dispatch_mode_matches_the_live_override(
    tmp_path: Path, artifacts, grad_mode, captured_op: str
) -> None:
    x = torch.randn(4, 8)
    mode = _Capture()
    with grad_mode(), mode:
        torch.nn.functional.softmax(x, dim=-1)
    op, args, kwargs = mode.calls[-1]  # the innermost call: what reaches the CPU kernel
    assert op == captured_op
    card = aten_card(op, list(args), kwargs, torch.softmax(x, -1))
    assert card.id == variant_key(op, list(args), kwargs).id
    build_cast(tmp_path / "c.cast", MODEL, [entry(card, SOFTMAX, artifacts["softmax"])], [])
    cast = load_cast(tmp_path / "c.cast")
    with grad_mode(), cast.applied_to():
        got = torch.nn.functional.softmax(x, dim=-1)
    torch.testing.assert_close(got, torch.softmax(x, -1))
    assert cast.stats()[card.id] == {"calls": 1, "hits": 1, "fallbacks": {}}


def test_autograd_still_works_through_an_overridden_op(relu_softmax_cast) -> None:
    cast = load_cast(relu_softmax_cast.path)
    x = relu_softmax_cast.x.clone().requires_grad_()
    with cast.applied_to():
        torch.softmax(x, -1)[:, 0].sum().backward()
    reference = relu_softmax_cast.x.clone().requires_grad_()
    torch.softmax(reference, -1)[:, 0].sum().backward()
    torch.testing.assert_close(x.grad, reference.grad)
    assert cast.stats()[relu_softmax_cast.softmax.id]["hits"] == 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_graphs_call_the_override(relu_softmax_cast, backend: str) -> None:
    torch._dynamo.reset()
    cast = load_cast(relu_softmax_cast.path)
    x = relu_softmax_cast.x
    fn = torch.compile(lambda t: torch.softmax(torch.relu(t), -1), backend=backend, fullgraph=True)
    with torch.inference_mode(), cast.applied_to():
        got = fn(x)
    torch.testing.assert_close(got, torch.softmax(torch.relu(x), -1))
    assert cast.stats()[relu_softmax_cast.relu.id]["hits"] == 1


def test_inductor_bypasses_aten_overrides_and_stays_correct(relu_softmax_cast) -> None:
    torch._dynamo.reset()
    cast = load_cast(relu_softmax_cast.path)
    x = relu_softmax_cast.x
    fn = torch.compile(lambda t: torch.softmax(torch.relu(t), -1), backend="inductor")
    with torch.inference_mode(), cast.applied_to():
        got = fn(x)
    torch.testing.assert_close(got, torch.softmax(torch.relu(x), -1))
    assert cast.stats()[relu_softmax_cast.relu.id]["calls"] == 0  # inductor generated its own code


@pytest.mark.parametrize("native", ["1", "0"], ids=["native front", "python override"])
def test_nested_and_sparse_tensors_get_what_eager_gives_them(tmp_path: Path, artifacts, native, monkeypatch) -> None:
    """A decomposed op's override sees every layout: a nested tensor (no sizes) and a sparse one (no
    strides) are nobody's card, and must come back as eager returns them, or raise as eager raises."""
    monkeypatch.setenv(ENABLE_ENV, native)
    x = torch.randn(4, 8)
    card = aten_card("aten::softmax.int", [x, -1], {}, torch.softmax(x, -1))
    build_cast(tmp_path / "s.cast", MODEL, [entry(card, SOFTMAX, artifacts["softmax"])], [])
    cast = load_cast(tmp_path / "s.cast")
    nested = torch.nested.nested_tensor([torch.randn(3, 8), torch.randn(2, 8)])
    with torch.inference_mode():
        want = torch.softmax(nested, -1)
        with pytest.raises(NotImplementedError) as eager_error:
            torch.softmax(x.to_sparse(), -1)
        with cast.applied_to():
            got = torch.softmax(nested, -1)
            with pytest.raises(NotImplementedError) as cast_error:
                torch.softmax(x.to_sparse(), -1)
    for g, w in zip(got.unbind(), want.unbind(), strict=True):
        torch.testing.assert_close(g, w)
    assert str(cast_error.value).splitlines()[0] == str(eager_error.value).splitlines()[0]
    assert cast.stats()[card.id]["hits"] == 0
