"""The cpu renderer of fused rows: rows spread over OpenMP threads, each swept with ``omp simd`` loops."""

from __future__ import annotations

from agent_service.offline import cxx
from agent_service.offline.elementwise import _math_macros, _offsets
from agent_service.offline.fused_rows import FusedRowPlan, Sweep, kernel_signature, with_types
from agent_service.offline.knobs import Knobs
from agent_service.offline.rowwise.cpu import CPU_LANES, _combine, _cpu_lane_reduce


def render(plan: FusedRowPlan, knobs: Knobs) -> str:
    """One function over every row: its sweeps and row values in order, then the output's write."""
    shape, out_strides, op_strides = plan.outer()
    out_last, last = plan.last_strides()
    L = plan.length
    simd = bool(knobs["simd"])

    def computed(needs: frozenset[str]) -> str:
        """Statements loading the operands and computing the element values ``needs`` takes at ``j``."""
        elements, operands = plan.needed(needs)
        loads = " ".join(f"const float x{i} = kf_to_f32(in{i}[o{i} + j * {last[i]}LL]);" for i in operands)
        return " ".join([loads, *(f"const float {e.local} = {e.expression};" for e in elements)])

    body = ""
    for step in plan.steps:
        if not isinstance(step, Sweep):
            body += f"    const float {step.local} = {step.expression};\n"
            continue
        # captured by value: loads through a captured reference kept g++ from vectorising bf16 sweeps
        value = f"[=]() -> float {{ {computed(step.needs | {step.value})} return {step.value}; }}()"
        if simd and L >= 2 * CPU_LANES:
            body += _cpu_lane_reduce(step.init, step.acc, step.op, step.term, "", L, value)
        else:
            # OpenMP's max combiner drops NaN; the NaN-keeping select runs in order instead
            pragma = f"#pragma omp simd reduction(+:{step.acc})\n" if simd and step.op == "+" else ""
            body += (f"    float {step.acc} = {step.init};\n{pragma}    for (int64_t j = 0; j < {L}LL; ++j) {{"
                     f" const float v = {value}; {_combine(step.op, step.acc, step.term)} }}\n")
    out_t = cxx.element_type(plan.outputs[0].dtype, "cpu")
    body += (f"{'#pragma omp simd' if simd else ''}\n    for (int64_t j = 0; j < {L}LL; ++j) {{\n"
             f"      {computed(plan.result_needs | {plan.result})}\n"
             f"      out[oo + j * {out_last}LL] = kf_from_f32<{out_t}>({plan.result});\n    }}\n")
    names = [(f"o{i}", s) for i, s in enumerate(op_strides)] + [("oo", out_strides)]
    params, args = kernel_signature(plan, "cpu")
    threads = f" num_threads({knobs['threads']})" if knobs["threads"] else ""
    launch = cxx.cpu_kf_launch(plan.inputs, plan.outputs, f"  kf_rows({args});\n")
    return with_types(f"""{cxx.CPU_PRELUDE}
{_math_macros("cpu", bool(knobs["fast_math"]))}
/* {plan.summary} */
static void kf_rows({params}) {{
#pragma omp parallel for{threads} schedule({knobs["schedule"]})
  for (int64_t row = 0; row < {plan.rows}LL; ++row) {{
{_offsets(shape, names, "row", "    ")}
{body}  }}
}}

{launch}""", "cpu")
