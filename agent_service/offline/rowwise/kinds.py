"""The row kinds: one record each, holding everything the renderers do differently per kind.

A kind is how a row's statistics are computed (on cuda by thread groups, on cuda by blocks that
each own a chunk of the row, on cpu; for every value of the ``stats`` knob), the per-row values
they finish as, and the value written at each element. The renderers and the plan read nothing
else about a kind, so a new kind is one :class:`RowKind` in :data:`ROW_KINDS`.

C snippets see the element as ``v`` (a float), a partial statistic as ``s`` (``kf_stat``, three
floats ``a``, ``b``, ``c``: see row_helpers.cuh for the ops that merge them) and the finished
statistics as ``st_*``; ``{n}`` stands for the row length as a float literal, ``{eps}`` for
the plan's epsilon and, in per-row values, ``{d}`` for the row length less the plan's correction
(a variance's divisor).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_service.offline import cxx

if TYPE_CHECKING:
    from agent_service.offline.rowwise.plan import RowPlan


@dataclass(frozen=True)
class ReducePass:
    """One reduction over the row on cuda, by the threads that share the row.

    ``update`` folds element ``v`` into ``s`` (initially ``init``); the partials are merged with
    the functor ``op``; ``finish`` sets statistics from the merged ``s``.
    """

    init: str
    update: str
    op: str
    finish: str


@dataclass(frozen=True)
class CpuReduce:
    """A cpu loop folding ``term`` of each element into ``var`` with ``op`` (``+`` or ``max``).

    ``before`` runs first in each iteration (``{inner}``: the row's element stride); ``after``
    follows the loop.
    """

    init: str
    var: str
    op: str
    term: str
    before: str = ""
    after: str = ""


@dataclass(frozen=True)
class CpuLoop:
    """A cpu pass written out in full: ``{L}`` is the row length, ``{xj}`` element ``j`` as a float,
    ``{simd}`` the pragma ``simd`` (left out when the ``simd`` knob is off)."""

    code: str
    simd: str = ""


@dataclass(frozen=True)
class Statistics:
    """One value of the ``stats`` knob: the passes over the row on cuda and on cpu."""

    name: str
    cuda: tuple[ReducePass, ...]
    cpu: tuple[CpuReduce | CpuLoop, ...]


@dataclass(frozen=True)
class ChunkStats:
    """Statistics of a row whose chunks belong to different blocks (split and resident modes).

    Each block folds its elements into ``s`` with ``update``, reduces over its threads with
    ``block_op``, runs ``to_merged`` on the result and stores it; the row's partials are then
    merged with ``merge_op`` and ``finish`` sets the statistics.
    """

    init: str
    update: str
    block_op: str
    merge_op: str
    finish: str
    to_merged: str = ""


@dataclass(frozen=True)
class TileStats:
    """A row reduced by one thread from shared memory (tile mode): ``acc`` starts at ``init``."""

    init: str
    update: str
    value: str


@dataclass(frozen=True)
class StashedExp:
    """A cpu pass that keeps each element's exp in y, replacing the last pass of ``stats``; the
    write then only rescales y (``write``)."""

    stats: str
    cpu: CpuReduce
    write: str


@dataclass(frozen=True)
class RowKind:
    """Everything that differs between row kinds."""

    name: str
    declare: str  # C declaration of the finished statistics, before they are set
    stats: tuple[Statistics, ...]  # the ``stats`` knob's values, the default first
    chunk: ChunkStats
    finish: str  # C statements turning the statistics into the values the write reads
    row_values: Mapping[str, str]  # per-row output name -> its C value
    # The value written at element ``j`` (index ``idx``) of ``row`` (before the plan's activation);
    # None: the kind writes per-row outputs only.
    write: Callable[[RowPlan, str], str] | None = None
    tile: TileStats | None = None  # short rows of this kind may be tiled through shared memory
    # Rows are groups of adjacent channels (group norm): weight and bias are per channel, and the
    # input must be contiguous.
    grouped: bool = False
    stash: StashedExp | None = None

    def statistics(self, name: str) -> Statistics:
        """The statistics of ``stats`` knob value ``name``."""
        return next(s for s in self.stats if s.name == name)


def fill(template: str, **values: str) -> str:
    """``template`` with each ``{name}`` replaced (C braces elsewhere are left alone)."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


# ---- per-element values ------------------------------------------------------------------------

# Activations applied to a written value (``{v}``): the gate of a gated RMS norm, a norm module's own.
ACTIVATIONS = {
    "silu": "(({v}) / (1.0f + KF_EXP(-({v}))))",
    "gelu": "(0.5f * ({v}) * (1.0f + erff(({v}) * 0.7071067811865476f)))",
    "gelu_tanh": "(0.5f * ({v}) * (1.0f + tanhf(0.7978845608028654f * (({v}) + 0.044715f * ({v}) * ({v}) * ({v})))))",
    "relu": "(({v}) < 0.0f ? 0.0f : ({v}))",
}



def _softmax_value(plan: RowPlan, backend: str) -> str:
    return "KF_EXP(v - st_m) * st_inv"


def _log_softmax_value(plan: RowPlan, backend: str) -> str:
    return "v - st_m - st_log"


def _norm_value(plan: RowPlan, backend: str) -> str:
    """(v - mean) * rstd, then the weight and bias (per channel for group norm)."""
    at = "ch" if plan.row_kind.grouped else "j"
    expr = "(v - st_mean) * st_rstd"
    if plan.weight is not None:
        expr = f"{expr} * kf_to_f32(w[{at}])"
    if plan.bias is not None:
        expr = f"{expr} + kf_to_f32(b[{at}])"
    return expr


def _rms_norm_value(plan: RowPlan, backend: str) -> str:
    """v * rstd, rounded to x's dtype where the class does so, times the (offset) weight and the gate."""
    expr = "v * st_rstd"
    if plan.round_before_weight:
        xt = cxx.element_type(plan.inputs[plan.x].dtype, backend)
        expr = f"kf_to_f32(kf_from_f32<{xt}>({expr}))"
    if plan.weight is not None:
        weight = "kf_to_f32(w[j])"
        if plan.weight_offset:
            weight = f"({cxx.cfloat(plan.weight_offset)} + {weight})"
        expr = f"({expr}) * {weight}"
    if plan.gate is not None:
        gate_value = "kf_to_f32(g[idx])"
        expr = f"({expr}) * {ACTIVATIONS[plan.gate_activation].format(v=gate_value)}"
    return expr

# ---- the kinds ---------------------------------------------------------------------------------

_ZERO = "{0.0f, 0.0f, 0.0f}"
_LOWEST = "{-INFINITY, 0.0f, 0.0f}"
# The running max of a row, keeping NaN as eager's amax does (fmaxf would return the other operand).
_MAX_KEEPING_NAN = "s.a = (v != v || v > s.a) ? v : s.a;"
_ONLINE_UPDATE = "if (v > s.a) { s.b = s.b * KF_EXP(s.a - v) + 1.0f; s.a = v; } else s.b += KF_EXP(v - s.a);"

_SUM = Statistics("one_pass", cuda=(ReducePass(_ZERO, "s.a += v;", "kf_sum_op", "st_sum = s.a;"),),
                  cpu=(CpuReduce("0.0f", "st_sum", "+", "v"),))
_SUM_CHUNKS = ChunkStats(_ZERO, "s.a += v;", "kf_sum_op", "kf_sum_op", "st_sum = s.a;")

_SOFTMAX_STATS = (
    Statistics(
        "two_pass",
        # a NaN makes its row NaN through exp(v - max) whatever the max: fmaxf keeps registers free
        cuda=(ReducePass(_LOWEST, "s.a = fmaxf(s.a, v);", "kf_max_op", "st_m = s.a;"),
              ReducePass(_ZERO, "s.a += KF_EXP(v - st_m);", "kf_sum_op", "st_sum = s.a;")),
        cpu=(CpuReduce("-INFINITY", "st_m", "max", "v"), CpuReduce("0.0f", "st_sum", "+", "KF_EXP(v - st_m)")),
    ),
    Statistics(
        "online",
        cuda=(ReducePass(_LOWEST, _ONLINE_UPDATE, "kf_online_op", "st_m = s.a; st_sum = s.b;"),),
        cpu=(CpuLoop("    float st_m = -INFINITY, st_sum = 0.0f;\n"
                     "    for (int64_t j = 0; j < {L}LL; ++j) { const float v = {xj};\n"
                     "      if (v > st_m) { st_sum = st_sum * KF_EXP(st_m - v) + 1.0f; st_m = v; }"
                     " else st_sum += KF_EXP(v - st_m); }\n"),),
    ),
)
_SOFTMAX_CHUNKS = ChunkStats(_LOWEST, _ONLINE_UPDATE, "kf_online_op", "kf_online_op", "st_m = s.a; st_sum = s.b;")
_SOFTMAX_FINISH = "const float st_inv = 1.0f / st_sum; const float st_log = logf(st_sum); (void)st_inv; (void)st_log;"

# logsumexp: eager shifts by the row's maximum unless it is infinite (then by 0), so a row of -inf
# gives -inf and a row holding +inf gives +inf; the online update counts an element equal to the
# running maximum as exp(0), which exp(inf - inf) would make NaN.
_LSE_BASE = "st_base = (st_m == INFINITY || st_m == -INFINITY) ? 0.0f : st_m;"
_LSE_UPDATE = ("if (v > s.a) { s.b = s.b * KF_EXP(s.a - v) + 1.0f; s.a = v; } else if (v == s.a) s.b += 1.0f;"
               " else s.b += KF_EXP(v - s.a);")
_LSE_STATS = Statistics(
    "two_pass",
    cuda=(ReducePass(_LOWEST, "s.a = fmaxf(s.a, v);", "kf_max_op", f"st_m = s.a; {_LSE_BASE}"),
          ReducePass(_ZERO, "s.a += KF_EXP(v - st_base);", "kf_sum_op", "st_sum = s.a;")),
    cpu=(CpuReduce("-INFINITY", "st_m", "max", "v", after=f"    float st_base; {_LSE_BASE}\n"),
         CpuReduce("0.0f", "st_sum", "+", "KF_EXP(v - st_base)")),
)
_LSE_CHUNKS = ChunkStats(_LOWEST, _LSE_UPDATE, "kf_lse_op", "kf_lse_op", "st_m = s.a; st_sum = s.b; st_base = st_m;")

_NORM_STATS = (
    Statistics(
        "two_pass",
        cuda=(ReducePass(_ZERO, "s.a += v;", "kf_sum_op", "st_mean = s.a / {n};"),
              ReducePass(_ZERO, "s.a += (v - st_mean) * (v - st_mean);", "kf_sum_op", "st_var = s.a / {n};")),
        cpu=(CpuReduce("0.0f", "st_sum", "+", "v", after="    const float st_mean = st_sum / {n};\n"),
             CpuReduce("0.0f", "st_sq", "+", "(v - st_mean) * (v - st_mean)",
                       after="    const float st_var = st_sq / {n};\n")),
    ),
    Statistics(
        "one_pass",  # Welford on cuda, shifted sums on cpu
        cuda=(ReducePass(_ZERO, "s.a += 1.0f; { const float d = v - s.b; s.b += d / s.a; s.c += d * (v - s.b); }",
                         "kf_welford_op", "st_mean = s.b; st_var = s.c / {n};"),),
        cpu=(CpuLoop("    const float shift = kf_to_f32(x[base]);\n    float s1 = 0.0f, s2 = 0.0f;\n{simd}\n"
                     "    for (int64_t j = 0; j < {L}LL; ++j) {\n"
                     "      const float d = {xj} - shift; s1 += d; s2 += d * d; }\n"
                     "    const float m1 = s1 / {n};\n"
                     "    const float st_mean = shift + m1, st_var = s2 / {n} - m1 * m1;\n",
                     simd="#pragma omp simd reduction(+:s1, s2)"),),
    ),
)
# Within a block, shifted sums (count, sum and sum of squares of v - shift); they become
# (count, mean, M2) once per block and are merged across blocks with Chan's formula.
_NORM_CHUNKS = ChunkStats(
    _ZERO, "{ const float d = v - shift; s.a += 1.0f; s.b += d; s.c += d * d; }", "kf_sum_op", "kf_welford_op",
    "st_mean = s.b; st_var = s.c / {n};",
    to_merged=("    if (s.a > 0.0f) {\n      const float m = s.b / s.a;\n"
               "      s.c = fmaxf(s.c - m * s.b, 0.0f);\n      s.b = shift + m;\n    }\n"),
)
_NORM_FINISH = "const float st_rstd = 1.0f / sqrtf(fmaxf(st_var, 0.0f) + {eps});"
# The variance with eager's correction: the biased one rescaled to divide by n - correction. A row
# holding an infinity or a NaN (its mean not finite) has a NaN variance, as in eager, whatever the
# running sums made of it; a NaN is kept where the clamp at zero would hide it (fmaxf would).
_VARIANCE = "(st_mean - st_mean != 0.0f ? NAN : (st_var < 0.0f ? 0.0f : st_var) * ({n} / {d}))"
_SUMSQ = Statistics("one_pass", cuda=(ReducePass(_ZERO, "s.a += v * v;", "kf_sum_op", "st_sumsq = s.a;"),),
                    cpu=(CpuReduce("0.0f", "st_sumsq", "+", "v * v"),))
_SUMSQ_CHUNKS = ChunkStats(_ZERO, "s.a += v * v;", "kf_sum_op", "kf_sum_op", "st_sumsq = s.a;")
_NORM_ROW_VALUES = {"mean": "st_mean", "rstd": "st_rstd"}

ROW_KINDS: dict[str, RowKind] = {kind.name: kind for kind in (
    RowKind("sum", declare="float st_sum;", stats=(_SUM,), chunk=_SUM_CHUNKS, finish="",
            row_values={"value": "st_sum"}, tile=TileStats("0.0f", "acc += v;", "acc")),
    RowKind("mean", declare="float st_sum;", stats=(_SUM,), chunk=_SUM_CHUNKS, finish="",
            row_values={"value": "st_sum / {n}"}, tile=TileStats("0.0f", "acc += v;", "acc / {n}")),
    RowKind("amax", declare="float st_m;",
            stats=(Statistics("one_pass", cuda=(ReducePass(_LOWEST, _MAX_KEEPING_NAN, "kf_max_op", "st_m = s.a;"),),
                              cpu=(CpuReduce("-INFINITY", "st_m", "max", "v"),)),),
            chunk=ChunkStats(_LOWEST, _MAX_KEEPING_NAN, "kf_max_op", "kf_max_op", "st_m = s.a;"), finish="",
            row_values={"value": "st_m"}, tile=TileStats("-INFINITY", "acc = (v != v || v > acc) ? v : acc;", "acc")),
    RowKind("softmax", declare="float st_m, st_sum;", stats=_SOFTMAX_STATS, chunk=_SOFTMAX_CHUNKS,
            finish=_SOFTMAX_FINISH, row_values={}, write=_softmax_value,
            stash=StashedExp("two_pass", write="y[idx] * st_inv", cpu=CpuReduce(
                "0.0f", "st_sum", "+", "e", before="const float e = KF_EXP(v - st_m); y[base + j * {inner}LL] = e; "))),
    RowKind("log_softmax", declare="float st_m, st_sum;", stats=_SOFTMAX_STATS, chunk=_SOFTMAX_CHUNKS,
            finish=_SOFTMAX_FINISH, row_values={}, write=_log_softmax_value),
    RowKind("logsumexp", declare="float st_m, st_base, st_sum;", stats=(_LSE_STATS,), chunk=_LSE_CHUNKS,
            finish="", row_values={"value": "st_base + logf(st_sum)"}),
    RowKind("layer_norm", declare="float st_mean, st_var;", stats=_NORM_STATS, chunk=_NORM_CHUNKS,
            finish=_NORM_FINISH, row_values=_NORM_ROW_VALUES, write=_norm_value),
    RowKind("var", declare="float st_mean, st_var;", stats=_NORM_STATS, chunk=_NORM_CHUNKS, finish="",
            row_values={"value": _VARIANCE}),
    RowKind("std", declare="float st_mean, st_var;", stats=_NORM_STATS, chunk=_NORM_CHUNKS, finish="",
            row_values={"value": f"sqrtf({_VARIANCE})"}),
    RowKind("vector_norm", declare="float st_sumsq;", stats=(_SUMSQ,), chunk=_SUMSQ_CHUNKS, finish="",
            row_values={"value": "sqrtf(st_sumsq)"}, tile=TileStats("0.0f", "acc += v * v;", "sqrtf(acc)")),
    RowKind("rms_norm", declare="float st_sumsq;", stats=(_SUMSQ,), chunk=_SUMSQ_CHUNKS,
            finish="const float st_rstd = 1.0f / sqrtf(st_sumsq / {n} + {eps});", row_values={"rstd": "st_rstd"},
            write=_rms_norm_value),
    RowKind("group_norm", declare="float st_mean, st_var;", stats=_NORM_STATS, chunk=_NORM_CHUNKS,
            finish=_NORM_FINISH, row_values=_NORM_ROW_VALUES, write=_norm_value, grouped=True),
)}
