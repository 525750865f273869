"""The cuda sort renderer: a block per row, a bitonic network over ``(key, index)`` pairs.

The row's pairs sit in shared memory, padded to a power of two with pairs that compare after
every real one (the largest key, an index past the row). Bitonic sorting with the lexicographic
compare leaves the pairs in one order only, since no two are equal: eager's stable order. The
first ``k`` (the row's length for a sort) are written out, the values as the input's raw bits.
No scratch, no host synchronisation: one launch on the caller's stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.plan import cuda_grid_limit
from kforge_domain.device import DeviceInfo

if TYPE_CHECKING:
    from agent_service.offline.sort.plan import SortPlan


def _kernel(plan: SortPlan, block: int) -> str:
    n, padded, x_step = plan.length, plan.padded, plan.step(plan.source)
    write_values = ""
    if plan.values is not None:
        write_values = f"      v[kf_vrow(r) + j * {plan.step(plan.values)}LL] = xr[(int64_t)idx[j] * {x_step}LL];\n"
    return f"""__global__ void __launch_bounds__({block}) kf_sort(const TB *__restrict__ x, TB *__restrict__ v,
                                                  int64_t *__restrict__ ix) {{
  __shared__ TB key[{padded}];
  __shared__ int32_t idx[{padded}];
  (void)v;
  for (int64_t r = blockIdx.x; r < {plan.rows}LL; r += gridDim.x) {{
    const TB *xr = x + kf_xrow(r);
    for (int j = threadIdx.x; j < {padded}; j += {block}) {{
      key[j] = j < {n} ? kf_key(xr[(int64_t)j * {x_step}LL]) : (TB)~(TB)0;
      idx[j] = j;
    }}
    for (int size = 2; size <= {padded}; size <<= 1) {{
      for (int stride = size >> 1; stride > 0; stride >>= 1) {{
        __syncthreads();
        for (int t = threadIdx.x; t < {padded // 2}; t += {block}) {{
          const int a = 2 * t - (t & (stride - 1)), b = a + stride;
          const bool b_first = key[b] < key[a] || (key[b] == key[a] && idx[b] < idx[a]);
          if (b_first == ((a & size) == 0)) {{
            const TB kt = key[a]; key[a] = key[b]; key[b] = kt;
            const int32_t it = idx[a]; idx[a] = idx[b]; idx[b] = it;
          }}
        }}
      }}
    }}
    __syncthreads();
    for (int j = threadIdx.x; j < {plan.k}; j += {block}) {{
{write_values}      ix[kf_irow(r) + j * {plan.step(plan.indices)}LL] = idx[j];
    }}
    __syncthreads();
  }}
}}
"""


def render(plan: SortPlan, knobs: Knobs, device: DeviceInfo) -> str:
    block = int(knobs["threads_per_block"])
    grid = max(1, min(plan.rows, cuda_grid_limit(device, block)))
    values = "(TB *)outputs[0].data" if plan.values is not None else "(TB *)0"
    args = f"(const TB *)inputs[{plan.x}].data, {values}, (int64_t *)outputs[{len(plan.outputs) - 1}].data"
    return f"""{cxx.CUDA_PRELUDE}
/* {plan.summary}; {knobs} */
{plan.header("static __device__ __forceinline__", descending_keys=plan.descending)}
{_kernel(plan, block)}
extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs)}
  kf_sort<<<{grid}, {block}, 0, (cudaStream_t)stream>>>({args});
{cxx.cuda_launch_epilogue()}
}}
"""
