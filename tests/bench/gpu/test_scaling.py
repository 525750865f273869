"""The scaling bench: its figures and comparison, its arguments, and a two-slot cpu run end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu import scaling

ROOT = Path(__file__).resolve().parents[3]


def done(devices: int, per_min: float, accepted: dict[str, list[str]], best: dict[str, float]) -> scaling.CountResult:
    return scaling.CountResult(devices, candidates_per_min=per_min, accepted=accepted, best_speedup=best,
                               run_status="done")


def test_efficiency_is_against_linear_and_results_against_the_smallest_count() -> None:
    results = [done(1, 10.0, {"add@a": ["k1"]}, {"add@a": 1.5}),
               done(2, 18.0, {"add@a": ["k1"]}, {"add@a": 1.5}),
               done(4, 30.0, {"add@a": ["k1", "k2"]}, {"add@a": 1.7, "mul@b": 1.2}),
               scaling.CountResult(8, skipped="host has 4 GPUs")]
    scaling.compare(results)
    assert [(r.speedup_vs_1, r.efficiency) for r in results[:3]] == [(1.0, 1.0), (1.8, 0.9), (3.0, 0.75)]
    assert [r.same_accepted for r in results] == [True, True, False, None]
    assert results[2].best_speedup_delta == pytest.approx(0.2)
    table = scaling.table(results)
    assert "| 4 | - | - | 0 | 30.0 | 3.0 | 0.75 | False | 0.2 | done |" in table
    assert "| 8 | - | - | 0 | - | - | - | - | - | host has 4 GPUs |" in table


def test_card_labels_hold_across_runs() -> None:
    card = {"id": "run-specific", "op": "aten.add.Tensor", "key": {"shapes": [[2, 3]]}}
    other = {**card, "id": "another"}
    assert scaling.card_label(json.dumps(card)) == scaling.card_label(json.dumps(other))
    assert scaling.card_label(json.dumps(card)).startswith("aten.add.Tensor@")


def test_arguments_are_checked() -> None:
    assert scaling.parse_counts("4,1,2,2") == [1, 2, 4]
    for bad in ("0,1", "", "two"):
        with pytest.raises(ValueError, match="positive integers"):
            scaling.parse_counts(bad)
    args = scaling.parse_args(["out", "--backend", "cpu", "--counts", "1,2"])
    assert (args.model, args.counts, args.cards) == ("small_cnn", [1, 2], 9)
    assert scaling.parse_args(["out"]).model == "sd35_vae_decoder"
    for argv in (["out", "--counts", "0"], ["out", "--model", "no_such_model"], ["out", "--budget", "0"]):
        with pytest.raises(SystemExit):
            scaling.parse_args(argv)


def test_one_and_two_cpu_slots_run_the_same_workload(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench/gpu/scaling.py"), str(tmp_path), "--backend", "cpu",
                           "--counts", "1,2,64", "--cards", "1", "--budget", "2", "--timeout", "150"],
                          cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "scaling.json").read_text())
    one, two, too_many = doc["results"]
    for r in (one, two):
        assert r["run_status"] == "done" and not r["error"], r
        assert r["evaluations"] == 2 and r["candidates_per_min"] > 0
    assert one["efficiency"] == 1.0 and two["efficiency"] is not None
    assert isinstance(two["same_accepted"], bool)
    assert too_many["skipped"].startswith("host has")
    assert "| devices |" in proc.stdout
    assert "sandbox run slots: 2 (cpu)" in (tmp_path / "run-2.log").read_text()
