"""The cpu histc renderer: every element's bin by eager's arithmetic, counted in 32-bit integers.

On one thread the counts are one array; on more, OpenMP gives each thread its own copy of it
(an array reduction) and adds them up: integer sums, so the result is the same however the
elements are split. The counts become the output dtype at the end, exactly (the plan refuses
inputs whose counts could pass what that dtype holds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs

if TYPE_CHECKING:
    from agent_service.offline.histc.plan import HistcPlan


def render(plan: HistcPlan, knobs: Knobs) -> str:
    threads = int(knobs["threads"])
    width = f" num_threads({threads})" if threads else ""
    pragma = (f"#pragma omp parallel for{width} schedule(static) reduction(+:counts[:{plan.bins}])\n"
              if threads != 1 else "")
    out_stride = plan.outputs[0].stride[0]
    launch = cxx.cpu_kf_launch(plan.inputs, plan.outputs,
                               f"  kf_histc((const TI *)inputs[{plan.x}].data, (TO *)outputs[0].data);\n")
    return f"""{cxx.CPU_PRELUDE}
/* {plan.summary}; {knobs} */
{plan.header()}
static void kf_histc(const TI *__restrict x, TO *__restrict y) {{
  uint32_t counts[{plan.bins}];
  memset(counts, 0, sizeof counts);
{pragma}  for (int64_t i = 0; i < {plan.numel}LL; ++i) {{
    const TA v = kf_at(x, i);
    if (kf_in_range(v)) ++counts[kf_bin(v)];
  }}
  for (int64_t b = 0; b < {plan.bins}LL; ++b) y[b * {out_stride}LL] = kf_count(counts[b]);
}}
{launch}"""
