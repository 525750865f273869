"""The cuda row renderer for rows that one thread group owns: a thread, a group of lanes of a
warp, a warp, a block, or the warps of a block splitting 32 adjacent rows (columns mode, rows over
an inner dim)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.plan import cuda_grid_limit
from agent_service.offline.rowwise.helpers import CUDA_ROW_HELPERS, math_macros
from agent_service.offline.rowwise.kinds import fill
from kforge_domain.device import DeviceInfo

if TYPE_CHECKING:
    from agent_service.offline.rowwise.plan import RowPlan

MAX_CACHED_FLOATS = 64  # the most row elements a thread keeps in registers (cache_row)
# Columns mode with a contiguous output apart from x: elements per row staged in shared memory
# before the block writes them along the output's rows.
STAGED_WRITE_ELEMENTS = 64


@dataclass(frozen=True)
class _CudaShape:
    nt: int
    block: int
    vec: int
    items: int
    cache: bool


def _cuda_shape(plan: RowPlan, knobs: Knobs) -> _CudaShape:
    block = int(knobs["threads_per_block"])
    vec = int(knobs["vector"]) if plan.inner == 1 else 1
    nt = {"thread": 1, "warp": 32, "block": block, "columns": block // 32,
          "lanes": lanes_per_row(plan.length, vec)}[knobs["mode"]]
    items = cxx.ceil_div(plan.length, nt * vec)
    cache = bool(knobs["cache_row"]) and row_fits_registers(plan.length, nt, vec) and plan.rereads_row(knobs["stats"])
    return _CudaShape(nt, block, vec, items, cache)


def row_fits_registers(length: int, threads: int, vec: int) -> bool:
    """Whether ``threads`` sharing a row of ``length`` each hold their part of it in registers (cache_row)."""
    return cxx.ceil_div(length, threads * vec) * vec <= MAX_CACHED_FLOATS


def lanes_per_row(length: int, vec: int) -> int:
    """Lanes mode: the power of two from 2 to 16 lanes that covers a row with one vector each, so
    a warp holds 32 / lanes rows. A row of 64 bf16 elements (attention heads' q/k norms) gives 8
    lanes: a whole warp per row would leave three lanes in four idle."""
    lanes = 2
    while lanes < 16 and lanes * vec < length:
        lanes *= 2
    return lanes


def _cuda_foreach(plan: RowPlan, shape: _CudaShape, body: str, source: str, before: str = "", after: str = "") -> str:
    """Loop over this thread's elements of the row; ``source``: "global", "fill" (load and cache) or "cache"."""
    xt = cxx.element_type(plan.inputs[plan.x].dtype, "cuda")
    vec, inner = shape.vec, plan.inner
    unroll = _unroll_pragma(shape, source)
    if source == "cache":
        value = f"cache[it * {vec} + k]"
        load = ""
    elif vec > 1:
        load = f"        const kf_vec<{xt}, {vec}> lv = kf_load_vec<{xt}, {vec}>(x + base + j0);\n"
        value = "kf_to_f32(lv.v[k])"
    else:
        load = ""
        value = f"kf_to_f32(x[base + j0 * {inner}LL])"
    fill = f" cache[it * {vec} + k] = v;" if source == "fill" else ""
    return f"""{unroll}
    for (int it = 0; it < {shape.items}; ++it) {{
      const int64_t j0 = ((int64_t)it * {shape.nt} + t) * {vec};
      if (live && j0 < {plan.length}LL) {{
{load}{before}#pragma unroll
        for (int k = 0; k < {vec}; ++k) {{
          const int64_t j = j0 + k; (void)j;
          const float v = {value};{fill}
          {body}
        }}
{after}      }}
    }}
"""


def _unroll_pragma(shape: _CudaShape, source: str) -> str:
    """Loops over a cached row unroll fully: the cache is indexed by the iteration and stays in
    registers only if every index is a constant (partly unrolled, it moved to a local-memory stack)."""
    return "#pragma unroll" if shape.items <= 16 or source != "global" else "#pragma unroll 4"


def _stage_elements(nt: int) -> int:
    """Elements per row one stage of the staged write holds: a whole number of iterations of ``nt`` warps."""
    return max(1, STAGED_WRITE_ELEMENTS // nt) * nt


def _stages_write(plan: RowPlan, knobs: Knobs) -> bool:
    """Columns mode writing an output whose rows are contiguous while x's are strided.

    Lanes hold 32 adjacent rows, adjacent in x but a whole row apart in y: written directly, each
    lane's element lands in its own 32-byte sector (a transposed softmax ran at 5 % of its floor).
    The block stages a 32-row by :data:`STAGED_WRITE_ELEMENTS` tile in shared memory and writes it
    back along y's rows.
    """
    return knobs["mode"] == "columns" and plan.y is not None and plan.y_apart and plan.y_inner == 1


def _cuda_staged_write(plan: RowPlan, shape: _CudaShape, source: str) -> str:
    """The write pass of :func:`_stages_write`: stage ``STAGED_WRITE_ELEMENTS`` elements per row, then store."""
    assert plan.y is not None and shape.vec == 1
    yt = cxx.element_type(plan.outputs[plan.y].dtype, "cuda")
    nt, L = shape.nt, plan.length
    per_stage = _stage_elements(nt) // nt  # iterations whose elements one stage holds
    value = "cache[it]" if source == "cache" else f"kf_to_f32(x[base + j * {plan.inner}LL])"
    return f"""{_unroll_pragma(shape, source)}
    for (int it = 0; it < {shape.items}; ++it) {{
      const int64_t j = (int64_t)it * {nt} + t;
      if (live && j < {L}LL) {{
        const int64_t idx = base + j * {plan.inner}LL; (void)idx;
        const float v = {value};
        kf_stage[(it % {per_stage}) * {nt} + t][threadIdx.x % 32] = {plan.write_expr("cuda")};
      }}
      if ((it + 1) % {per_stage} == 0 || it == {shape.items - 1}) {{
        __syncthreads();
        const int64_t j_first = (int64_t)(it - it % {per_stage}) * {nt};
        for (int r = t; r < 32; r += {nt}) {{
          const int64_t wrow = row0 + r;
          if (wrow >= {plan.rows}LL) continue;
          for (int k = threadIdx.x % 32; k < {_stage_elements(nt)}; k += 32) {{
            if (j_first + k < {L}LL) y[wrow * {L}LL + j_first + k] = kf_from_f32<{yt}>(kf_stage[k][r]);
          }}
        }}
        __syncthreads();
      }}
    }}
"""


def render(plan: RowPlan, knobs: Knobs, device: DeviceInfo) -> str:
    """One kernel whose rows each belong to a thread, a warp, a block, or (columns) a block's warps."""
    shape = _cuda_shape(plan, knobs)
    tree = "true" if knobs["reduce"] == "smem_tree" else "false"
    nt = shape.nt
    passes: list[str] = []
    first = "fill" if shape.cache else "global"
    later = "cache" if shape.cache else "global"

    columns = knobs["mode"] == "columns"
    reducer = f"kf_column_reduce<{nt}>" if columns else f"kf_group_reduce<{nt}, {tree}>"

    def reduce_pass(init: str, update: str, op: str, finish: str, source: str) -> str:
        loop = _cuda_foreach(plan, shape, update, source)
        return (f"    {{ kf_stat s = {init};\n{loop}"
                f"    s = {reducer}(s, {op}(), smem);\n    {finish} }}\n")

    n = cxx.cfloat(float(plan.length))
    decl = plan.row_kind.declare
    for i, step in enumerate(plan.row_kind.statistics(knobs["stats"]).cuda):
        passes.append(reduce_pass(step.init, step.update, step.op, fill(step.finish, n=n), first if i == 0 else later))
    source_after = later
    stats = "".join(passes) + "    " + plan.row_stats_c() + "\n"
    write = ""
    staged = _stages_write(plan, knobs)
    if staged:
        write = _cuda_staged_write(plan, shape, source_after)
    elif plan.y is not None:
        yt = cxx.element_type(plan.outputs[plan.y].dtype, "cuda")
        expr = plan.write_expr("cuda")
        if shape.vec > 1:
            body = (f"const int64_t idx = base + j; (void)idx; {plan.channel_c()}\n"
                    f"          out.v[k] = kf_from_f32<{yt}>({expr});")
            write = _cuda_foreach(
                plan, shape, body, source_after,
                before=f"        kf_vec<{yt}, {shape.vec}> out;\n",
                after=f"        kf_store_vec<{yt}, {shape.vec}>(y + base + j0, out);\n",
            )
        else:
            unused = " (void)idx;" if plan.y_apart else ""
            body = (f"const int64_t idx = base + j * {plan.inner}LL;{unused} {plan.channel_c()}\n"
                    f"          y[{plan.y_index_c()}] = kf_from_f32<{yt}>({expr});")
            write = plan.y_base_c("    ") + _cuda_foreach(plan, shape, body, source_after)
    row_writes = plan.row_output_writes("cuda", "      ")
    if row_writes:
        row_writes = f"    if (t == 0 && live) {{\n{row_writes}    }}\n"
    params, args = plan.params("cuda")
    gpb = 32 if columns else shape.block // nt
    grid = max(1, min(cxx.ceil_div(plan.rows, gpb), cuda_grid_limit(device, shape.block)))
    smem = shape.block if (tree == "true" and nt > 32) or columns else 32
    if columns:
        # 32 adjacent rows per block (adjacent in memory when inner > 1), nt threads split each row;
        # every thread runs the same number of iterations because the block synchronises.
        row_loop = (f"  const int t = threadIdx.x / 32;\n"
                    f"  for (int64_t row0 = (int64_t)blockIdx.x * 32; row0 < {plan.rows}LL;\n"
                    "       row0 += (int64_t)gridDim.x * 32) {\n"
                    f"    const int64_t row = row0 + threadIdx.x % 32;\n    const bool live = row < {plan.rows}LL;\n")
    elif knobs["mode"] == "lanes":
        # Every lane of a warp runs the loop as long as the warp's first row exists, so the
        # reduction's shuffles always see the whole warp; a group past the last row only idles.
        row_loop = (f"  const int t = threadIdx.x % {nt};\n"
                    f"  for (int64_t row_w = (int64_t)blockIdx.x * {gpb} + (threadIdx.x / 32) * {32 // nt};\n"
                    f"       row_w < {plan.rows}LL; row_w += (int64_t)gridDim.x * {gpb}) {{\n"
                    f"    const int64_t row = row_w + (threadIdx.x % 32) / {nt};\n"
                    f"    const bool live = row < {plan.rows}LL;\n")
    else:
        row_loop = (f"  const int t = threadIdx.x % {nt};\n"
                    f"  for (int64_t row = (int64_t)blockIdx.x * {gpb} + threadIdx.x / {nt}; row < {plan.rows}LL;\n"
                    f"       row += (int64_t)gridDim.x * {gpb}) {{\n    const bool live = true;\n")
    aligned = plan.vector_pointers() if shape.vec > 1 else []
    cache_decl = f"    float cache[{shape.items * shape.vec}]; (void)cache;\n" if shape.cache else ""
    stage_decl = f"  __shared__ float kf_stage[{_stage_elements(nt)}][33];" if staged else ""
    return f"""{cxx.CUDA_PRELUDE}

{CUDA_ROW_HELPERS}
{math_macros("cuda", True)}
/* {plan.summary}; {knobs} */
__global__ void __launch_bounds__({shape.block}) kf_rows({params}) {{
  __shared__ kf_stat smem[{smem}];
{stage_decl}
{row_loop}    const int64_t base = {plan.x_base_c()};
{cache_decl}    {decl}
{stats}{write}{row_writes}  }}
}}

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, aligned)}
  kf_rows<<<{grid}, {shape.block}, 0, (cudaStream_t)stream>>>({args});
{cxx.cuda_launch_epilogue()}
}}
"""

