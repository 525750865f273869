"""The cpu scan renderer: runs over OpenMP threads, each walked in order as eager walks it.

Each run accumulates in eager's cpu accumulator, element after element, so the output is eager's
bit for bit. In ``rows`` mode a thread takes whole runs; in ``columns`` mode (runs side by side in
memory: a scan over a middle or outer dim) a thread takes ``column_block`` adjacent runs and walks
them together, one step of each per ``omp simd`` iteration, reading memory in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.scan import elements

if TYPE_CHECKING:
    from agent_service.offline.scan.plan import ScanPlan

PARALLEL_MIN_ELEMENTS = 32768  # a smaller scan runs on one thread: starting the others costs more


def render(plan: ScanPlan, knobs: Knobs) -> str:
    parallel = plan.rows > 1 and plan.rows * plan.length >= PARALLEL_MIN_ELEMENTS
    threads = f" num_threads({knobs['threads']})" if knobs["threads"] else ""
    pragma = f"#pragma omp parallel for{threads} schedule(static)\n" if parallel else ""
    body = _columns(plan, int(knobs["column_block"]), pragma) if knobs["mode"] == "columns" else _rows(plan, pragma)
    launch = cxx.cpu_kf_launch(plan.inputs, plan.outputs,
                               f"  kf_scan((const TI *)inputs[{plan.x}].data, (TO *)outputs[0].data);\n")
    precision = elements.eager_cpu_precision(plan.target.dtype)
    return f"""{cxx.CPU_PRELUDE}
/* {plan.summary}; {knobs} */
{plan.header("cpu", precision)}
{body}
{launch}"""


def _rows(plan: ScanPlan, pragma: str) -> str:
    return f"""static void kf_scan(const TI *__restrict x, TO *__restrict y) {{
{pragma}  for (int64_t r = 0; r < {plan.rows}LL; ++r) {{
{plan.walk_run_c()}  }}
}}
"""


def _columns(plan: ScanPlan, column_block: int, pragma: str) -> str:
    """Adjacent runs (the last dim of :attr:`ScanPlan.runs`) walked ``column_block`` at a time."""
    column = plan.runs[-1]
    width = min(column_block, column.size)
    blocks = cxx.ceil_div(column.size, width)
    outer = plan.rows // column.size
    return f"""static void kf_scan(const TI *__restrict x, TO *__restrict y) {{
{pragma}  for (int64_t t = 0; t < {outer * blocks}LL; ++t) {{
    const int64_t c0 = (t % {blocks}LL) * {width}LL, first = (t / {blocks}LL) * {column.size}LL;
    const int64_t n = {column.size}LL - c0 < {width}LL ? {column.size}LL - c0 : {width}LL;
    const TI *xr = x + kf_xrow(first) + c0 * {column.x_stride}LL;
    TO *yr = y + kf_yrow(first) + c0 * {column.y_stride}LL;
    TA acc[{width}];
    for (int64_t c = 0; c < {width}LL; ++c) acc[c] = {plan.identity};
    for (int64_t j = 0; j < {plan.length}LL; ++j) {{
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) {{
        acc[c] = kf_op(acc[c], kf_load(xr[j * {plan.x_step}LL + c * {column.x_stride}LL]));
        yr[j * {plan.y_step}LL + c * {column.y_stride}LL] = kf_store(acc[c]);
      }}
    }}
  }}
}}
"""
