"""The eager guard's native front: hits and misses decided in C++, the rest left to the Python override."""

import torch

from packager import load_cast
from packager.format import build_cast
from packager.native import build as native_build
from tests.packager.conftest import (
    FAILING,
    KERNEL_PRELUDE,
    MODEL,
    RELU,
    SOFTMAX,
    aten_card,
    compile_kernel,
    entry,
    relu_card,
)

DOUBLE = RELU.replace("x[i] > 0.f ? x[i] : 0.f", "x[i] * 2.f")


def _fronts(cast) -> dict[str, object]:
    return {override.op: override.front for override in cast._aten}


def _python_calls(cast, monkeypatch) -> list[str]:
    """Records every call that reaches a Python override (the front hands it the calls it does not judge)."""
    seen: list[str] = []
    for override in cast._aten:
        original = type(override).__call__

        def spy(self, keyset, *args, _original=original, **kwargs):
            seen.append(self.op)
            return _original(self, keyset, *args, **kwargs)

        monkeypatch.setattr(type(override), "__call__", spy)
    return seen


def _assert_eager_results_without_python(cast, op: str, calls, x: torch.Tensor, monkeypatch) -> None:
    """Each call on ``x`` returns eager's result exactly with ``cast`` applied, and its op's front
    decides every one of them without reaching the Python override."""
    with torch.inference_mode():
        want = [call(x) for call in calls]
        with cast.applied_to():
            assert _fronts(cast)[op] is not None
            seen = _python_calls(cast, monkeypatch)
            got = [call(x) for call in calls]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and torch.equal(g, w)
    assert seen == []


def test_hits_and_misses_are_decided_without_python(relu_softmax_cast, monkeypatch) -> None:
    cast = load_cast(relu_softmax_cast.path)
    x, other = relu_softmax_cast.x, torch.randn(5, 8)
    with torch.inference_mode():
        want = torch.softmax(x, -1), torch.relu(x), torch.softmax(other, -1), torch.relu(other)
        with cast.applied_to():
            assert all(front is not None for front in _fronts(cast).values())
            seen = _python_calls(cast, monkeypatch)
            got = torch.softmax(x, dim=-1), torch.relu(x), torch.softmax(other, -1), torch.relu(other)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    assert seen == []
    stats = cast.stats()
    assert stats[relu_softmax_cast.relu.id] == {"calls": 2, "hits": 1, "fallbacks": {"shape": 1}}
    assert stats[relu_softmax_cast.softmax.id] == {"calls": 2, "hits": 1, "fallbacks": {"shape": 1}}


def test_calls_it_does_not_judge_reach_the_python_override(tmp_path, artifacts, monkeypatch) -> None:
    x = torch.randn(4, 8)
    card = aten_card("aten::softmax.int", [x, -1], {}, torch.softmax(x, -1))  # a decomposed op
    build_cast(tmp_path / "s.cast", MODEL, [entry(card, SOFTMAX, artifacts["softmax"])], [])
    cast = load_cast(tmp_path / "s.cast")
    with cast.applied_to():
        assert _fronts(cast)["aten::softmax.int"] is not None
        seen = _python_calls(cast, monkeypatch)
        with torch.inference_mode():
            torch.testing.assert_close(torch.softmax(x, -1), torch.softmax(x.double(), -1).float())
        assert seen == [] and cast.stats()[card.id]["hits"] == 1
        with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
            assert torch.softmax(mode.from_tensor(x), -1).shape == x.shape
        assert seen == ["aten::softmax.int"]  # a fake tensor: the Python override decomposes it
        leaf = x.clone().requires_grad_()
        torch.softmax(leaf, -1).sum().backward()  # autograd records the decomposition: the original runs
        assert leaf.grad is not None and seen == ["aten::softmax.int"]
    assert cast.stats()[card.id]["hits"] == 1


def test_a_kernel_that_fails_counts_an_error_and_eager_serves(tmp_path, artifacts) -> None:
    x = torch.randn(4, 8)
    card = relu_card(x)
    build_cast(tmp_path / "f.cast", MODEL, [entry(card, FAILING, artifacts["failing"])], [])
    cast = load_cast(tmp_path / "f.cast")
    with torch.inference_mode(), cast.applied_to():
        assert _fronts(cast)["aten::relu.default"] is not None
        torch.testing.assert_close(torch.relu(x), x.clamp_min(0))
    assert cast.stats()[card.id] == {"calls": 1, "hits": 0, "fallbacks": {"kernel_error": 1}}


def test_a_call_with_a_python_number_in_a_tensor_slot_is_served_as_eager(tmp_path, artifacts) -> None:
    x = torch.randn(4, 8)
    card = aten_card("aten::add.Tensor", [x, x], {}, x + x)
    build_cast(tmp_path / "a.cast", MODEL, [entry(card, RELU, artifacts["relu"])], [])
    cast = load_cast(tmp_path / "a.cast")
    calls = (lambda t: t + 1e-5, lambda t: 1 + t, lambda t: t + torch.tensor(2), lambda t: t.half() + 2.5)
    with torch.inference_mode():
        want = [call(x) for call in calls]
        with cast.applied_to():
            got = [call(x) for call in calls]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
        assert g.dtype == w.dtype
    assert cast.stats()[card.id]["hits"] == 0


def test_the_python_number_a_card_fixes_is_matched_in_cpp(tmp_path, monkeypatch) -> None:
    """``x * 2`` reaches the front with a wrapped number: its value and kind are the card's, so
    ``2 * x`` hits too, and any other number, or a real 0-dim tensor, runs the original."""
    x = torch.randn(4, 8)
    card = aten_card("aten::mul.Tensor", [x, 2], {}, x * 2)
    build_cast(tmp_path / "m.cast", MODEL, [entry(card, DOUBLE, compile_kernel(DOUBLE, tmp_path, "double"))], [])
    cast = load_cast(tmp_path / "m.cast")
    calls = (lambda t: t * 2, lambda t: 2 * t, lambda t: t * 3, lambda t: t * 2.0, lambda t: t * True,
             lambda t: t * torch.tensor(2), lambda t: t.half() * 2)
    _assert_eager_results_without_python(cast, "aten::mul.Tensor", calls, x, monkeypatch)
    assert cast.stats()[card.id] == {"calls": 7, "hits": 2, "fallbacks": {"args": 4, "dtype": 1}}


def test_remove_restores_the_original_and_a_second_apply_installs_afresh(relu_softmax_cast) -> None:
    cast = load_cast(relu_softmax_cast.path)
    x = relu_softmax_cast.x
    with torch.inference_mode():
        with cast.applied_to():
            torch.relu(x)
        torch.relu(x)  # removed: neither the front nor the Python override sees it
        with cast.applied_to():
            torch.relu(x)
    assert cast.stats()[relu_softmax_cast.relu.id] == {"calls": 2, "hits": 2, "fallbacks": {}}


def test_without_the_library_the_python_override_serves_alone(relu_softmax_cast, monkeypatch) -> None:
    monkeypatch.setenv(native_build.ENABLE_ENV, "0")
    cast = load_cast(relu_softmax_cast.path)
    x = relu_softmax_cast.x
    with torch.inference_mode():
        want = torch.softmax(x, -1)
        with cast.applied_to():
            assert set(_fronts(cast).values()) == {None}
            torch.testing.assert_close(torch.softmax(x, -1), want)
    assert cast.stats()[relu_softmax_cast.softmax.id]["hits"] == 1


# out[r][c] = x[rows(r)][cols(c)]: a gather by an int64 index along the dim the card's output
# shape says (``x[idx]`` indexes rows, ``x[:, idx]`` columns); strides read from the descriptors.
GATHER = KERNEL_PRELUDE + """
KF {
  if (n_in != 2 || n_out != 1 || in[0].dtype != KF_F32 || in[1].dtype != KF_I64) return 2;
  const float *x = (const float *)in[0].data; const int64_t *idx = (const int64_t *)in[1].data;
  float *y = (float *)out[0].data;
  int by_rows = out[0].shape[1] == in[0].shape[1] && out[0].shape[0] == in[1].shape[0];
  for (int64_t r = 0; r < out[0].shape[0]; ++r)
    for (int64_t c = 0; c < out[0].shape[1]; ++c) {
      int64_t xr = by_rows ? idx[r] : r, xc = by_rows ? c : idx[c];
      y[r * out[0].stride[0] + c * out[0].stride[1]] = x[xr * in[0].stride[0] + xc * in[0].stride[1]];
    }
  return 0;
}
"""


def test_an_index_by_tensors_and_nones_is_matched_in_cpp(tmp_path, monkeypatch) -> None:
    """``x[idx]`` and ``x[:, idx]`` reach ``aten::index.Tensor`` with a ``Tensor?[]`` of tensors and
    Nones: each card's pattern of them is matched in C++, and any other pattern, index dtype or
    shape runs the original, as the same call would without the cast."""
    x, idx = torch.randn(4, 6), torch.tensor([3, 0, 3])
    rows = aten_card("aten::index.Tensor", [x, [idx]], {}, x[idx])
    cols = aten_card("aten::index.Tensor", [x, [None, idx]], {}, x[:, idx])
    artifact = compile_kernel(GATHER, tmp_path, "gather")
    build_cast(tmp_path / "i.cast", MODEL, [entry(rows, GATHER, artifact), entry(cols, GATHER, artifact)], [])
    cast = load_cast(tmp_path / "i.cast")
    calls = (lambda t: t[idx], lambda t: t[:, idx], lambda t: t[idx, idx], lambda t: t[idx[:2]],
             lambda t: t[idx.int()], lambda t: t[torch.tensor([True, False, True, True])], lambda t: t[:, idx][idx])
    _assert_eager_results_without_python(cast, "aten::index.Tensor", calls, x, monkeypatch)
    assert cast.stats()[rows.id] == {"calls": 6, "hits": 1, "fallbacks": {"args": 1, "shape": 3, "dtype": 1}}
    assert cast.stats()[cols.id]["hits"] == 2
