"""The cpu templates' own exp, erf, log and log1p: accurate against double-precision libm, and vectorised by g++."""

from __future__ import annotations

import subprocess
from pathlib import Path

from agent_service.offline import cxx
from gpu_sandbox_service.compiler import CPU_FLAGS, INCLUDE_DIR, detect_toolchain

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
  double log_rel = 0, log1p_rel = 0;
  for (uint32_t bits = 1; bits < 0x7f800000u; bits += 997) {  /* subnormals to the top of the range */
    float x = kf_bits_f32(bits);
    double want = log((double)x), err = fabs(kf_logf(x) - want) / fmax(fabs(want), 1e-300);
    log_rel = err > log_rel ? err : log_rel;
  }
  for (float x = -0.9999f; x < 1e30f; x += (x > -1e-3f && x < 1e-3f) ? 3e-8f : fabsf(x) * 1e-4f) {
    double want = log1p((double)x), err = x == 0.0f ? 0 : fabs(kf_log1pf(x) - want) / fabs(want);
    log1p_rel = err > log1p_rel ? err : log1p_rel;
  }
  printf("%g %g\n", log_rel, log1p_rel);
  printf("%g %g %g %d %g %g %g %d %g\n", kf_logf(0.0f), kf_logf(-0.0f), kf_logf(INFINITY), isnan(kf_logf(-1.0f)),
         kf_log1pf(-1.0f), kf_log1pf(INFINITY), kf_log1pf(1e-30f), isnan(kf_log1pf(-2.0f)), kf_logf(1.0f));
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
void softplus_loop(const float *__restrict x, float *__restrict y, long n) {
#pragma omp simd
  for (long i = 0; i < n; ++i) y[i] = kf_log1pf(kf_expf(x[i]));
}
"""


def _build(tmp_path: Path, body: str, out: str, extra: list[str]) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "math.cpp"
    source.write_text(cxx.CPU_PRELUDE + body)
    compiler = detect_toolchain("cpu", "cpu").compiler
    flags = [f for f in CPU_FLAGS if f not in ("-shared", "-fPIC")]  # the sandbox's, for an executable
    return subprocess.run([compiler, *flags, f"-I{INCLUDE_DIR}", *extra,
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
    log_rel, log1p_rel = map(float, lines[3].split())
    assert log_rel < 2e-7 and log1p_rel < 3e-7, lines[3]  # within 2 ulp of float
    assert lines[4].split() == ["-inf", "-inf", "inf", "1", "-inf", "inf", "1e-30", "1", "0"]


def test_simd_loops_over_exp_erf_and_log1p_of_exp_vectorise(tmp_path: Path) -> None:
    proc = _build(tmp_path, LOOPS, "loops.so", ["-shared", "-fPIC", "-fopt-info-vec-optimized"])
    lines = len(cxx.CPU_PRELUDE.splitlines())
    vectorised = {int(line.split(":")[1]) - lines for line in proc.stderr.splitlines() if "loop vectorized" in line}
    assert {4, 8, 12} <= vectorised, proc.stderr  # the three loops' lines within LOOPS


def test_cpu_max_and_min_are_selects_that_vectorise_and_keep_fmaxfs_nan_rule(tmp_path: Path) -> None:
    expression = cxx.vectorising_cpu_math("(x0 != x0 ? x0 : fminf(fmaxf(x0, 0.0f), 6.0f))")
    assert "kf_fminf(kf_fmaxf(" in expression and "kf_kf_" not in cxx.vectorising_cpu_math(expression)
    body = ("void clamp_loop(const float *__restrict x, float *__restrict y, long n) {\n#pragma omp simd\n"
            "  for (long i = 0; i < n; ++i) { const float x0 = x[i]; y[i] = " + expression + "; }\n}\n")
    proc = _build(tmp_path, body, "clamp.so", ["-shared", "-fPIC", "-fopt-info-vec-optimized"])
    lines = len(cxx.CPU_PRELUDE.splitlines())
    assert any("loop vectorized" in line and int(line.split(":")[1]) - lines == 3 for line in proc.stderr.splitlines())
    checks = r"""
#include <stdio.h>
int main() {
  printf("%g %g %g %g %d\n", kf_fmaxf(NAN, 2.0f), kf_fmaxf(2.0f, NAN), kf_fminf(NAN, -1.0f), kf_fminf(3.0f, 5.0f),
         isnan(kf_fmaxf(NAN, NAN)));
}
"""
    _build(tmp_path, checks, "nan_rule", ["-lm"])
    out = subprocess.run([str(tmp_path / "nan_rule")], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["2", "2", "-1", "3", "1"]
