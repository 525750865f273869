"""The timing-escape bench's cases build and its verdict table reads right, without a GPU."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from bench.gpu import timing_escape
from gpu_sandbox_service.audit import audit_source
from gpu_sandbox_service.compiler import INCLUDE_DIR


def test_every_case_passes_the_static_audit_so_only_the_harness_can_catch_it() -> None:
    for case in timing_escape.CASES:
        report = audit_source(timing_escape.source(case), "cuda")
        assert report.allowed, (case.name, report.violations)
    assert {c.honest for c in timing_escape.CASES} == {True, False}


def test_honest_cases_must_pass_and_escaping_ones_must_not() -> None:
    honest, escaping = timing_escape.CASES[0], timing_escape.CASES[-1]
    assert timing_escape.verdict_ok(honest, "PASSED") and not timing_escape.verdict_ok(honest, "REJECTED")
    assert not timing_escape.verdict_ok(escaping, "PASSED")
    assert timing_escape.verdict_ok(escaping, "REJECTED") and timing_escape.verdict_ok(escaping, "WRONG_RESULT")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("name", ["given_stream_x4", "own_stream_event"])
def test_the_cases_compile(name: str, tmp_path: Path) -> None:
    case = next(c for c in timing_escape.CASES if c.name == name)
    (tmp_path / "k.cu").write_text(timing_escape.source(case))
    proc = subprocess.run(["nvcc", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC", f"-I{INCLUDE_DIR}", "-o",
                           str(tmp_path / "k.so"), str(tmp_path / "k.cu")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the report written without a GPU")
def test_without_a_gpu_it_still_writes_its_report(tmp_path: Path) -> None:
    timing_escape.run(tmp_path)
    report = json.loads((tmp_path / "timing_escape.json").read_text())
    assert report["error"] == "RuntimeError: no CUDA device" and report["summary"]["all_ok"] is False
