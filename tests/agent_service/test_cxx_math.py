"""The cpu templates' own exp and erf: accurate against double-precision libm, and vectorised by g++."""

from __future__ import annotations

import subprocess
from pathlib import Path

from agent_service.offline import cxx
from gpu_sandbox_service.compiler import INCLUDE_DIR, detect_toolchain

ACCURACY = r"""
#include <stdio.h>
int main() {
  double exp_rel = 0, erf_abs = 0;
  for (float x = -87.0f; x < 88.72f; x += 1e-3f) {
    double want = exp((double)x), err = fabs(kf_expf(x) - want) / want;
    exp_rel = err > exp_rel ? err : exp_rel;
  }
  for (float x = -10.0f; x < 10.0f; x += 1e-4f) {
    double err = fabs(kf_erff(x) - erf((double)x));
    erf_abs = err > erf_abs ? err : erf_abs;
  }
  printf("%g %g\n", exp_rel, erf_abs);
  printf("%g %g %g %g %g\n", kf_expf(-INFINITY), kf_expf(INFINITY), kf_expf(88.8f), kf_expf(-90.0f),
         kf_expf(88.72f) / exp((double)88.72f));
  printf("%g %g %g %d %d\n", kf_erff(INFINITY), kf_erff(-INFINITY), kf_erff(0.0f), isnan(kf_erff(NAN)),
         isnan(kf_expf(NAN)));
}
"""

LOOPS = r"""
void exp_loop(const float *__restrict x, float *__restrict y, long n) {
#pragma omp simd
  for (long i = 0; i < n; ++i) y[i] = kf_expf(x[i]);
}
void erf_loop(const float *__restrict x, float *__restrict y, long n) {
#pragma omp simd
  for (long i = 0; i < n; ++i) y[i] = kf_erff(x[i]);
}
"""


def _build(tmp_path: Path, body: str, out: str, extra: list[str]) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "math.cpp"
    source.write_text(cxx.CPU_PRELUDE + body)
    compiler = detect_toolchain("cpu", "cpu").compiler
    return subprocess.run([compiler, "-O3", "-march=native", "-fopenmp", "-std=c++17", f"-I{INCLUDE_DIR}", *extra,
                           "-o", str(tmp_path / out), str(source)], capture_output=True, text=True, check=True)


def test_exp_and_erf_match_double_precision_and_keep_special_values(tmp_path: Path) -> None:
    _build(tmp_path, ACCURACY, "accuracy", ["-lm"])
    lines = subprocess.run([str(tmp_path / "accuracy")], capture_output=True, text=True, check=True).stdout.split("\n")
    exp_rel, erf_abs = map(float, lines[0].split())
    assert exp_rel < 2e-7 and erf_abs < 5e-7, lines[0]
    at_minus_inf, at_inf, past_top, past_bottom, near_top = map(float, lines[1].split())
    assert (at_minus_inf, at_inf, past_top, past_bottom) == (0.0, float("inf"), float("inf"), 0.0)
    assert abs(near_top - 1) < 2e-7  # exp(88.72) over libm's: the top of the range is not clamped short
    assert lines[2].split() == ["1", "-1", "0", "1", "1"]


def test_simd_loops_over_exp_and_erf_vectorise(tmp_path: Path) -> None:
    proc = _build(tmp_path, LOOPS, "loops.so", ["-shared", "-fPIC", "-fopt-info-vec-optimized"])
    lines = len(cxx.CPU_PRELUDE.splitlines())
    vectorised = {int(line.split(":")[1]) - lines for line in proc.stderr.splitlines() if "loop vectorized" in line}
    assert {4, 8} <= vectorised, proc.stderr  # the two loops' lines within LOOPS
