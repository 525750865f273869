"""The cpu row renderer: rows spread over OpenMP threads, each reduced with ``omp simd`` loops."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.rowwise.helpers import math_macros
from agent_service.offline.rowwise.kinds import CpuReduce, fill

if TYPE_CHECKING:
    from agent_service.offline.rowwise.plan import RowPlan

CPU_LANES = 32  # partial values of a cpu row reduction (see _cpu_lane_reduce)


def render(plan: RowPlan, knobs: Knobs) -> str:
    """One function over every row: its statistics, then its elementwise and per-row outputs."""
    L, inner = plan.length, plan.inner
    kind = plan.row_kind
    simd = "#pragma omp simd" if knobs["simd"] else ""
    xj = f"kf_to_f32(x[base + j * {inner}LL])"
    n = cxx.cfloat(float(L))
    # y holds each exp after the sums
    stash = kind.stash if kind.stash is not None and knobs.get("stash_exp") and knobs["stats"] == kind.stash.stats \
        else None

    def reduce_loop(init: str, var: str, op: str, term: str, before: str = "") -> str:
        """``var`` reduced with ``op`` over ``term`` of each element (after the statements ``before``)."""
        if knobs["simd"] and L >= 2 * CPU_LANES:
            return _cpu_lane_reduce(init, var, op, term, before, L, xj)
        # OpenMP's max combiner drops NaN; the NaN-keeping select is merged in order instead
        pragma = f"#pragma omp simd reduction({op}:{var})" if knobs["simd"] and op == "+" else ""
        return (f"    float {var} = {init};\n{pragma}\n    for (int64_t j = 0; j < {L}LL; ++j) {{ const float v = {xj};"
                f" {before}{_combine(op, var, term)} }}\n")

    steps = kind.statistics(knobs["stats"]).cpu
    if stash is not None:
        steps = (*steps[:-1], stash.cpu)
    stats = ""
    for step in steps:
        if isinstance(step, CpuReduce):
            stats += reduce_loop(step.init, step.var, step.op, step.term, fill(step.before, inner=str(inner)))
            stats += fill(step.after, n=n)
        else:
            stats += fill(step.code, L=str(L), n=n, simd=step.simd if knobs["simd"] else "", xj=xj)
    stats += "    " + plan.row_stats_c() + "\n"
    write = ""
    if plan.y is not None:
        yt = cxx.element_type(plan.outputs[plan.y].dtype, "cpu")
        value = stash.write if stash is not None else plan.write_expr("cpu")
        body = (f"      const int64_t idx = base + j * {inner}LL; (void)idx;\n"
                "      const float v = kf_to_f32(x[idx]);\n"
                f"      y[{plan.y_index_c()}] = kf_from_f32<{yt}>({value});\n")
        if kind.grouped:
            # A loop per channel of the group: its weight and bias stay in registers (gathered per
            # element they made the kernel five times slower than eager).
            per_group = plan.channels // plan.groups
            write = (f"{plan.y_base_c('    ')}    for (int64_t c = 0; c < {per_group}LL; ++c) {{\n"
                     f"    const int64_t ch = (row % {plan.groups}LL) * {per_group}LL + c;\n{simd}\n"
                     f"    for (int64_t j = c * {plan.spatial}LL; j < (c + 1) * {plan.spatial}LL; ++j) {{\n"
                     f"{body}    }}\n    }}\n")
        else:
            write = (f"{plan.y_base_c('    ')}{simd}\n    for (int64_t j = 0; j < {L}LL; ++j) {{\n"
                     f"{body}    }}\n")
    write += plan.row_output_writes("cpu", "    ")
    params, args = plan.params("cpu")
    threads = f" num_threads({knobs['threads']})" if knobs["threads"] else ""
    launch = cxx.cpu_kf_launch(plan.inputs, plan.outputs, f"  kf_rows({args});\n")
    return f"""{cxx.CPU_PRELUDE}
{math_macros("cpu", bool(knobs["fast_math"]))}
/* {plan.summary} */
static void kf_rows({params}) {{
#pragma omp parallel for{threads} schedule({knobs["schedule"]})
  for (int64_t row = 0; row < {plan.rows}LL; ++row) {{
    const int64_t base = {plan.x_base_c()};
{stats}{write}  }}
}}

{launch}"""


def _combine(op: str, acc: str, value: str) -> str:
    """The C statement folding ``value`` into ``acc`` (``op`` is ``+`` or ``max``)."""
    # max keeps NaN (as eager's amax does): once acc is NaN no comparison replaces it
    if op == "+":
        return f"{acc} += {value};"
    return f"{acc} = ({value} != {value} || {value} > {acc}) ? {value} : {acc};"


def _cpu_lane_reduce(init: str, var: str, op: str, term: str, before: str, length: int, xj: str) -> str:
    """A row reduction into :data:`CPU_LANES` partial values, merged after the row.

    One vector accumulator makes the loop wait on each add's latency; the lanes give the
    vectorised loop several independent ones (a sum of 1023 floats: 150 -> 65 ns on a Zen 3 core).
    """
    lane, whole = f"{var}_l[k]", length // CPU_LANES * CPU_LANES
    return (f"    float {var}_l[{CPU_LANES}];\n"
            f"    for (int k = 0; k < {CPU_LANES}; ++k) {var}_l[k] = {init};\n"
            f"    for (int64_t j0 = 0; j0 < {whole}LL; j0 += {CPU_LANES}) {{\n"
            "#pragma omp simd\n"
            f"      for (int k = 0; k < {CPU_LANES}; ++k) {{ const int64_t j = j0 + k; const float v = {xj};"
            f" {before}{_combine(op, lane, term)} }}\n    }}\n"
            f"    float {var} = {init};\n"
            f"    for (int64_t j = {whole}LL; j < {length}LL; ++j) {{ const float v = {xj};"
            f" {before}{_combine(op, var, term)} }}\n"
            + (f"#pragma omp simd reduction({op}:{var})\n" if op == "+" else "")  # max: see _combine
            + f"    for (int k = 0; k < {CPU_LANES}; ++k) {_combine(op, var, lane)}\n")

