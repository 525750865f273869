import threading
from pathlib import Path

import pytest
import torch

from packager import CastApplyError, load_cast
from packager.format import build_cast
from tests.packager.conftest import MODEL, RELU, SOFTMAX, aten_card, entry, relu_card, softmax_card


def test_kernels_for_another_architecture_are_skipped_not_fatal(tmp_path: Path, artifacts) -> None:
    x = torch.randn(4, 8)
    relu, softmax = relu_card(x), softmax_card(x)
    kernels = [
        entry(relu, RELU, artifacts["relu"]),
        entry(softmax, "// cuda", b"\x7fELF not for this machine", arch="sm_999"),
        entry(softmax, SOFTMAX, artifacts["softmax"], arch="cpu-riscv128"),
    ]
    build_cast(tmp_path / "multi.cast", MODEL, kernels, [])
    cast = load_cast(tmp_path / "multi.cast")
    assert list(cast.kernels) == [relu.id]
    assert sorted(s.arch for s in cast.skipped) == ["cpu-riscv128", "sm_999"]
    assert all("built for" in s.reason for s in cast.skipped)
    with cast.applied_to(), torch.inference_mode():
        assert torch.equal(torch.softmax(x, -1), torch.softmax(x.clone(), -1))
    assert cast.stats()[relu.id]["calls"] == 0


def test_unloadable_artifact_is_skipped_with_the_reason(tmp_path: Path, artifacts) -> None:
    x = torch.randn(4, 8)
    build_cast(tmp_path / "bad.cast", MODEL, [entry(relu_card(x), RELU, b"not a shared object")], [])
    cast = load_cast(tmp_path / "bad.cast")
    assert not cast.kernels and "not loadable" in cast.skipped[0].reason


def test_apply_twice_is_an_error_and_remove_apply_cycles_work(relu_softmax_cast) -> None:
    cast = load_cast(relu_softmax_cast.path)
    x = relu_softmax_cast.x
    relu_id = relu_softmax_cast.relu.id
    for cycle in range(3):
        cast.apply()
        with pytest.raises(CastApplyError, match="already applied"):
            cast.apply()
        with torch.inference_mode():
            assert torch.equal(torch.relu(x), x.clamp(min=0))
        cast.remove()
        with torch.inference_mode():
            torch.relu(x)  # eager again: not counted
        assert cast.stats()[relu_id] == {"calls": cycle + 1, "hits": cycle + 1, "fallbacks": {}}
    cast.remove()  # removing an unapplied cast does nothing
    assert not cast.applied


def test_a_cast_without_some_kernels_applies_only_the_others_and_restores_them_after(relu_softmax_cast) -> None:
    cast = load_cast(relu_softmax_cast.path)
    x, relu_id, softmax_id = relu_softmax_cast.x, relu_softmax_cast.relu.id, relu_softmax_cast.softmax.id
    with cast.without({relu_id}):
        assert set(cast.kernels) == {softmax_id}
        with cast.applied_to(), torch.inference_mode():
            torch.relu(x)
            torch.softmax(x, dim=-1)
        with cast.applied_to(), pytest.raises(CastApplyError, match="applied; restrict it before applying"), \
                cast.without({softmax_id}):
            pass
    assert set(cast.kernels) == {relu_id, softmax_id}
    assert relu_id not in cast.stats() or cast.stats()[relu_id]["hits"] == 0
    assert cast.stats()[softmax_id]["hits"] == 1
    with cast.applied_to(), torch.inference_mode():
        torch.relu(x)
    assert cast.stats()[relu_id]["hits"] == 1


def test_two_threads_calling_at_once_keep_exact_counters(relu_softmax_cast) -> None:
    cast = load_cast(relu_softmax_cast.path)
    x, other = relu_softmax_cast.x, torch.randn(3, 8)
    calls_per_thread = 300
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with torch.inference_mode():
                for _ in range(calls_per_thread):
                    assert torch.equal(torch.relu(x), x.clamp(min=0))
                    torch.relu(other)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    with cast.applied_to():
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert cast.stats()[relu_softmax_cast.relu.id] == {
        "calls": 4 * calls_per_thread, "hits": 2 * calls_per_thread, "fallbacks": {"shape": 2 * calls_per_thread},
    }


def test_close_deletes_the_extracted_artifacts(relu_softmax_cast) -> None:
    cast = load_cast(relu_softmax_cast.path)
    workdir = next(iter(cast.kernels.values())).launcher.library.path.parent
    assert workdir.is_dir() and workdir.stat().st_mode & 0o077 == 0
    cast.close()
    assert not workdir.exists()


def _topk_cast(path: Path, artifacts, built_with: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A cast of a relu kernel and a topk kernel, built as if under torch ``built_with``: (relu id, topk id)."""
    x = torch.randn(4, 8)
    values, _ = torch.topk(x, 3)
    topk = aten_card("aten::topk.default", [x, 3], {}, values)
    topk = topk.model_copy(update={"outputs": [*topk.outputs, topk.outputs[0].model_copy(update={"dtype": "int64"})]})
    relu = relu_card(x)
    with monkeypatch.context() as patched:
        patched.setattr(torch, "__version__", built_with)
        build_cast(path, MODEL, [entry(relu, RELU, artifacts["relu"]), entry(topk, RELU, artifacts["relu"])], [])
    return relu.id, topk.id


def test_tie_order_kernels_from_another_torch_release_are_skipped(tmp_path: Path, artifacts,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    relu_id, topk_id = _topk_cast(tmp_path / "old.cast", artifacts, "1.13.1+cu117", monkeypatch)
    cast = load_cast(tmp_path / "old.cast")
    assert cast.manifest.torch_version == "1.13.1+cu117"
    assert list(cast.kernels) == [relu_id]
    (skipped,) = cast.skipped
    assert skipped.card_id == topk_id
    assert "order of ties as torch 1.13 orders them" in skipped.reason and torch.__version__ in skipped.reason


def test_tie_order_kernels_of_the_same_release_load(tmp_path: Path, artifacts, monkeypatch: pytest.MonkeyPatch) -> None:
    local_build = torch.__version__.split("+")[0] + "+local"  # another build of the same release
    _, topk_id = _topk_cast(tmp_path / "same.cast", artifacts, local_build, monkeypatch)
    cast = load_cast(tmp_path / "same.cast")
    assert topk_id in cast.kernels and not cast.skipped
