"""The cuda scan renderer: a run per thread, per warp or per block; few long runs split into chunks.

A warp scans 32 consecutive elements at once with ``__shfl_up_sync`` (the loads and stores of a
warp are consecutive, hence coalesced where the run's step is 1), ``items_per_thread`` such
steps per tile, each added to the running carry. A block gives each warp a consecutive segment
of the tile, scans the warps' totals the same way, and carries the tile's total to the next.
Split mode gives each chunk of a run a block: a first kernel reduces every chunk to its total
(into the caller's workspace), a second adds the totals of the chunks before each one to its
carry and scans it as block mode does. Every sum is taken in a fixed order: the same inputs
give the same output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.plan import cuda_grid_limit
from kforge_domain.device import DeviceInfo

if TYPE_CHECKING:
    from agent_service.offline.scan.plan import ScanPlan

FULL_MASK = "0xffffffffu"


def _warp_helpers(totals: bool) -> str:
    """Inclusive scan of a warp's values in lane order; with ``totals``, also their total in every lane."""
    scan = f"""static __device__ __forceinline__ TA kf_warp_scan(TA v, int lane) {{
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {{
    const TA u = __shfl_up_sync({FULL_MASK}, v, d);
    v = lane >= d ? kf_op(u, v) : v;
  }}
  return v;
}}
"""
    if not totals:
        return scan
    return scan + f"""static __device__ __forceinline__ TA kf_warp_total(TA v) {{
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = kf_op(v, __shfl_xor_sync({FULL_MASK}, v, d));
  return v;  /* the same in every lane: each level combines the same two values, in either order */
}}
"""


def _range_scan(plan: ScanPlan, block: int, items: int) -> str:
    """``kf_scan_range``: the block scans ``[start, end)`` of a run from ``carry``.

    Each warp scans its consecutive segment of a tile; the warps' totals, double-buffered in shared
    memory so one barrier per tile suffices, are scanned by every warp alike.
    """
    warps = block // 32
    ident = plan.identity
    return f"""static __device__ __forceinline__ void kf_scan_range(const TI *__restrict__ xr, TO *__restrict__ yr,
                                                     int64_t start, int64_t end, TA carry) {{
  __shared__ TA totals[2][{warps}];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int buffer = 0;
  for (int64_t base = start; base < end; base += {block * items}LL) {{
    const int64_t first = base + (int64_t)warp * {32 * items} + lane;
    TA v[{items}];
#pragma unroll
    for (int i = 0; i < {items}; ++i) {{
      const int64_t j = first + i * 32;
      v[i] = j < end ? kf_load(xr[j * {plan.x_step}LL]) : {ident};
    }}
    TA run = {ident};
#pragma unroll
    for (int i = 0; i < {items}; ++i) {{
      v[i] = kf_op(run, kf_warp_scan(v[i], lane));
      run = __shfl_sync({FULL_MASK}, v[i], 31);
    }}
    if (lane == 31) totals[buffer][warp] = run;
    __syncthreads();
    const TA scanned = kf_warp_scan(lane < {warps} ? totals[buffer][lane] : {ident}, lane);
    const TA before = __shfl_sync({FULL_MASK}, scanned, warp > 0 ? warp - 1 : 0);
    const TA prefix = warp > 0 ? kf_op(carry, before) : carry;
    carry = kf_op(carry, __shfl_sync({FULL_MASK}, scanned, {warps - 1}));
#pragma unroll
    for (int i = 0; i < {items}; ++i) {{
      const int64_t j = first + i * 32;
      if (j < end) yr[j * {plan.y_step}LL] = kf_store(kf_op(prefix, v[i]));
    }}
    buffer ^= 1;
  }}
  __syncthreads();  /* the next call's first tile writes totals[0] */
}}
"""


def _thread_kernel(plan: ScanPlan, block: int) -> str:
    return f"""__global__ void __launch_bounds__({block}) kf_scan(const TI *__restrict__ x, TO *__restrict__ y) {{
  for (int64_t r = (int64_t)blockIdx.x * {block} + threadIdx.x; r < {plan.rows}LL; r += (int64_t)gridDim.x * {block}) {{
{plan.walk_run_c()}  }}
}}
"""


def _warp_kernel(plan: ScanPlan, block: int, items: int) -> str:
    warps = block // 32
    ident = plan.identity
    return f"""__global__ void __launch_bounds__({block}) kf_scan(const TI *__restrict__ x, TO *__restrict__ y) {{
  const int lane = threadIdx.x & 31;
  for (int64_t r = (int64_t)blockIdx.x * {warps} + (threadIdx.x >> 5); r < {plan.rows}LL;
       r += (int64_t)gridDim.x * {warps}) {{
    const TI *xr = x + kf_xrow(r);
    TO *yr = y + kf_yrow(r);
    TA carry = {ident};
    for (int64_t base = lane; base < {plan.length}LL + lane; base += {32 * items}LL) {{
      TA v[{items}];
#pragma unroll
      for (int i = 0; i < {items}; ++i) {{
        const int64_t j = base + i * 32;
        v[i] = j < {plan.length}LL ? kf_load(xr[j * {plan.x_step}LL]) : {ident};
      }}
#pragma unroll
      for (int i = 0; i < {items}; ++i) {{
        v[i] = kf_op(carry, kf_warp_scan(v[i], lane));
        carry = __shfl_sync({FULL_MASK}, v[i], 31);
      }}
#pragma unroll
      for (int i = 0; i < {items}; ++i) {{
        const int64_t j = base + i * 32;
        if (j < {plan.length}LL) yr[j * {plan.y_step}LL] = kf_store(v[i]);
      }}
    }}
  }}
}}
"""


def _block_kernel(plan: ScanPlan, block: int) -> str:
    return f"""__global__ void __launch_bounds__({block}) kf_scan(const TI *__restrict__ x, TO *__restrict__ y) {{
  for (int64_t r = blockIdx.x; r < {plan.rows}LL; r += gridDim.x)
    kf_scan_range(x + kf_xrow(r), y + kf_yrow(r), 0, {plan.length}LL, {plan.identity});
}}
"""


def _split_kernels(plan: ScanPlan, block: int, splits: int) -> str:
    """Chunk totals into ``kf_ws``, then each chunk scanned from the totals of the chunks before it."""
    chunk = cxx.ceil_div(plan.length, splits)
    ident = plan.identity
    chunk_bounds = (f"    const int64_t r = b / {splits}LL, c = b % {splits}LL, start = c * {chunk}LL;\n"
                    f"    const int64_t end = start + {chunk}LL < {plan.length}LL ? start + {chunk}LL "
                    f": {plan.length}LL;\n")
    return f"""__global__ void __launch_bounds__({block}) kf_chunk_totals(const TI *__restrict__ x,
                                                           TA *__restrict__ ws) {{
  __shared__ TA partial[{block // 32}];
  for (int64_t b = blockIdx.x; b < {plan.rows * splits}LL; b += gridDim.x) {{
{chunk_bounds}    const TI *xr = x + kf_xrow(r);
    TA acc = {ident};
    for (int64_t j = start + threadIdx.x; j < end; j += {block}) acc = kf_op(acc, kf_load(xr[j * {plan.x_step}LL]));
    acc = kf_warp_total(acc);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {{
      TA total = {ident};
      for (int w = 0; w < {block // 32}; ++w) total = kf_op(total, partial[w]);
      ws[b] = total;
    }}
    __syncthreads();
  }}
}}
__global__ void __launch_bounds__({block}) kf_scan(const TI *__restrict__ x, TO *__restrict__ y,
                                                   const TA *__restrict__ ws) {{
  for (int64_t b = blockIdx.x; b < {plan.rows * splits}LL; b += gridDim.x) {{
{chunk_bounds}    TA carry = {ident};
    for (int64_t k = threadIdx.x & 31; k < c; k += 32) carry = kf_op(carry, ws[r * {splits}LL + k]);
    carry = kf_warp_total(carry);
    kf_scan_range(x + kf_xrow(r), y + kf_yrow(r), start, end, carry);
  }}
}}
"""


def render(plan: ScanPlan, knobs: Knobs, device: DeviceInfo) -> str:
    mode, block, items = str(knobs["mode"]), int(knobs["threads_per_block"]), int(knobs["items_per_thread"])
    args = f"(const TI *)inputs[{plan.x}].data, (TO *)outputs[0].data"
    scratch = None
    if mode == "thread":
        kernels, grid = _thread_kernel(plan, block), cxx.ceil_div(plan.rows, block)
    elif mode == "warp":
        kernels, grid = _warp_kernel(plan, block, items), cxx.ceil_div(plan.rows, block // 32)
    elif mode == "block":
        kernels, grid = _range_scan(plan, block, items) + _block_kernel(plan, block), plan.rows
    else:
        splits = int(knobs["blocks_per_row"])
        scratch = cxx.cuda_scratch("kf_ws", "TA", plan.rows * splits)
        kernels, grid = _range_scan(plan, block, items) + _split_kernels(plan, block, splits), plan.rows * splits
    grid = max(1, min(grid, cuda_grid_limit(device, block)))
    helpers = _warp_helpers(totals=mode == "split") if mode != "thread" else ""
    if scratch is None:
        launch = f"  kf_scan<<<{grid}, {block}, 0, (cudaStream_t)stream>>>({args});\n"
    else:
        launch = (f"{scratch.take(len(plan.outputs))}"
                  f"  kf_chunk_totals<<<{grid}, {block}, 0, (cudaStream_t)stream>>>((const TI *)inputs[{plan.x}].data, "
                  f"kf_ws);\n"
                  f"  kf_scan<<<{grid}, {block}, 0, (cudaStream_t)stream>>>({args}, kf_ws);\n")
    return f"""{cxx.CUDA_PRELUDE}
/* {plan.summary}; {knobs} */
{plan.header("cuda", str(knobs["accumulate"]))}{scratch.export() if scratch else ""}{helpers}
{kernels}
extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, workspace=scratch)}
{launch}{cxx.cuda_launch_epilogue()}
}}
"""
