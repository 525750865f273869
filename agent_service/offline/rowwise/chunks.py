"""What split and resident modes share: blocks that each own a chunk of one row, their partial
statistics (one kf_stat per block, in the caller's workspace) and the merge of a row's partials."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.rowwise.kinds import fill

if TYPE_CHECKING:
    from agent_service.offline.rowwise.plan import RowPlan


@dataclass(frozen=True)
class ChunkParts:
    """Pieces of a kernel whose blocks each own a chunk of one row (split and resident modes)."""

    init: str  # the empty partial statistic
    update: str  # folds element v into partial s
    merge_op: str  # merges the blocks' partials of a row
    finish: str  # sets the row statistics from the merged partial s
    smem: int  # kf_stat slots of the block reduction
    locate: str  # row, base, begin, end of this block's chunk
    shift_decl: str
    store_partial: str  # reduces s over the block and stores it as the block's partial
    row_writes: str  # per-row outputs, written once per row


def chunk_parts(plan: RowPlan, knobs: Knobs, chunk: int, splits: int, block_index: str = "blockIdx.x"
                 ) -> ChunkParts:
    """The pieces for blocks numbered by ``block_index`` (a C expression; the grid's own order by default)."""
    stats = plan.row_kind.chunk
    block = int(knobs["threads_per_block"])
    tree = "true" if knobs["reduce"] == "smem_tree" else "false"
    row_writes = plan.row_output_writes("cuda", "    ")
    if row_writes:
        row_writes = f"  if ({block_index} % {splits} == 0 && threadIdx.x == 0) {{\n{row_writes}  }}\n"
    return ChunkParts(
        init=stats.init, update=stats.update, merge_op=stats.merge_op,
        finish=fill(stats.finish, n=cxx.cfloat(float(plan.length))),
        smem=block if tree == "true" else 32,
        locate=(f"  const int64_t row = {block_index} / {splits};\n"
                f"  const int64_t base = row * {plan.length}LL;\n"
                f"  const int64_t begin = (int64_t)({block_index} % {splits}) * {chunk}LL;\n"
                f"  const int64_t end = begin + {chunk}LL < {plan.length}LL ? begin + {chunk}LL : {plan.length}LL;\n"
                "  (void)base; (void)end;\n"),
        shift_decl="  const float shift = kf_to_f32(x[base]); (void)shift;\n",
        store_partial=(f"  s = kf_group_reduce<{block}, {tree}>(s, {stats.block_op}(), smem);\n"
                       f"  if (threadIdx.x == 0) {{\n{stats.to_merged}    partials[blockIdx.x] = s;\n  }}\n"),
        row_writes=row_writes,
    )


def chunk_write(plan: RowPlan, vec: int, loop: Callable[..., str]) -> str:
    """The loop writing this block's chunk of the elementwise output, ``loop`` walking the values."""
    if plan.y is None:
        return ""
    yt = cxx.element_type(plan.outputs[plan.y].dtype, "cuda")
    expr = plan.write_expr("cuda")
    channel = plan.channel_c()
    per_vector = ""
    if channel and plan.spatial % vec == 0:  # a vector never crosses a channel: one division per vector
        per_vector, channel = "        " + channel.replace(" + j / ", " + j0 / ") + "\n", ""
    return loop(f"const int64_t idx = base + j; (void)idx; {channel}\n"
                f"          out.v[k] = kf_from_f32<{yt}>({expr});",
                before=f"        kf_vec<{yt}, {vec}> out;\n{per_vector}",
                after=f"        kf_store_vec<{yt}, {vec}>(y + base + j0, out);\n")


def partials(grid: int) -> cxx.Workspace:
    """One kf_stat per block, in the workspace the caller passes (kf_abi.h)."""
    return cxx.cuda_scratch("partials", "kf_stat", grid)


def merge_row_partials(parts: ChunkParts, plan: RowPlan, splits: int) -> str:
    """Merges the row's partials into ``s`` and sets the row statistics."""
    return (f"  const kf_stat *mine = partials + row * {splits};\n"
            "  s = mine[0];\n"
            f"  for (int p = 1; p < {splits}; ++p) s = {parts.merge_op}()(s, mine[p]);\n"
            f"  {plan.row_kind.declare}\n  {parts.finish}\n  {plan.row_stats_c()}\n")


