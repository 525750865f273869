"""The cuda split renderer: few long rows, each split over several blocks whose partial
statistics a second kernel merges before writing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.rowwise.chunks import chunk_parts, chunk_write, merge_row_partials, partials
from agent_service.offline.rowwise.helpers import CUDA_ROW_HELPERS, math_macros

if TYPE_CHECKING:
    from agent_service.offline.rowwise.plan import RowPlan


def render(plan: RowPlan, knobs: Knobs) -> str:
    """Two kernels: per-block partial statistics of a row chunk, then merge and write the chunk.

    Doing rows a few at a time so that the second read comes from L2 was measured slower on the
    H200 (fewer blocks per launch): the whole tensor goes in one pair of launches. With ``order``
    ``reverse`` the second kernel takes the chunks in the opposite order: blocks start roughly in
    index order, so its first blocks re-read the chunks the first kernel read last, which are the
    ones still in L2.
    """
    block, vec, splits = int(knobs["threads_per_block"]), int(knobs["vector"]), int(knobs["blocks_per_row"])
    unroll = int(knobs["unroll"])
    chunk = cxx.ceil_div(cxx.ceil_div(plan.length, splits), vec) * vec
    parts = chunk_parts(plan, knobs, chunk, splits)
    xt = cxx.element_type(plan.inputs[plan.x].dtype, "cuda")

    def chunk_loop(body: str, before: str = "", after: str = "") -> str:
        """This thread's vectors of the chunk, ``unroll`` loads issued before any is used."""
        step = block * vec
        return (f"    for (int64_t jb = begin + (int64_t)threadIdx.x * {vec}; jb < end; jb += {step * unroll}LL) {{\n"
                f"      kf_vec<{xt}, {vec}> loaded[{unroll}];\n"
                f"#pragma unroll\n      for (int u = 0; u < {unroll}; ++u) {{\n"
                f"        const int64_t j0 = jb + (int64_t)u * {step};\n"
                f"        if (j0 < end) loaded[u] = kf_load_vec<{xt}, {vec}>(x + base + j0);\n      }}\n"
                f"#pragma unroll\n      for (int u = 0; u < {unroll}; ++u) {{\n"
                f"        const int64_t j0 = jb + (int64_t)u * {step};\n        if (j0 >= end) break;\n"
                f"        const kf_vec<{xt}, {vec}> lv = loaded[u];\n"
                f"{before}#pragma unroll\n        for (int k = 0; k < {vec}; ++k) {{\n"
                f"          const int64_t j = j0 + k; (void)j;\n          const float v = kf_to_f32(lv.v[k]);\n"
                f"          {body}\n        }}\n{after}      }}\n    }}\n")

    params, args = plan.params("cuda")
    xparam = params.split(",")[0]
    aligned = plan.vector_pointers() if vec > 1 else []
    grid = plan.rows * splits
    scratch = partials(grid)
    # The writing kernel's blocks, numbered in the order ``order`` asks for.
    apply = chunk_parts(plan, knobs, chunk, splits, block_index="kf_block")
    first = "gridDim.x - 1 - " if knobs["order"] == "reverse" else ""
    return f"""{cxx.CUDA_PRELUDE}

{CUDA_ROW_HELPERS}
{math_macros("cuda", True)}
/* {plan.summary}; {knobs} */
{scratch.export()}
__global__ void __launch_bounds__({block}) kf_partials({xparam}, kf_stat *__restrict__ partials) {{
  __shared__ kf_stat smem[{parts.smem}];
{parts.locate}{parts.shift_decl}  kf_stat s = {parts.init};
{chunk_loop(parts.update)}{parts.store_partial}}}

__global__ void __launch_bounds__({block}) kf_apply({params}, const kf_stat *__restrict__ partials) {{
  const int64_t kf_block = {first}(int64_t)blockIdx.x;
{apply.locate}  kf_stat s;
{merge_row_partials(apply, plan, splits)}{chunk_write(plan, vec, chunk_loop)}{apply.row_writes}}}

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, aligned, scratch)}
  cudaStream_t s = (cudaStream_t)stream;
{scratch.take(len(plan.outputs))}\
  kf_partials<<<{grid}, {block}, 0, s>>>((const {xt} *)inputs[{plan.x}].data, partials);
  kf_apply<<<{grid}, {block}, 0, s>>>({args}, partials);
{cxx.cuda_launch_epilogue()}
}}
"""
