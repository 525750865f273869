"""Fused row kernels: a chain of elementwise calls around reductions over one dim (the last, or
another: a channels-first norm reduces over dim 1).

Normalisations written by hand (``x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w``, a
softmax as ``exp(x - amax)`` over its sum, a residual add then a norm) run in eager as one pass
over memory per call, each writing an intermediate. A row kernel sweeps each row once per
reduction, computing the calls that feed it per element, then writes the output once; every
intermediate stays in registers.

The plan is a list of :data:`RowStep`: a :class:`Sweep` folds an element value over the row
(sum or max, in fp32), a :class:`RowValue` computes a per-row value from finished sweeps (a
reduction's result, or a call on such results like ``rsqrt(mean + eps)``), and the final write
computes the result per element. Element values are recomputed in each sweep that needs them,
from operands re-read (cuda may keep them in registers: ``cache_row``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import broadcast_strides, coalesce, is_dense
from agent_service.offline.plan import cpu_thread_choices
from agent_service.offline.rowwise.cuda_rows import MAX_CACHED_FLOATS
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo

FAMILY = "fused_rows"
#: Reductions over the last dim the fuser computes (var, std and logsumexp take two sweeps).
REDUCTIONS = ("sum", "mean", "amax", "var", "std", "linalg_vector_norm", "logsumexp")
#: ``linalg_vector_norm``'s orders: (op, term of v, result of the accumulator ``a``).
NORM_ORDERS = {1.0: ("+", "fabsf(v)", "{a}"), 2.0: ("+", "v * v", "sqrtf({a})"),
               float("inf"): ("max", "fabsf(v)", "{a}")}
MAX_SWEEPS = 4
_TYPE_SLOT = re.compile(r"@(\w+)@")
_OPERAND = re.compile(r"^x(\d+)$")


def with_types(text: str, backend: str) -> str:
    """``text`` with each ``@dtype@`` slot replaced by the backend's element type."""
    return _TYPE_SLOT.sub(lambda m: cxx.element_type(m.group(1), backend), text)


def operand_indices(needs: Iterable[str]) -> list[int]:
    """The operand positions among C names (``x<i>`` is operand ``i``)."""
    return sorted(int(m.group(1)) for name in needs if (m := _OPERAND.match(name)))


@dataclass(frozen=True)
class RowOperand:
    """An input read at every element of the output, broadcast (stride 0) where it is smaller, or at
    ``strides`` per output dim (a view of the input the program takes)."""

    tensor: int
    dtype: str
    strides: tuple[int, ...] | None = None

    def output_strides(self, inputs: tuple[TensorSpec, ...], shape: list[int] | tuple[int, ...]) -> list[int]:
        """Its stride along each output dim."""
        return list(self.strides) if self.strides is not None else broadcast_strides(inputs[self.tensor], shape)


@dataclass(frozen=True)
class ElementValue:
    """A call computed at each element: ``const float local = expression``; ``needs`` names the
    locals and operands (``x<i>``) it reads."""

    local: str
    expression: str
    needs: frozenset[str]


@dataclass(frozen=True)
class Sweep:
    """A pass over the row folding ``term`` of element value ``value`` (seen as ``v``) into the
    per-row float ``acc`` with ``op`` (``+`` or ``max``, which keeps NaN as eager's amax does)."""

    acc: str
    op: str
    value: str
    term: str
    needs: frozenset[str]

    @property
    def init(self) -> str:
        return "-INFINITY" if self.op == "max" else "0.0f"


@dataclass(frozen=True)
class RowValue:
    """A per-row ``const float local = expression`` over finished sweeps and earlier row values."""

    local: str
    expression: str


RowStep = Sweep | RowValue


def reduction_steps(base: str, value: str, needs: frozenset[str], acc: str, length: int,
                    correction: float = 1.0, order: float = 2.0) -> tuple[list[RowStep], str]:
    """The steps computing reduction ``base`` over a row of ``value`` and the C expression of its
    (unrounded) result; var and std sweep twice (the mean, then squared deviations from it), and
    logsumexp too (the max, then exp(v - max) summed; an infinite max shifts by 0, as eager does)."""
    n = cxx.cfloat(float(length))
    if base in ("sum", "mean", "amax"):
        steps: list[RowStep] = [Sweep(acc, "max" if base == "amax" else "+", value, "v", needs)]
        return steps, f"{acc} / {n}" if base == "mean" else acc
    if base == "linalg_vector_norm":
        if order not in NORM_ORDERS:
            raise UnsupportedCard(f"a vector norm of order {order} is not fused (orders 1, 2, inf are)")
        op, term, result = NORM_ORDERS[order]
        return [Sweep(acc, op, value, term, needs)], result.replace("{a}", acc)
    if base == "logsumexp":
        shift = f"{acc}_shift"
        steps = [Sweep(f"{acc}_max", "max", value, "v", needs),
                 RowValue(shift, f"(fabsf({acc}_max) == INFINITY ? 0.0f : {acc}_max)"),
                 Sweep(acc, "+", value, f"KF_EXP(v - {shift})", needs)]
        return steps, f"KF_LOG({acc}) + {shift}"
    if base not in ("var", "std"):
        raise UnsupportedCard(f"{base} is not a reduction the fuser computes")
    mean = f"{acc}_mean"
    steps = [Sweep(f"{acc}_sum", "+", value, "v", needs), RowValue(mean, f"{acc}_sum / {n}"),
             Sweep(acc, "+", value, f"(v - {mean}) * (v - {mean})", needs)]
    var = f"{acc} / {cxx.cfloat(max(0.0, length - correction))}"
    return steps, var if base == "var" else f"sqrtf({var})"


@dataclass(frozen=True)
class FusedRowPlan:
    """Rows along one dim of the output (``dim``, the last by default; a channels-first norm reduces
    over dim 1): ``steps`` per row, then ``result`` written at each element."""

    summary: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    operands: tuple[RowOperand, ...]
    elements: tuple[ElementValue, ...]  # program order
    steps: tuple[RowStep, ...]
    result: str
    result_needs: frozenset[str]
    uses_math: bool = False
    dim: int = -1

    def __post_init__(self) -> None:
        out = self.outputs[0]
        if not out.shape or not is_dense(out):
            raise UnsupportedCard(f"output {out.shape} stride={out.stride} is not a dense tensor of rows")
        if sum(isinstance(s, Sweep) for s in self.steps) > MAX_SWEEPS:
            raise UnsupportedCard(f"the chain sweeps each row more than {MAX_SWEEPS} times")

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def row_dim(self) -> int:
        """The output dim the rows run along, counted from the front."""
        return self.dim % len(self.outputs[0].shape)

    @property
    def length(self) -> int:
        return int(self.outputs[0].shape[self.row_dim])

    @property
    def rows(self) -> int:
        return self.outputs[0].numel // max(self.length, 1)

    def last_strides(self) -> tuple[int, list[int]]:
        """The output's and each operand's stride along the row (0: constant along it)."""
        out, d = self.outputs[0], self.row_dim
        strides = [o.output_strides(self.inputs, out.shape)[d] for o in self.operands]
        return (out.stride[d] if self.length != 1 else 1), strides

    def outer(self) -> tuple[list[int], list[int], list[list[int]]]:
        """The dims that number the rows (every dim but the row's), coalesced: (shape, output strides,
        operand strides)."""
        out, d = self.outputs[0], self.row_dim

        def without_row(values: list[int]) -> list[int]:
            return [v for i, v in enumerate(values) if i != d]

        strides = [without_row(o.output_strides(self.inputs, out.shape)) for o in self.operands]
        return coalesce(without_row(list(out.shape)), without_row(list(out.stride)), strides)

    def needed(self, needs: Iterable[str]) -> tuple[list[ElementValue], list[int]]:
        """The element values (program order) and operands that computing ``needs`` takes."""
        by_local = {e.local: e for e in self.elements}
        wanted: set[str] = set()
        stack = list(needs)
        while stack:
            name = stack.pop()
            if name in wanted:
                continue
            wanted.add(name)
            if name in by_local:
                stack.extend(by_local[name].needs)
        return [e for e in self.elements if e.local in wanted], operand_indices(wanted)

    def loops(self) -> list[frozenset[str]]:
        """What each pass over the row reads: every sweep's needs, then the write's."""
        return [s.needs | {s.value} for s in self.steps if isinstance(s, Sweep)] + [self.result_needs | {self.result}]

    def strided_rows(self) -> bool:
        """Whether a row's elements lie apart in the output while neighbouring rows lie side by side
        (a channels-first norm over dim 1 of NCHW maps)."""
        out_last, _ = self.last_strides()
        shape, out_outer, _ = self.outer()
        return out_last != 1 and any(stride == 1 and size > 1 for size, stride in zip(shape, out_outer, strict=True))

    def max_vector(self) -> int:
        """Widest vector (elements per 16-byte access) the output and every stride-1 operand allow."""
        out = self.outputs[0]
        out_last, last = self.last_strides()
        _, out_outer, op_outer = self.outer()
        moved = [o for o, s in zip(self.operands, last, strict=True) if s == 1]
        if out_last != 1 or not out.aligned16 or any(not self.inputs[o.tensor].aligned16 for o in moved):
            return 1
        vec = 16 // max(cxx.ELEMENT_BYTES[d] for d in [out.dtype, *(o.dtype for o in moved)])
        while vec > 1 and (self.length % vec or any(s % vec for s in out_outer) or any(
                s % vec for o, strides, lst in zip(self.operands, op_outer, last, strict=True) if lst == 1
                for s in strides)):
            vec //= 2
        return vec

    def reread_operands(self) -> set[int]:
        """The operands more than one pass reads (keeping those in registers saves their re-reads)."""
        counts: dict[int, int] = {}
        for needs in self.loops():
            for i in self.needed(needs)[1]:
                counts[i] = counts.get(i, 0) + 1
        return {i for i, n in counts.items() if n > 1}

    def cached_floats(self, operands: int, nt: int, vec: int) -> int:
        """Registers per thread that keeping ``operands`` of a row walked by ``nt`` threads takes."""
        return operands * -(-self.length // (nt * vec)) * vec

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cpu":
            return KnobSpace({
                "threads": cpu_thread_choices(device, (*self.inputs, *self.outputs)),
                "schedule": ("static", "dynamic"),
                "simd": (True, False),
                "fast_math": (True, False) if self.uses_math else (True,),
            })
        vec = self.max_vector()
        if self.strided_rows():
            # a warp sharing one row would read 32 elements a row's stride apart: neighbouring rows
            # per lane (columns, or a row per thread) read neighbouring elements
            modes: tuple[str, ...] = ("columns", "thread", "warp", "block")
        elif self.length <= 1024:
            modes = ("warp", "block") + (("thread",) if self.length <= 64 else ())
        else:
            modes = ("block", "warp")
        threads = (256, 128, 512, 1024) if modes[0] != "warp" else (256, 128, 512)
        vectors = (vec, 1) if vec > 1 else (1,)
        # offered where some row walk keeps the re-read operands in registers (else it changes nothing)
        cached = len(self.reread_operands())
        walkers = (1, 32, *threads, *(b // 32 for b in threads))
        fits = cached > 0 and any(self.cached_floats(cached, nt, v) <= MAX_CACHED_FLOATS
                              for nt in walkers for v in vectors)
        choices: dict[str, tuple[Any, ...]] = {
            "mode": modes,
            "threads_per_block": threads,
            "vector": vectors,
            "cache_row": (True, False) if fits else (False,),
            "reduce": ("shuffle", "smem_tree"),
            "fast_math": (True, False) if self.uses_math else (True,),
        }
        return KnobSpace(choices, only_in={"reduce": ("block",)})

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        from agent_service.offline import fused_rows_cpu, fused_rows_cuda

        knobs = self.knob_space(backend, device).normalise(knobs)
        if backend == "cuda":
            return fused_rows_cuda.render(self, knobs, device)
        return fused_rows_cpu.render(self, knobs)


def kernel_signature(plan: FusedRowPlan, backend: str) -> tuple[str, str]:
    """The kernel's parameters (operands ``in<i>``, then ``out``) and the matching arguments."""
    restrict = "__restrict__" if backend == "cuda" else "__restrict"
    params, args = [], []
    for i, op in enumerate(plan.operands):
        t = cxx.element_type(op.dtype, backend)
        params.append(f"const {t} *{restrict} in{i}")
        args.append(f"(const {t} *)inputs[{op.tensor}].data")
    out_t = cxx.element_type(plan.outputs[0].dtype, backend)
    return ", ".join([*params, f"{out_t} *{restrict} out"]), ", ".join([*args, f"({out_t} *)outputs[0].data"])
