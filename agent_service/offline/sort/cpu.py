"""The cpu sort renderer: rows over OpenMP threads, each sorted as ``(key, index)`` pairs.

``stable`` order: every pair is distinct, so ``std::sort`` of the pairs, compared key first and
index second, gives exactly eager's stable order (``std::stable_sort`` with its NaN-aware
comparator, aten/src/ATen/native/cpu/SortingKernel.cpp).

``cpu_topk`` order: eager's cpu topk (``topk_impl_loop``, aten/src/ATen/native/TopKImpl.h)
orders ties however ``std::partial_sort`` (``k * 64 <= n``) or ``std::nth_element`` and
``std::sort`` of the first ``k - 1`` leave them, comparing values alone. Its order is that of the
algorithm, not of the data, so the kernel makes the same calls on the same sequence of pairs
with a comparator that decides every comparison alike (the keys order values as eager's
comparator does, NaNs and zeros included), and ties come out where eager's do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.plan import CPU_SERIAL_BELOW

if TYPE_CHECKING:
    from agent_service.offline.sort.plan import SortPlan

INCLUDES = "#include <algorithm>\n#include <utility>\n#include <vector>\n"


def _order(plan: SortPlan) -> str:
    """C++ statements ordering ``q`` (the row's pairs) as eager does."""
    if plan.order == "stable":
        return "    std::sort(q.begin(), q.end());\n"
    better = "a.first > b.first" if plan.descending else "a.first < b.first"
    compare = f"[](const kf_item &a, const kf_item &b) {{ return {better}; }}"
    n, k = plan.length, plan.k
    if k * 64 <= n:
        return f"    std::partial_sort(q.begin(), q.begin() + {k}, q.end(), {compare});\n"
    select = f"    std::nth_element(q.begin(), q.begin() + {k - 1}, q.end(), {compare});\n"
    if plan.sorted_topk:
        select += f"    std::sort(q.begin(), q.begin() + {k - 1}, {compare});\n"
    return select


def render(plan: SortPlan, knobs: Knobs) -> str:
    parallel = plan.rows > 1 and plan.source.numel >= CPU_SERIAL_BELOW
    threads = f" num_threads({knobs['threads']})" if knobs["threads"] else ""
    pragma = "#pragma omp for schedule(static)\n" if parallel else ""
    region = f"#pragma omp parallel{threads}\n" if parallel else ""
    n, x_step = plan.length, plan.step(plan.source)
    write_values = ""
    if plan.values is not None:
        write_values = f"      v[kf_vrow(r) + j * {plan.step(plan.values)}LL] = xr[q[j].second * {x_step}LL];\n"
    value_arg = "(TB *)outputs[0].data" if plan.values is not None else "(TB *)0"
    body = f"""typedef std::pair<TB, int64_t> kf_item;
static void kf_sort(const TB *__restrict x, TB *__restrict v, int64_t *__restrict ix) {{
  (void)v;
{region}  {{
  std::vector<kf_item> q({n});
{pragma}  for (int64_t r = 0; r < {plan.rows}LL; ++r) {{
    const TB *xr = x + kf_xrow(r);
    for (int64_t j = 0; j < {n}LL; ++j) q[j] = kf_item(kf_key(xr[j * {x_step}LL]), j);
{_order(plan)}    for (int64_t j = 0; j < {plan.k}LL; ++j) {{
{write_values}      ix[kf_irow(r) + j * {plan.step(plan.indices)}LL] = q[j].second;
    }}
  }}
  }}
}}
"""
    launch = cxx.cpu_kf_launch(plan.inputs, plan.outputs,
                               f"  kf_sort((const TB *)inputs[{plan.x}].data, {value_arg}, "
                               f"(int64_t *)outputs[{len(plan.outputs) - 1}].data);\n")
    return f"""{cxx.CPU_PRELUDE}{INCLUDES}
/* {plan.summary}; {knobs} */
{plan.header("static inline", descending_keys=plan.descending and plan.order == "stable")}
{body}
{launch}"""
