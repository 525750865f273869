"""The cuda sort renderer: eager's cuda sorting orders, ties included.

``stable``: a block per row, a bitonic network over ``(key, index)`` pairs in shared memory,
padded to a power of two with pairs that compare after every real one (the largest key, an
index past the row). The lexicographic compare leaves the pairs in one order only, since no two
are equal: eager's stable order.

``cuda_bitonic``: a thread per row replays eager's ``SmallBitonicSort`` (``bitonicSortKVInPlace``
in aten/src/ATen/native/cuda/SortUtils.cuh, with ``LTOp``/``GTOp<T, true>``): the same 32-slot
network, compare-exchange for compare-exchange, with its validity flags, so equal keys end
where eager's leave them.

``cuda_topk``: eager's topk (aten/src/ATen/native/cuda/TensorTopK.cpp/.cu) in one block per row:
the radix select's order picks the k (the pairs sorted by ``kf_select_key`` and index, the
first k taken); they are put in eager's gathered order (those beyond the k-th key in index
order, then those equal to it in index order); then ordered as ``sortKeyValueInplace`` orders
them: the bitonic replay for k up to 32, stable by key and gathered position above (its
warp merge and radix sorts are stable).

The values are written as the input's raw bits. No scratch, no host synchronisation: one launch
on the caller's stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.plan import cuda_grid_limit
from kforge_domain.device import DeviceInfo

if TYPE_CHECKING:
    from agent_service.offline.sort.plan import SortPlan

BITONIC_SIZE = 32  # eager's cuda SmallBitonicSort: a 32-slot network, rows of up to 32

# The network's pass over (key, index) pairs in shared memory, lexicographic, ascending; ends synchronised.
# Thread t of a pass compares slots a = 2t - (t & (stride - 1)) and a + stride: for strides up to 32
# the 32 values of t a warp takes (t = lane + a multiple of 32, the block a whole number of warps)
# stay within the same 64 slots in every pass, so a pass of such a stride after another reads only
# what its own warp wrote, and the warp alone waits; any other pass waits for the whole block.
NETWORK = """template <int N> static __device__ __forceinline__ void kf_network(TB *key, int32_t *idx) {
  int before = 64;  /* the stride of the pass before; the first follows writes by any thread */
  for (int size = 2; size <= N; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      if (stride <= 32 && before <= 32) __syncwarp(); else __syncthreads();
      before = stride;
      for (int t = threadIdx.x; t < N / 2; t += blockDim.x) {
        const int a = 2 * t - (t & (stride - 1)), b = a + stride;
        const bool b_first = key[b] < key[a] || (key[b] == key[a] && idx[b] < idx[a]);
        if (b_first == ((a & size) == 0)) {
          const TB kt = key[a]; key[a] = key[b]; key[b] = kt;
          const int32_t it = idx[a]; idx[a] = idx[b]; idx[b] = it;
        }
      }
    }
  }
  __syncthreads();
}
"""

# Eager's 32-slot bitonic network (16 threads, two slots each), replayed by one thread: slot a
# goes after slot b unless a's key is less (and a is valid) or b is invalid; equal keys swap.
SMALL_BITONIC = """static __device__ __forceinline__ void kf_bitonic_swap(TB *key, int32_t *idx, uint32_t *valid,
                                                       int a, int b, bool dir) {
  const bool va = (*valid >> a) & 1u, vb = (*valid >> b) & 1u;
  const bool swap = (key[a] < key[b] && va) || !vb;
  if (swap == dir) {
    const TB kt = key[a]; key[a] = key[b]; key[b] = kt;
    const int32_t it = idx[a]; idx[a] = idx[b]; idx[b] = it;
    if (va != vb) *valid ^= (1u << a) | (1u << b);
  }
}
static __device__ __forceinline__ void kf_small_bitonic(TB *key, int32_t *idx, uint32_t valid) {
#pragma unroll
  for (int size = 2; size < 32; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
#pragma unroll
      for (int t = 0; t < 16; ++t)
        kf_bitonic_swap(key, idx, &valid, 2 * t - (t & (stride - 1)), 2 * t - (t & (stride - 1)) + stride,
                        (t & (size >> 1)) != 0);
    }
  }
#pragma unroll
  for (int stride = 16; stride > 0; stride >>= 1) {
#pragma unroll
    for (int t = 0; t < 16; ++t)
      kf_bitonic_swap(key, idx, &valid, 2 * t - (t & (stride - 1)), 2 * t - (t & (stride - 1)) + stride, false);
  }
}
"""


def _valid(n: int) -> str:
    """The network's validity flags for a row of ``n`` (<= 32): the first ``n`` slots hold elements."""
    return f"{(1 << n) - 1}u"


def _write(plan: SortPlan, j: str, element: str, indent: str) -> str:
    """Statements writing output position ``j`` of row ``r`` from the row's element ``element``."""
    out = ""
    if plan.values is not None:
        source = f"xr[(int64_t)({element}) * {plan.step(plan.source)}LL]"
        out += f"{indent}v[kf_vrow(r) + (int64_t)({j}) * {plan.step(plan.values)}LL] = {source};\n"
    return out + f"{indent}ix[kf_irow(r) + (int64_t)({j}) * {plan.step(plan.indices)}LL] = {element};\n"


def _stable_kernel(plan: SortPlan, block: int) -> str:
    n, padded, x_step = plan.length, plan.padded, plan.step(plan.source)
    return f"""{NETWORK}
__global__ void __launch_bounds__({block}) kf_sort(const TB *__restrict__ x, TB *__restrict__ v,
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
    kf_network<{padded}>(key, idx);
    for (int j = threadIdx.x; j < {plan.k}; j += {block}) {{
{_write(plan, "j", "idx[j]", "      ")}    }}
    __syncthreads();
  }}
}}
"""


def _bitonic_kernel(plan: SortPlan, block: int) -> str:
    n, x_step = plan.length, plan.step(plan.source)
    return f"""{SMALL_BITONIC}
__global__ void __launch_bounds__({block}) kf_sort(const TB *__restrict__ x, TB *__restrict__ v,
                                                  int64_t *__restrict__ ix) {{
  (void)v;
  for (int64_t r = (int64_t)blockIdx.x * {block} + threadIdx.x; r < {plan.rows}LL; r += (int64_t)gridDim.x * {block}) {{
    const TB *xr = x + kf_xrow(r);
    TB key[32];
    int32_t idx[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) {{
      key[j] = j < {n} ? kf_key(xr[(int64_t)j * {x_step}LL]) : (TB)0;
      idx[j] = j < {n} ? j : 0;
    }}
    kf_small_bitonic(key, idx, {_valid(n)});
#pragma unroll
    for (int j = 0; j < {n}; ++j) {{
{_write(plan, "j", "idx[j]", "      ")}    }}
  }}
}}
"""


def _topk_kernel(plan: SortPlan, block: int) -> str:
    n, padded, k, pk, x_step = plan.length, plan.padded, plan.k, plan.padded_k, plan.step(plan.source)
    if plan.selects_only:
        order = f"""    for (int j = threadIdx.x; j < {k}; j += {block}) {{
{_write(plan, "j", "idx[j]", "      ")}    }}
"""
    elif k <= BITONIC_SIZE:
        order = f"""    if (threadIdx.x == 0) {{
      TB small[32];
      int32_t pick[32];
#pragma unroll
      for (int j = 0; j < 32; ++j) {{
        pick[j] = j < {k} ? idx[j] : 0;
        small[j] = j < {k} ? kf_key(xr[(int64_t)pick[j] * {x_step}LL]) : (TB)0;
      }}
      kf_small_bitonic(small, pick, {_valid(k)});
      for (int j = 0; j < {k}; ++j) {{
{_write(plan, "j", "pick[j]", "        ")}      }}
    }}
"""
    else:
        order = f"""    for (int j = threadIdx.x; j < {k}; j += {block}) picks[j] = idx[j];
    __syncthreads();
    for (int j = threadIdx.x; j < {pk}; j += {block}) {{  // stable by key, then gathered position
      key[j] = j < {k} ? kf_key(xr[(int64_t)picks[j] * {x_step}LL]) : (TB)~(TB)0;
      idx[j] = j;
    }}
    kf_network<{pk}>(key, idx);
    for (int j = threadIdx.x; j < {k}; j += {block}) {{
{_write(plan, "j", "picks[idx[j]]", "      ")}    }}
"""
    sorts_small = not plan.selects_only and k <= BITONIC_SIZE
    picks = f"  __shared__ int32_t picks[{pk}];\n" if not plan.selects_only and not sorts_small else ""
    return f"""{NETWORK}{SMALL_BITONIC if sorts_small else ""}
__global__ void __launch_bounds__({block}) kf_sort(const TB *__restrict__ x, TB *__restrict__ v,
                                                  int64_t *__restrict__ ix) {{
  __shared__ TB key[{padded}];
  __shared__ int32_t idx[{padded}];
{picks}  (void)v;
  for (int64_t r = blockIdx.x; r < {plan.rows}LL; r += gridDim.x) {{
    const TB *xr = x + kf_xrow(r);
    for (int j = threadIdx.x; j < {padded}; j += {block}) {{
      key[j] = j < {n} ? kf_select_key(xr[(int64_t)j * {x_step}LL]) : (TB)~(TB)0;
      idx[j] = j;
    }}
    kf_network<{padded}>(key, idx);  // the first k are eager's selection
    const TB kth = key[{k - 1}];
    __syncthreads();
    for (int j = threadIdx.x; j < {pk}; j += {block})  // gathered order: beyond the k-th, then equal to it
      key[j] = j < {k} ? (TB)(key[j] == kth ? 1 : 0) : (TB)2;
    kf_network<{pk}>(key, idx);
{order}    __syncthreads();
  }}
}}
"""


def render(plan: SortPlan, knobs: Knobs, device: DeviceInfo) -> str:
    block = int(knobs["threads_per_block"])
    if plan.order == "cuda_bitonic":
        kernel = _bitonic_kernel(plan, block)
        grid = max(1, min(-(-plan.rows // block), cuda_grid_limit(device, block)))
    else:
        kernel = _topk_kernel(plan, block) if plan.order == "cuda_topk" else _stable_kernel(plan, block)
        grid = max(1, min(plan.rows, cuda_grid_limit(device, block)))
    values = "(TB *)outputs[0].data" if plan.values is not None else "(TB *)0"
    args = f"(const TB *)inputs[{plan.x}].data, {values}, (int64_t *)outputs[{len(plan.outputs) - 1}].data"
    return f"""{cxx.CUDA_PRELUDE}
/* {plan.summary}; {knobs} */
{plan.header("static __device__ __forceinline__", descending_keys=plan.descending)}
{kernel}
extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs)}
  kf_sort<<<{grid}, {block}, 0, (cudaStream_t)stream>>>({args});
{cxx.cuda_launch_epilogue()}
}}
"""
