"""A finished run exported as a bundle builds the .cast the run store itself gives."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from forge_service.bundle import export_bundle
from forge_service.config import RunConfig
from forge_service.store import CardRow, RunStore, package_inputs
from forge_service.tree_log import add_child_op, tell_op
from kforge_domain.card import OperatorCard
from kforge_domain.cost import Cost
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import CandidateStatus, RunFigures
from packager.archive import read_archive
from packager.bundle import RUN_BUNDLE_DIR, read_bundle
from packager.format import build_cast
from packager.manifest import MANIFEST_FILE, CastManifest
from packager.runtime import host_cpu_arch
from tests.packager.conftest import FLAGS, RELU, SOFTMAX, compile_kernel, relu_card, softmax_card

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "20260101-000000-44444d"
#: Fields of a packaged kernel that the build measures (the guard) or decides from that measurement.
MEASURED = ("guard_cost_us", "effective_speedup", "eager", "compiled", "cuda_graphs")


def _passed(cid: str, source: str, artifact: bytes, eager_us: float, latency_us: float) -> CandidateResult:
    figures = RunFigures(CandidateStatus.PASSED, latency_us=latency_us, latency_spread_us=0.5,
                         eager_latency_us=eager_us, eager_spread_us=1.0, rel_l2_error=1e-7, max_scaled_error=2e-7)
    return CandidateResult(
        cid, figures, arch=host_cpu_arch(), audit_class="custom", artifact=artifact,
        source_sha256=hashlib.sha256(source.encode()).hexdigest(), compiler_flags=FLAGS, toolchain="g++ 12")


def seed_finished_run(run_dir: Path) -> dict[str, OperatorCard]:
    """A finished run written through the run store: real cards, compiled kernels, a failed and a
    slower candidate, a selected card nothing passed for and a card left unsearched."""
    x = torch.randn(4, 8)
    cards = {"relu": relu_card(x), "softmax": softmax_card(x), "relu_small": relu_card(torch.randn(2, 3)),
             "skipped": softmax_card(torch.randn(3, 5))}
    store = RunStore(run_dir)
    config = RunConfig(model_spec="tests/packager/conftest.py:SmallNet", backend="cpu", budget_per_card=3)
    store.create_run(RUN_ID, config.model_dump_json(), "SmallNet")
    store.put_cards([CardRow(c.id, c.to_json(), rank, name != "skipped", "done",
                             "vendor op: not searched" if name == "skipped" else "", 3, None)
                     for rank, (name, c) in enumerate(cards.items())])
    plans = {
        "relu": [(RELU, 900.0, 30.0), (RELU.replace("y[i] =", "y[i] = 0.f +"), 900.0, 10.0)],
        "softmax": [(SOFTMAX, 2000.0, 20.0), (SOFTMAX + "\n", 2000.0, 0.0)],  # the second fails
        "relu_small": [(RELU + "// wrong\n", 0.0, 0.0)],
    }
    node = 0
    for name, plan in plans.items():
        card = cards[name]
        for i, (source, eager_us, latency_us) in enumerate(plan):
            node += 1
            cid = f"{name}-{i}"
            store.add_candidate(cid, card.id, "", node, "offline", add_child_op(0, node, cid))
            store.set_proposal(cid, source, f"try {i}", {}, Cost(), [], card.id, None)
            if latency_us:
                result = _passed(cid, source, compile_kernel(source, run_dir.parent, cid), eager_us, latency_us)
            else:
                result = CandidateResult(cid, RunFigures(CandidateStatus.WRONG_RESULT, "output 0 departs from eager"))
            store.put_result(result, card.id, tell_op(node, result.passed, latency_us if result.passed else None, None))
    store.update_run(status="done")
    store.close()
    return cards


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / RUN_ID
    seed_finished_run(run_dir)
    return run_dir


def _without_measured(manifest: CastManifest) -> dict[str, object]:
    data = dataclasses.asdict(manifest)
    del data["created_at"]
    data["kernels"] = [{k: v for k, v in kernel.items() if k not in MEASURED} for kernel in data["kernels"]]
    return data


def test_the_bundle_holds_what_the_run_store_gives_the_build(finished_run: Path, tmp_path: Path) -> None:
    path, written = export_bundle(finished_run, tmp_path / "bundle")
    model, kernels, fallbacks = package_inputs(finished_run)
    assert read_bundle(path) == written
    assert (written.model, list(written.kernels), list(written.fallbacks)) == (model, kernels, fallbacks)
    assert {k.candidate_id for k in kernels} == {"relu-1", "softmax-0"}
    assert {f.reason for f in fallbacks} == {"no candidate passed verification", "vendor op: not searched"}


def test_packager_builds_from_the_bundle_without_the_forge_the_cast_the_store_builds(
        finished_run: Path, tmp_path: Path) -> None:
    from_store = build_cast(tmp_path / "store.cast", *package_inputs(finished_run))
    export_bundle(finished_run)
    assert (finished_run / RUN_BUNDLE_DIR / "bundle.json").is_file()
    out = tmp_path / "bundle.cast"
    argv = ["build", RUN_ID, "--runs-dir", str(finished_run.parent), "-o", str(out)]
    no_forge = ("import sys; sys.modules['forge_service'] = None; from packager.cli import main; "
                f"sys.exit(main({argv!r}))")
    proc = subprocess.run([sys.executable, "-c", no_forge], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 kernels, 2 cards on eager" in proc.stdout
    built, expected = read_archive(out), read_archive(tmp_path / "store.cast")
    assert built.files.keys() == expected.files.keys()
    assert all(built.files[n] == expected.files[n] for n in built.files if n != MANIFEST_FILE)
    manifest = CastManifest.from_json(built.files[MANIFEST_FILE])
    assert _without_measured(manifest) == _without_measured(from_store)


def export_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forge_service.cli", "export-bundle", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, env={**os.environ, "COLUMNS": "300"})


def test_export_bundle_names_a_missing_run(tmp_path: Path) -> None:
    proc = export_cli("run-404", "--runs-dir", str(tmp_path))
    assert proc.returncode == 2 and "no run directory 'run-404'" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = export_cli(str(tmp_path / "empty"))
    assert proc.returncode == 2 and "holds no run (run.sqlite is missing)" in proc.stderr


def test_export_bundle_never_replaces_a_folder_that_is_not_a_bundle(finished_run: Path, tmp_path: Path) -> None:
    keep = tmp_path / "notes"
    keep.mkdir()
    (keep / "todo.txt").write_text("mine")
    proc = export_cli(str(finished_run), "--out", str(keep))
    assert proc.returncode == 2 and "is not a run bundle; not replacing it" in proc.stderr
    assert [p.name for p in keep.iterdir()] == ["todo.txt"]
    export_bundle(finished_run, tmp_path / "b")
    path, _ = export_bundle(finished_run, tmp_path / "b")  # a bundle is replaced whole
    assert json.loads((path / "bundle.json").read_text())["model"]["run_id"] == RUN_ID
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
