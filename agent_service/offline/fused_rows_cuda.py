"""The cuda renderer of fused rows: each row belongs to a thread, a warp or a block, which sweep it
with 16-byte loads and reduce with the row engine's group reduction (row_helpers.cuh); or, for
rows whose elements lie apart (a channels-first norm reducing over dim 1), the warps of a block
split 32 adjacent rows (``columns``), so each load of a warp reads 32 neighbouring elements."""

from __future__ import annotations

from dataclasses import dataclass

from agent_service.offline import cxx
from agent_service.offline.elementwise import _math_macros, _offsets
from agent_service.offline.fused_rows import FusedRowPlan, Sweep, kernel_signature, with_types
from agent_service.offline.knobs import Knobs
from agent_service.offline.plan import cuda_grid_limit
from agent_service.offline.rowwise.cpu import _combine
from agent_service.offline.rowwise.cuda_rows import MAX_CACHED_FLOATS
from agent_service.offline.rowwise.helpers import CUDA_ROW_HELPERS
from kforge_domain.device import DeviceInfo

_REDUCE_OPS = {"+": "kf_sum_op", "max": "kf_max_op"}


@dataclass
class _Rows:
    """How this kernel walks a row: ``nt`` threads, ``items`` vectors of ``vec`` each, and which
    operands stay in registers (``cached``) and are already there (``filled``)."""

    plan: FusedRowPlan
    nt: int
    vec: int
    items: int
    cached: set[int]
    filled: set[int]

    def loop(self, needs: frozenset[str], body: str, before: str = "", after: str = "") -> str:
        """This thread's elements of the row, the values ``needs`` takes computed at each (``j``)."""
        plan, vec = self.plan, self.vec
        _, last = plan.last_strides()
        elements, operands = plan.needed(needs)
        vectors, values = "", ""
        for i in operands:
            t = cxx.element_type(plan.operands[i].dtype, "cuda")
            if i in self.filled:
                values += f"          const float x{i} = c{i}[it * {vec} + k];\n"
                continue
            if vec > 1 and last[i] == 1:
                vectors += f"        const kf_vec<{t}, {vec}> l{i} = kf_load_vec<{t}, {vec}>(in{i} + o{i} + j0);\n"
                values += f"          const float x{i} = kf_to_f32(l{i}.v[k]);\n"
            else:
                values += f"          const float x{i} = kf_to_f32(in{i}[o{i} + j * {last[i]}LL]);\n"
            if i in self.cached:
                values += f"          c{i}[it * {vec} + k] = x{i};\n"
        self.filled |= self.cached & set(operands)
        values += "".join(f"          const float {e.local} = {e.expression};\n" for e in elements)
        # A cached row is indexed by the iteration: fully unrolled, the index is a constant and the
        # cache stays in registers (see cuda_rows._unroll_pragma).
        unroll = "#pragma unroll" if self.items <= 16 or self.cached else "#pragma unroll 4"
        return f"""{unroll}
    for (int it = 0; it < {self.items}; ++it) {{
      const int64_t j0 = ((int64_t)it * {self.nt} + t) * {vec};
      if (j0 < {plan.length}LL && live) {{
{vectors}{before}#pragma unroll
        for (int k = 0; k < {vec}; ++k) {{
          const int64_t j = j0 + k; (void)j;
{values}          {body}
        }}
{after}      }}
    }}
"""


def _cached(plan: FusedRowPlan, knobs: Knobs, nt: int, vec: int) -> set[int]:
    """Operands read by more than one pass, kept in registers where they all fit (``cache_row``)."""
    if not knobs["cache_row"]:
        return set()
    reread = plan.reread_operands()
    return reread if plan.cached_floats(len(reread), nt, vec) <= MAX_CACHED_FLOATS else set()


def _row_loop(plan: FusedRowPlan, columns: bool, nt: int, per_block: int) -> str:
    """The loop over this thread's rows, ``t`` its place among a row's threads; ``live`` is false for
    a columns lane past the last row, which still joins every reduction of its block."""
    if columns:
        return (f"  const int t = threadIdx.x / 32;\n"
                f"  for (int64_t row0 = (int64_t)blockIdx.x * 32; row0 < {plan.rows}LL;\n"
                f"       row0 += (int64_t)gridDim.x * 32) {{\n"
                f"    const int64_t row = row0 + threadIdx.x % 32;\n    const bool live = row < {plan.rows}LL;")
    return (f"  const int t = threadIdx.x % {nt};\n"
            f"  for (int64_t row = (int64_t)blockIdx.x * {per_block} + threadIdx.x / {nt}; row < {plan.rows}LL;\n"
            f"       row += (int64_t)gridDim.x * {per_block}) {{\n    const bool live = true;")


def render(plan: FusedRowPlan, knobs: Knobs, device: DeviceInfo) -> str:
    """One kernel: per row, its sweeps (each reduced over the row's threads) and row values, then the write."""
    block = int(knobs["threads_per_block"])
    columns = knobs["mode"] == "columns"
    nt = {"thread": 1, "warp": 32, "block": block, "columns": block // 32}[knobs["mode"]]
    vec = int(knobs["vector"])
    items = cxx.ceil_div(plan.length, nt * vec)
    rows = _Rows(plan, nt, vec, items, _cached(plan, knobs, nt, vec), set())
    tree = "true" if knobs["reduce"] == "smem_tree" else "false"
    reducer = f"kf_column_reduce<{nt}>" if columns else f"kf_group_reduce<{nt}, {tree}>"
    body = "".join(f"    float c{i}[{items * vec}];\n" for i in sorted(rows.cached))
    for step in plan.steps:
        if not isinstance(step, Sweep):
            body += f"    const float {step.local} = {step.expression};\n"
            continue
        fold = f"{{ const float v = {step.value}; {_combine(step.op, 's.a', step.term)} }}"
        body += (f"    float {step.acc};\n    {{ kf_stat s = {{{step.init}, 0.0f, 0.0f}};\n"
                 f"{rows.loop(step.needs | {step.value}, fold)}"
                 f"    s = {reducer}(s, {_REDUCE_OPS[step.op]}(), smem);\n"
                 f"    {step.acc} = s.a; }}\n")
    out_t = cxx.element_type(plan.outputs[0].dtype, "cuda")
    out_last, _ = plan.last_strides()
    needs = plan.result_needs | {plan.result}
    if vec > 1:
        body += rows.loop(needs, f"r.v[k] = kf_from_f32<{out_t}>({plan.result});",
                          before=f"        kf_vec<{out_t}, {vec}> r;\n",
                          after=f"        kf_store_vec<{out_t}, {vec}>(out + oo + j0, r);\n")
    else:
        body += rows.loop(needs, f"out[oo + j * {out_last}LL] = kf_from_f32<{out_t}>({plan.result});")
    shape, out_strides, op_strides = plan.outer()
    names = [(f"o{i}", s) for i, s in enumerate(op_strides)] + [("oo", out_strides)]
    params, args = kernel_signature(plan, "cuda")
    per_block = 32 if columns else block // nt
    grid = max(1, min(cxx.ceil_div(plan.rows, per_block), cuda_grid_limit(device, block)))
    smem = block if (tree == "true" and nt > 32) or columns else 32
    _, last = plan.last_strides()
    aligned = [f"inputs[{o.tensor}].data" for o, s in zip(plan.operands, last, strict=True) if s == 1]
    aligned = [*dict.fromkeys(aligned), "outputs[0].data"] if vec > 1 else []
    return with_types(f"""{cxx.CUDA_PRELUDE}

{CUDA_ROW_HELPERS}
{_math_macros("cuda", bool(knobs["fast_math"]))}
/* {plan.summary}; {knobs} */
__global__ void __launch_bounds__({block}) kf_rows({params}) {{
  __shared__ kf_stat smem[{smem}];
{_row_loop(plan, columns, nt, per_block)}
{_offsets(shape, names, "row", "    ")}
{body}  }}
}}

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, aligned)}
  kf_rows<<<{grid}, {block}, 0, (cudaStream_t)stream>>>({args});
{cxx.cuda_launch_epilogue()}
}}
""", "cuda")
