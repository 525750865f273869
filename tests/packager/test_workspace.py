"""Kernels with a workspace (kf_workspace_bytes): the runtime allocates it, passes it last, never returns it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from packager import load_cast
from packager.abi import AbiError, KernelLibrary, pack_tensors
from packager.format import build_cast
from packager.guard_cost import guard_cost_us
from packager.launcher import CallDescriptors, KernelLauncher
from packager.synthetic import allocated_workspace_bytes
from tests.packager.conftest import KERNEL_PRELUDE, MODEL, compile_kernel, entry, softmax_card

ROWS, COLS = 4, 8

# Softmax of a [4, 8] float32 matrix keeping each row's max and sum in the workspace. It checks
# the trailing descriptor as the contract states it, and writes every scratch value it reads.
WORKSPACE_SOFTMAX = KERNEL_PRELUDE + """
static const int64_t ROWS = 4, COLS = 8;
extern "C" int64_t kf_workspace_bytes(void) { return ROWS * 2 * (int64_t)sizeof(float); }
KF {
  if (n_in != 1 || n_out != 2 || in[0].dtype != KF_F32) return 2;
  const kf_tensor *ws = &out[1];
  if (ws->ndim != 1 || ws->dtype != KF_U8 || ws->shape[0] < kf_workspace_bytes() || ws->stride[0] != 1) return 5;
  if (((uintptr_t)ws->data) & 15u) return 6;
  float *stats = (float *)ws->data;  /* [row] max, then [ROWS + row] sum */
  const float *x = (const float *)in[0].data; float *y = (float *)out[0].data;
  for (int64_t r = 0; r < ROWS; ++r) {
    stats[r] = x[r * COLS];
    for (int64_t c = 1; c < COLS; ++c) stats[r] = x[r * COLS + c] > stats[r] ? x[r * COLS + c] : stats[r];
    stats[ROWS + r] = 0.f;
    for (int64_t c = 0; c < COLS; ++c) stats[ROWS + r] += expf(x[r * COLS + c] - stats[r]);
  }
  for (int64_t r = 0; r < ROWS; ++r)
    for (int64_t c = 0; c < COLS; ++c) y[r * COLS + c] = expf(x[r * COLS + c] - stats[r]) / stats[ROWS + r];
  return 0;
}
"""

# Exports a workspace of 0 bytes: called exactly as a kernel without the export.
ZERO_WORKSPACE_RELU = KERNEL_PRELUDE + """
extern "C" int64_t kf_workspace_bytes(void) { return 0; }
KF {
  if (n_in != 1 || n_out != 1) return 2;
  const float *x = (const float *)in[0].data; float *y = (float *)out[0].data;
  for (int64_t i = 0; i < numel(&in[0]); ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
  return 0;
}
"""

NEGATIVE_WORKSPACE = KERNEL_PRELUDE + 'extern "C" int64_t kf_workspace_bytes(void) { return -8; }\nKF { return 0; }\n'


@pytest.fixture(scope="module")
def workspace_artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("workspace-kernels")
    sources = {"softmax": WORKSPACE_SOFTMAX, "relu": ZERO_WORKSPACE_RELU, "negative": NEGATIVE_WORKSPACE}
    for name, source in sources.items():
        compile_kernel(source, out, name)
    return {name: out / f"{name}.so" for name in sources}


def test_the_library_reads_the_optional_export(workspace_artifacts: dict[str, Path], artifacts) -> None:
    assert KernelLibrary(workspace_artifacts["softmax"]).workspace_bytes == ROWS * 2 * 4
    assert KernelLibrary(workspace_artifacts["relu"]).workspace_bytes == 0
    with pytest.raises(AbiError, match="kf_workspace_bytes returned -8"):
        KernelLibrary(workspace_artifacts["negative"])


def test_a_kernel_without_the_export_has_no_workspace(tmp_path: Path, artifacts: dict[str, bytes]) -> None:
    (tmp_path / "relu.so").write_bytes(artifacts["relu"])
    library = KernelLibrary(tmp_path / "relu.so")
    assert library.workspace_bytes == 0
    x = torch.randn(ROWS, COLS)
    card = softmax_card(x).model_dump()
    launcher = KernelLauncher(library, CallDescriptors(card["inputs"], card["outputs"]))
    assert launcher.descriptors.n_launch_outputs == 1 and launcher.descriptors.allocate_workspace(x.device) is None


def test_the_launcher_appends_a_fresh_workspace_and_returns_only_the_outputs(
        workspace_artifacts: dict[str, Path]) -> None:
    x = torch.randn(ROWS, COLS)
    card = softmax_card(x).model_dump()
    descriptors = CallDescriptors(card["inputs"], card["outputs"])
    launcher = KernelLauncher(KernelLibrary(workspace_artifacts["softmax"]), descriptors)
    assert launcher.descriptors.workspace_bytes == 32 and launcher.descriptors.n_launch_outputs == 2
    assert descriptors.workspace_bytes == 0  # the card's descriptors are not changed in place
    for _ in range(3):
        status, outputs = launcher.run([x], x.device)
        assert status == 0 and len(outputs) == 1
        torch.testing.assert_close(outputs[0], torch.softmax(x, -1))
    # The caller may pass its own workspace, in any state: the kernel writes before it reads.
    y = torch.full_like(x, float("nan"))
    garbage = torch.full((32,), 0xFF, dtype=torch.uint8)
    assert launcher.launch([x], [y], garbage) == 0
    torch.testing.assert_close(y, torch.softmax(x, -1))
    with pytest.raises(ValueError, match="needs a workspace of 32 bytes"):
        launcher.descriptors.prepare([x], [y])


def test_descriptors_packed_once_call_the_kernel_as_built_per_call(workspace_artifacts: dict[str, Path]) -> None:
    library = KernelLibrary(workspace_artifacts["softmax"])
    x = torch.randn(ROWS, COLS)
    y, workspace = torch.full_like(x, float("nan")), torch.zeros(32, dtype=torch.uint8)
    ins, outs = pack_tensors([x]), pack_tensors([y, workspace])
    for _ in range(2):  # the same bytes serve every call while the tensors keep their storage
        y.fill_(float("nan"))
        assert library.launch_packed(ins, 1, outs, 2, None) == 0
        torch.testing.assert_close(y, torch.softmax(x, -1))
    assert len(pack_tensors([])) == len(pack_tensors([x]))  # kf_launch gets one zeroed descriptor for none
    assert library.launch_packed(ins, 1, pack_tensors([y]), 1, None) == 2  # the kernel sees the missing workspace


def test_a_cast_runs_a_kernel_with_a_workspace(tmp_path: Path, workspace_artifacts: dict[str, Path]) -> None:
    x = torch.randn(ROWS, COLS)
    card = softmax_card(x)
    path = tmp_path / "workspace.cast"
    build_cast(path, MODEL, [entry(card, WORKSPACE_SOFTMAX, workspace_artifacts["softmax"].read_bytes())], [])
    cast = load_cast(path)
    assert list(cast.kernels) == [card.id], cast.skipped
    inputs = [torch.randn(ROWS, COLS) for _ in range(3)]
    expected = [torch.softmax(fresh, -1) for fresh in inputs]
    with cast.applied_to(), torch.inference_mode():
        got = [torch.softmax(fresh, -1) for fresh in inputs]
    for mine, want in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, want)
    assert cast.stats()[card.id] == {"calls": 3, "hits": 3, "fallbacks": {}}


def test_a_cast_skips_a_kernel_whose_workspace_size_is_negative(tmp_path: Path,
                                                                  workspace_artifacts: dict[str, Path]) -> None:
    card = softmax_card(torch.randn(ROWS, COLS))
    path = tmp_path / "negative.cast"
    build_cast(path, MODEL, [entry(card, NEGATIVE_WORKSPACE, workspace_artifacts["negative"].read_bytes())], [])
    cast = load_cast(path)
    assert not cast.kernels and "kf_workspace_bytes returned -8" in cast.skipped[0].reason


def test_the_guard_cost_includes_the_workspace_allocation() -> None:
    card = softmax_card(torch.randn(ROWS, COLS)).model_dump()
    assert allocated_workspace_bytes(card, 0) == 0 and allocated_workspace_bytes(card, 1 << 20) == 1 << 20
    assert allocated_workspace_bytes({**card, "device": "cuda"}, 1 << 30) == 1  # the caching allocator's cost
    plain, with_workspace = guard_cost_us(card), guard_cost_us(card, workspace_bytes=32)
    assert 0 < plain < 1000 and 0 < with_workspace < 1000
