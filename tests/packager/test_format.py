import dataclasses
import json
from pathlib import Path

import pytest
import torch

from packager import CastBuildError, CastCorruptError, load_cast
from packager.archive import read_archive
from packager.format import FallbackEntry, build_cast
from packager.manifest import KEPT, PRUNED, UNMEASURED, CastManifest, ModeVerdict
from packager.runtime import host_cpu_arch
from tests.packager.conftest import MODEL, RELU, SOFTMAX, entry, relu_card, softmax_card


def test_manifest_records_identity_measurements_and_provenance(relu_softmax_cast) -> None:
    manifest = CastManifest.from_json(read_archive(relu_softmax_cast.path).files["manifest.json"])
    assert manifest.model == MODEL and manifest.format_version == 1
    assert manifest.archs == (host_cpu_arch(),) and manifest.toolchains == ("g++ 12",)
    assert manifest.producer.startswith("kernel-forge") and manifest.created_at.endswith("+00:00")
    assert manifest.torch_version == torch.__version__  # the eager every kernel was proved against
    relu = next(k for k in manifest.kernels if k.card_id == relu_softmax_cast.relu.id)
    assert relu.audit_class == "custom" and relu.op == "aten::relu.default"
    assert relu.card["key"] == relu_softmax_cast.relu.key
    assert relu.eager_latency_us == 1000.0 and relu.latency_us == 10.0 and relu.rel_l2_error == 1e-7
    assert 0 < relu.guard_cost_us < 990
    assert relu.effective_speedup == pytest.approx(1000 / (10 + relu.guard_cost_us), 1e-3)
    assert relu.source_path.endswith("source.cpp") and relu.compiler_flags.startswith("-O3")
    files = read_archive(relu_softmax_cast.path).files
    assert files[relu.source_path].decode() == RELU
    assert [f.reason for f in manifest.fallbacks] == ["no kernel beat eager"]


def test_kernel_whose_speedup_does_not_survive_the_guard_is_left_on_eager(tmp_path: Path, artifacts) -> None:
    x = torch.randn(4, 8)
    marginal = entry(relu_card(x), RELU, artifacts["relu"], eager_us=10.0, kernel_us=9.99)  # 1.001x before the guard
    strong = entry(softmax_card(x), SOFTMAX, artifacts["softmax"], eager_us=1000.0, kernel_us=100.0)
    manifest = build_cast(tmp_path / "m.cast", MODEL, [marginal, strong], [])
    assert [k.card_id for k in manifest.kernels] == [strong.card_id]
    (dropped,) = manifest.fallbacks
    assert dropped.card_id == marginal.card_id and dropped.audit_class == "fallback"
    assert "guard" in dropped.reason and "1.001x" in dropped.reason
    assert list(load_cast(tmp_path / "m.cast").kernels) == [strong.card_id]


def test_op_whose_misses_cost_more_than_its_kernels_save_stays_on_eager(tmp_path: Path, artifacts) -> None:
    card = relu_card(torch.randn(4, 8)).model_copy(update={"call_count": 2})
    kernel = entry(card, RELU, artifacts["relu"], eager_us=60.0, kernel_us=20.0)  # saves about 2 x 40 us
    other_relu_calls = FallbackEntry("other", "aten::relu.default", "no proposal for this card", calls=5000)
    manifest = build_cast(tmp_path / "a.cast", MODEL, [kernel], [other_relu_calls])
    assert not manifest.kernels
    reason = next(f.reason for f in manifest.fallbacks if f.card_id == card.id)
    assert "aten::relu.default" in reason and "5000 calls left on eager" in reason

    few_misses = dataclasses.replace(other_relu_calls, calls=1)
    assert [k.card_id for k in build_cast(tmp_path / "b.cast", MODEL, [kernel], [few_misses]).kernels] == [card.id]
    other_op = dataclasses.replace(other_relu_calls, op="aten::gelu.default")
    assert build_cast(tmp_path / "c.cast", MODEL, [kernel], [other_op]).kernels


def test_min_speedup_drops_slower_kernels(tmp_path: Path, artifacts) -> None:
    x = torch.randn(4, 8)
    kernel = entry(relu_card(x), RELU, artifacts["relu"], eager_us=1000.0, kernel_us=400.0)
    assert build_cast(tmp_path / "a.cast", MODEL, [kernel], []).kernels
    manifest = build_cast(tmp_path / "b.cast", MODEL, [kernel], [], min_speedup=3.0)
    assert not manifest.kernels and "at least 3x" in manifest.fallbacks[0].reason


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"source_sha256": "0" * 64}, "source_sha256 does not match"),
        ({"arch": "sm_90"}, "does not fit backend 'cpu'"),
        ({"audit_class": "fallback"}, "audit class 'fallback'"),
        ({"card_json": "{not json"}, "card_json is not valid JSON"),
        ({"card_id": "../evil"}, "not a safe name"),
        ({"latency_us": float("nan")}, "latency_us must be a positive finite number"),
        ({"artifact": b""}, "artifact is empty"),
        ({"op": "aten::gelu.default"}, "id/kind/op do not match"),
    ],
)
def test_bad_entry_is_named_and_nothing_is_written(tmp_path: Path, artifacts, change, message) -> None:
    good = entry(relu_card(torch.randn(4, 8)), RELU, artifacts["relu"])
    path = tmp_path / "out.cast"
    path.write_bytes(b"previous build")
    with pytest.raises(CastBuildError, match=message):
        build_cast(path, MODEL, [dataclasses.replace(good, **change)], [])
    assert path.read_bytes() == b"previous build"


def test_card_whose_key_is_not_its_id_is_refused(tmp_path: Path, artifacts) -> None:
    card = relu_card(torch.randn(4, 8))
    wrong = json.loads(card.to_json())
    wrong["key"]["tensors"][0]["shape"] = [5, 8]
    bad = dataclasses.replace(entry(card, RELU, artifacts["relu"]), card_json=json.dumps(wrong))
    with pytest.raises(CastBuildError, match="the card's key has id"):
        build_cast(tmp_path / "x.cast", MODEL, [bad], [])


def test_same_card_and_arch_twice_is_refused(tmp_path: Path, artifacts) -> None:
    kernel = entry(relu_card(torch.randn(4, 8)), RELU, artifacts["relu"])
    with pytest.raises(CastBuildError, match="second kernel for the same card and arch"):
        build_cast(tmp_path / "x.cast", MODEL, [kernel, kernel], [])


def test_signed_build_verifies_with_its_key(tmp_path: Path, artifacts) -> None:
    kernel = entry(relu_card(torch.randn(4, 8)), RELU, artifacts["relu"])
    build_cast(tmp_path / "s.cast", MODEL, [kernel], [FallbackEntry("c", "aten::mm.default", "slower")],
               signing_key=b"k3y")
    cast = load_cast(tmp_path / "s.cast", key=b"k3y")
    assert cast.signed and cast.signature_verified and cast.fallbacks[0].reason == "slower"


def test_each_mode_has_its_verdict_and_a_kernel_no_mode_uses_is_a_fallback(tmp_path: Path, artifacts) -> None:
    """Compiled graphs pay no guard: a kernel the guard's cost rules out of eager calls is still
    packaged where compiled use was measured and kept; unmeasured, or slower than eager on its
    own, it is not."""
    small, large, slow = torch.randn(4, 8), torch.randn(6, 8), torch.randn(5, 8)
    guard_bound = relu_card(small)  # 1.1 us eager: any guard makes it a loss in eager calls
    unmeasured = relu_card(large)
    slower = softmax_card(slow)
    verdicts = {
        (guard_bound.id, "compiled"): ModeVerdict(KEPT, "faster compiled"),
        (slower.id, "compiled"): ModeVerdict(KEPT, "faster compiled"),
        (unmeasured.id, "eager"): ModeVerdict(PRUNED, "the model ran slower with it"),
    }
    manifest = build_cast(tmp_path / "modes.cast", MODEL, [
        entry(guard_bound, RELU, artifacts["relu"], eager_us=1.1, kernel_us=1.0),
        entry(unmeasured, RELU, artifacts["relu"]),
        entry(slower, SOFTMAX, artifacts["softmax"], eager_us=1.0, kernel_us=2.0),
    ], [], verdicts=verdicts)
    (kernel,) = manifest.kernels
    assert kernel.card_id == guard_bound.id
    assert kernel.eager.verdict == PRUNED and "with the guard's" in kernel.eager.reason
    assert kernel.compiled == ModeVerdict(KEPT, "faster compiled")
    assert kernel.cuda_graphs == ModeVerdict(UNMEASURED)  # a mode not measured keeps it out of CUDA graphs
    reasons = {f.card_id: f.reason for f in manifest.fallbacks}
    assert reasons[unmeasured.id] == "the model ran slower with it"
    assert reasons[slower.id].count("0.500x on its own") == 1 and "compiled and cuda_graphs: " in reasons[slower.id]
    loaded = load_cast(tmp_path / "modes.cast")
    assert CastManifest.from_json(loaded.manifest.to_json()) == loaded.manifest
    served = loaded.kernels[guard_bound.id]
    assert not served.serves_eager and served.serves_compiled
    assert served.serves_graphs("compiled") and not served.serves_graphs("cuda_graphs")
    assert served.serves_graphs(None)  # kept in one compiled mode, pruned in none
    with torch.inference_mode(), loaded.applied_to():
        torch.relu(small)
    assert loaded.stats()[guard_bound.id]["calls"] == 0  # eager calls never meet its guard


def test_a_manifest_without_cuda_graph_verdicts_reads_them_as_unmeasured(relu_softmax_cast) -> None:
    manifest = json.loads(read_archive(relu_softmax_cast.path).files["manifest.json"])
    for kernel in manifest["kernels"]:
        kernel.pop("cuda_graphs")
    read = CastManifest.from_json(json.dumps(manifest).encode())
    assert {k.cuda_graphs for k in read.kernels} == {ModeVerdict(UNMEASURED)}
    manifest["kernels"][0]["cuda_graphs"] = {"verdict": "kept", "reason": 3}
    with pytest.raises(CastCorruptError, match="cuda_graphs: field 'reason'"):
        CastManifest.from_json(json.dumps(manifest).encode())


def test_a_manifest_without_a_torch_version_reads_as_unrecorded_and_a_wrong_type_is_refused(relu_softmax_cast) -> None:
    manifest = json.loads(read_archive(relu_softmax_cast.path).files["manifest.json"])
    manifest.pop("torch_version")
    assert CastManifest.from_json(json.dumps(manifest)).torch_version == ""
    manifest["torch_version"] = 2.11
    with pytest.raises(CastCorruptError, match="field 'torch_version' should be str"):
        CastManifest.from_json(json.dumps(manifest))


def test_a_verdict_outside_the_vocabulary_is_refused(relu_softmax_cast) -> None:
    manifest = json.loads(read_archive(relu_softmax_cast.path).files["manifest.json"])
    manifest["kernels"][0]["compiled"] = {"verdict": "maybe", "reason": ""}
    with pytest.raises(CastCorruptError, match="compiled verdict 'maybe'"):
        CastManifest.from_json(json.dumps(manifest))


def test_a_kernel_with_a_workspace_is_charged_its_allocation(tmp_path: Path, artifacts) -> None:
    plain = entry(relu_card(torch.randn(4, 8)), RELU, artifacts["relu"])
    with_workspace = dataclasses.replace(plain, workspace_bytes=64 * 1024**2)  # a cpu card allocates all of it
    (bare,) = build_cast(tmp_path / "plain.cast", MODEL, [plain], []).kernels
    (charged,) = build_cast(tmp_path / "workspace.cast", MODEL, [with_workspace], []).kernels
    assert charged.guard_cost_us > bare.guard_cost_us
    assert charged.effective_speedup < bare.effective_speedup
