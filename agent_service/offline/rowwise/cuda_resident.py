"""The cuda resident renderer: few rows that fit in shared memory, each block keeping its chunk
on chip across a grid barrier (a cooperative launch), so the input is read from memory once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.rowwise.chunks import chunk_parts, chunk_write, merge_row_partials, partials
from agent_service.offline.rowwise.helpers import CUDA_ROW_HELPERS, math_macros
from kforge_domain.device import DeviceInfo

if TYPE_CHECKING:
    from agent_service.offline.rowwise.plan import RowPlan


def render(plan: RowPlan, knobs: Knobs, device: DeviceInfo) -> str:
    """One cooperative kernel: each block stages its chunk in shared memory while it reduces it,
    the grid synchronises, and every block writes its chunk from shared memory.

    The input is read from memory once (split mode reads it twice). The launch bounds ask the
    compiler to fit ``resident_blocks_per_sm`` blocks per SM, and the launch is refused with a
    status, not run, where the device still cannot hold every block at once (a grid barrier
    would otherwise wait forever).
    """
    block, vec, per_sm = int(knobs["threads_per_block"]), int(knobs["vector"]), int(knobs["resident_blocks_per_sm"])
    chunk = plan.resident_chunk(device, vec, per_sm)
    splits = cxx.ceil_div(plan.length, chunk)
    parts = chunk_parts(plan, knobs, chunk, splits)
    xt = cxx.element_type(plan.inputs[plan.x].dtype, "cuda")
    stage_bytes = chunk * cxx.ELEMENT_BYTES[plan.inputs[plan.x].dtype]

    def staged_loop(body: str, before: str = "", after: str = "") -> str:
        """This thread's vectors of the chunk, read back from shared memory."""
        return (f"  for (int64_t j0 = begin + (int64_t)threadIdx.x * {vec}; j0 < end; j0 += {block * vec}LL) {{\n"
                f"        const kf_vec<{xt}, {vec}> lv = kf_load_vec<{xt}, {vec}>(stage + (j0 - begin));\n"
                f"{before}#pragma unroll\n        for (int k = 0; k < {vec}; ++k) {{\n"
                f"          const int64_t j = j0 + k; (void)j;\n          const float v = kf_to_f32(lv.v[k]);\n"
                f"          {body}\n        }}\n{after}  }}\n")

    params, args = plan.params("cuda")
    aligned = plan.vector_pointers() if vec > 1 else []
    grid = plan.rows * splits
    scratch = partials(grid)
    return f"""{cxx.CUDA_PRELUDE}
#include <cooperative_groups.h>

{CUDA_ROW_HELPERS}
{math_macros("cuda", True)}
/* {plan.summary}; {knobs}; {splits} blocks per row of {chunk} elements */
{scratch.export()}
__global__ void __launch_bounds__({block}, {per_sm}) kf_resident({params}, kf_stat *__restrict__ partials) {{
  extern __shared__ __align__(16) unsigned char kf_stage_bytes[];
  {xt} *stage = reinterpret_cast<{xt} *>(kf_stage_bytes);
  __shared__ kf_stat smem[{parts.smem}];
{parts.locate}{parts.shift_decl}  kf_stat s = {parts.init};
  for (int64_t j0 = begin + (int64_t)threadIdx.x * {vec}; j0 < end; j0 += {block * vec}LL) {{
    const kf_vec<{xt}, {vec}> lv = kf_load_vec<{xt}, {vec}>(x + base + j0);
    kf_store_vec<{xt}, {vec}>(stage + (j0 - begin), lv);
#pragma unroll
    for (int k = 0; k < {vec}; ++k) {{
      const float v = kf_to_f32(lv.v[k]);
      {parts.update}
    }}
  }}
{parts.store_partial}  cooperative_groups::this_grid().sync();
{merge_row_partials(parts, plan, splits)}{chunk_write(plan, vec, staged_loop)}{parts.row_writes}}}

/* Per device: 1 when every block of the grid fits on it at once, -1 when not, 0 before asking. */
static int kf_resident_fits[64];

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, aligned, scratch)}
  cudaStream_t s = (cudaStream_t)stream;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return {cxx.STATUS_LAUNCH_FAILED};
  if (kf_resident_fits[device] == 0) {{
    int sms = 0, per_sm = 0;
    const bool asked =
        cudaFuncSetAttribute(kf_resident, cudaFuncAttributeMaxDynamicSharedMemorySize, {stage_bytes}) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kf_resident, {block}, {stage_bytes}) == cudaSuccess;
    kf_resident_fits[device] = asked && (int64_t)per_sm * sms >= {grid} ? 1 : -1;
  }}
  if (kf_resident_fits[device] < 0) return {cxx.STATUS_LAUNCH_FAILED};
{scratch.take(len(plan.outputs))}  cudaLaunchAttribute cooperative;
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config = {{}};
  config.gridDim = dim3({grid});
  config.blockDim = dim3({block});
  config.dynamicSmemBytes = {stage_bytes};
  config.stream = s;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  const cudaError_t launched = cudaLaunchKernelEx(&config, kf_resident, {args}, partials);
  if (launched != cudaSuccess) return {cxx.STATUS_LAUNCH_FAILED};
{cxx.cuda_launch_epilogue()}
}}
"""
