"""The cuda histc renderer: per-block counts in shared memory, then written or added to the output.

A block counts its elements with shared-memory atomics into ``copies`` arrays (warp ``w`` into
copy ``w % copies``: fewer collisions where many elements share a bin, as MoE expert ids do).
``block`` mode is one block: it sums its copies and writes every count. ``grid`` mode first
zeroes the output in a launch of its own on the same stream, then every block adds its non-zero
counts with global atomics: integer counts, exact in every float dtype the plan allows, so the
result does not depend on the order blocks finish in (an int8 or uint8 count wraps as eager's
atomics wrap it; those dtypes have no atomics here and take block mode only). Nothing is allocated and nothing waits on
the host: the launches are capturable in a CUDA graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.plan import multiprocessors
from kforge_domain.device import DeviceInfo

if TYPE_CHECKING:
    from agent_service.offline.histc.plan import HistcPlan

#: How grid mode adds a block's count ``c`` to output element ``*p``, by output dtype.
_ATOMIC_ADD = {
    "float32": "atomicAdd(p, (float)c)",
    "float64": "atomicAdd(p, (double)c)",
    "int32": "atomicAdd((int *)p, (int)c)",
    "int64": "atomicAdd((unsigned long long *)p, (unsigned long long)c)",
}


def _count_kernel(plan: HistcPlan, block: int, copies: int, grid_mode: bool) -> str:
    out_stride = plan.outputs[0].stride[0]
    if grid_mode:
        finish = f"if (c) {{ TO *p = y + b * {out_stride}LL; {_ATOMIC_ADD[plan.source.dtype]}; }}"
    else:
        finish = f"y[b * {out_stride}LL] = kf_count(c);"
    return f"""__global__ void __launch_bounds__({block}) kf_histc(const TI *__restrict__ x, TO *__restrict__ y) {{
  __shared__ unsigned int counts[{copies * plan.bins}];
  for (int i = threadIdx.x; i < {copies * plan.bins}; i += {block}) counts[i] = 0u;
  __syncthreads();
  unsigned int *mine = counts + ((threadIdx.x >> 5) % {copies}) * {plan.bins};
  for (int64_t i = (int64_t)blockIdx.x * {block} + threadIdx.x; i < {plan.numel}LL;
       i += (int64_t)gridDim.x * {block}) {{
    const TI v = kf_at(x, i);
    if (kf_in_range(v)) atomicAdd(&mine[kf_bin(v)], 1u);
  }}
  __syncthreads();
  for (int b = threadIdx.x; b < {plan.bins}; b += {block}) {{
    unsigned int c = 0u;
    for (int k = 0; k < {copies}; ++k) c += counts[k * {plan.bins} + b];
    {finish}
  }}
}}
"""


def _zero_kernel(plan: HistcPlan) -> str:
    return f"""__global__ void __launch_bounds__(256) kf_zero(TO *__restrict__ y) {{
  const int b = blockIdx.x * 256 + threadIdx.x;
  if (b < {plan.bins}) y[b * {plan.outputs[0].stride[0]}LL] = kf_count(0u);
}}
"""


def render(plan: HistcPlan, knobs: Knobs, device: DeviceInfo) -> str:
    mode, block, copies = str(knobs["mode"]), int(knobs["threads_per_block"]), int(knobs["copies"])
    args = f"(const TI *)inputs[{plan.x}].data, (TO *)outputs[0].data"
    if mode == "grid":
        sms = multiprocessors(device)
        grid = max(1, min(sms * int(knobs["blocks_per_sm"]), cxx.ceil_div(plan.numel, block)))
        kernels = _zero_kernel(plan) + _count_kernel(plan, block, copies, grid_mode=True)
        zero_grid = cxx.ceil_div(plan.bins, 256)
        launch = (f"  kf_zero<<<{zero_grid}, 256, 0, (cudaStream_t)stream>>>((TO *)outputs[0].data);\n"
                  f"  kf_histc<<<{grid}, {block}, 0, (cudaStream_t)stream>>>({args});\n")
    else:
        kernels = _count_kernel(plan, block, copies, grid_mode=False)
        launch = f"  kf_histc<<<1, {block}, 0, (cudaStream_t)stream>>>({args});\n"
    return f"""{cxx.CUDA_PRELUDE}
/* {plan.summary}; {knobs} */
{plan.header()}
{kernels}
extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs)}
{launch}{cxx.cuda_launch_epilogue()}
}}
"""
