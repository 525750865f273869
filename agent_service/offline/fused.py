"""The fuser: one kernel for a module card whose forward is a chain of elementwise ops.

Eager runs ``x * torch.sigmoid(x)`` or a GELU written out in Python as one pass over memory per
op; a kernel that reads the inputs once and writes the output once saves the rest. The module's
calls come from its captured program (:mod:`capture_service.program_graph`); every call must be
one the elementwise engine has a formula for (:data:`~agent_service.offline.ops_elementwise.UNARY`,
:data:`~agent_service.offline.ops_elementwise.BINARY`, dtype casts and copies), and every input
must broadcast to the output. Each call's result is rounded to its own dtype as eager rounds it
(a bf16 chain stays a bf16 chain, computed in fp32 between roundings), so the kernel departs from
eager no more than one op's rounding. The plan is the elementwise engine's, specialised to the
card's exact shapes, strides and dtypes, and its knobs are the search's to refine.

A chain may also reduce over one dim, every reduction the same (sum, mean, amax, var, std with
``keepdim=True``): a hand-written RMS norm, a softmax written out, a residual add then a norm, a
channels-first layer norm of NCHW maps (over dim 1). Those become one row
kernel (:mod:`agent_service.offline.fused_rows`): the calls feeding each reduction computed per
element as it sweeps the row, those on reduced values once per row, the rest per element as the
output is written. Reductions accumulate in fp32 and round to their call's dtype, as eager does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from agent_service.offline import cxx
from agent_service.offline.call import TensorArg, UnsupportedCard, bind_schema, decode_argument, split_op_name
from agent_service.offline.elementwise import ElementwisePlan, Operand
from agent_service.offline.fused_rows import (
    REDUCTIONS,
    ElementValue,
    FusedRowPlan,
    RowOperand,
    RowStep,
    RowValue,
    Sweep,
    reduction_steps,
    with_types,
)
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.ops_elementwise import BINARY, UNARY
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo

FAMILY = "fused_elementwise"
#: Calls that pass their input's values on (a dtype cast rounds through the node's dtype).
IDENTITY = {"clone", "contiguous", "alias", "detach", "_to_copy", "to", "type_as", "view", "_unsafe_view",
            "reshape", "expand", "expand_as"}
#: Of those, the ones that may move elements: fused only where the shape does not change (an
#: ``expand`` only broadcasts, which reading each value at the output's index already does).
RESHAPES = {"view", "_unsafe_view", "reshape"}
#: Calls that are another's formula with some arguments left out (a bound that is not a number is refused).
ALIASES = {"clamp_min": "clamp", "clamp_max": "clamp"}


@dataclass(frozen=True)
class NodeRef:
    """An earlier call's result in the module's program."""

    name: str


@dataclass(frozen=True)
class InputView:
    """A view of a card input that the program takes before using it (``weight[:, None, None]``):
    where its elements sit in the input's memory, in elements."""

    tensor: int
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int = 0


@dataclass(frozen=True)
class FusedPlan:
    """The elementwise plan of a fused chain, its element types named once the backend is known."""

    plan: ElementwisePlan
    ops: tuple[str, ...]

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def summary(self) -> str:
        return self.plan.summary

    def for_backend(self, backend: str) -> ElementwisePlan:
        return replace(self.plan, expression=with_types(self.plan.expression, backend))

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        return self.for_backend(backend).knob_space(backend, device)

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        return self.for_backend(backend).render(backend, knobs, device)


def fused_plan(card: OperatorCard) -> FusedPlan | FusedRowPlan:
    """The fused kernel of ``card``'s program (a row kernel where it reduces over one dim), or
    :class:`UnsupportedCard` saying which call or layout stands in the way."""
    graph = card.module_graph
    if not graph or not graph.get("nodes"):
        raise UnsupportedCard(f"{card.op}: capture described no program for the fuser")
    if len(card.outputs) != 1 or len(graph.get("outputs", [])) != 1:
        raise UnsupportedCard(f"{card.op}: the fuser writes one output, the module returns {len(card.outputs)}")
    chain = _Chain(card)
    for node in graph["nodes"]:
        chain.add(node)
    if any(isinstance(step, Sweep) for step in chain.steps):
        return chain.row_plan(graph["outputs"][0])
    return FusedPlan(chain.plan(graph["outputs"][0]), tuple(chain.ops))


class _Chain:
    """The program's calls as C statements over the operands, one fp32 local per call."""

    def __init__(self, card: OperatorCard) -> None:
        self.card = card
        self.out = card.outputs[0]
        self.operands: list[Operand] = []
        self.operand_of: dict[tuple[int, tuple[int, ...] | None, int], int] = {}  # (input, strides, offset) -> position
        self.views: dict[str, InputView] = {}  # view nodes of card inputs: read through, never computed
        self.locals: dict[str, str] = {}  # node name -> its C local
        self.shapes: dict[str, list[int]] = {}
        self.dtypes: dict[str, str] = {}
        self.statements: list[str] = []
        self.ops: list[str] = []
        self.uses_math = False
        # Row kernels: the calls computed per element, and per row in order with the sweeps.
        self.elements: list[ElementValue] = []
        self.steps: list[RowStep] = []
        self.row_locals: set[str] = set()
        self.reading: set[str] = set()  # the C names (locals, operands x<i>) the current call reads
        self.row_dim: int | None = None  # the output dim every reduction runs along

    def add(self, node: dict[str, Any]) -> None:
        op = str(node["op"])
        base = split_op_name(op)[0]
        shape, dtype = [int(d) for d in node["shape"]], str(node["dtype"])
        view = self._input_view(node, op)
        if view is not None:
            self.views[str(node["name"])], self.shapes[str(node["name"])] = view, shape
            self.dtypes[str(node["name"])] = dtype
            return
        if dtype not in cxx.FLOAT_DTYPES:
            raise UnsupportedCard(f"{op} returns {dtype}; the fuser computes float dtypes")
        if base not in REDUCTIONS and not _broadcasts(shape, self.out.shape):  # a reduction: see _reduction
            raise UnsupportedCard(f"{op} returns shape {shape}, not broadcast to the output {self.out.shape}")
        call = bind_schema(op, [self._value(a) for a in node.get("args", [])],
                           {k: self._value(v) for k, v in node.get("kwargs", {}).items()})
        local = f"t{len(self.statements)}"
        self.reading = set()
        if base in REDUCTIONS:
            expression, per_row = self._reduction(op, base, call, local), True
        else:
            expression = self._expression(op, base, call, shape)
            per_row = bool(self.reading) and self.reading <= self.row_locals
        self.statements.append(f"const float {local} = {_rounded(expression, dtype)};")
        if per_row:
            self.row_locals.add(local)
            self.steps.append(RowValue(local, _rounded(expression, dtype)))
        else:
            self.elements.append(ElementValue(local, _rounded(expression, dtype), frozenset(self.reading)))
        self.locals[str(node["name"])], self.shapes[str(node["name"])] = local, shape
        self.dtypes[str(node["name"])] = dtype
        self.ops.append(base)

    def _result(self, output: Any) -> NodeRef | TensorArg:
        result = self._value(output)
        if isinstance(result, NodeRef):
            if self.shapes[result.name] != list(self.out.shape) or self.dtypes[result.name] != self.out.dtype:
                raise UnsupportedCard(f"{self.card.op}: the program's result is not the card's output layout")
        elif not isinstance(result, TensorArg):
            raise UnsupportedCard(f"{self.card.op}: the program returns a constant")
        return result

    def row_plan(self, output: Any) -> FusedRowPlan:
        """The chain as a row kernel along the dim its reductions run over (the last where it has none)."""
        self.reading = set()
        result = self._operand(self._result(output))
        if any(o.offset for o in self.operands):
            raise UnsupportedCard(f"{self.card.op}: a row kernel reads no view of an input that starts past its first "
                                  "element")
        dim = len(self.out.shape) - 1 if self.row_dim is None else self.row_dim
        summary = (f"{self.card.op}: {' -> '.join(self.ops)} fused over rows of {self.out.shape[dim]} along dim "
                   f"{dim}, to {self.out.shape} {self.out.dtype}")
        return FusedRowPlan(
            summary=summary, inputs=tuple(self.card.inputs), outputs=tuple(self.card.outputs),
            operands=tuple(RowOperand(o.tensor, o.dtype, o.strides) for o in self.operands),
            elements=tuple(self.elements),
            steps=tuple(self.steps), result=result, result_needs=frozenset(self.reading), uses_math=self.uses_math,
            dim=dim,
        )

    def plan(self, output: Any) -> ElementwisePlan:
        result = self._result(output)
        body = " ".join(self.statements)
        expression = f"([&]() -> float {{ {body} return {self._operand(result)}; }}())"
        summary = f"{self.card.op}: {' -> '.join(self.ops)} fused, to {self.out.shape} {self.out.dtype}"
        return ElementwisePlan(
            family=FAMILY, summary=summary,
            inputs=tuple(self.card.inputs), outputs=tuple(self.card.outputs), operands=tuple(self.operands),
            expression=expression, uses_math=self.uses_math,
        )

    def _value(self, encoded: Any) -> Any:
        if isinstance(encoded, dict) and set(encoded) == {"node"}:
            name = str(encoded["node"])
            if name not in self.locals and name not in self.views:
                raise UnsupportedCard(f"{self.card.op}: a call reads {name}, which no earlier call made")
            return NodeRef(name)
        return decode_argument(encoded, self.card)

    def _input_view(self, node: dict[str, Any], op: str) -> InputView | None:
        """The view a view op (``unsqueeze``, ``view``, ``expand``, ``permute``, ...) takes of a card input
        or of such a view, worked out on a meta tensor; None for any other call."""
        args = [self._value(a) for a in node.get("args", [])]
        source = args[0] if args else None
        if isinstance(source, NodeRef) and source.name in self.views:
            of = self.views[source.name]
        elif isinstance(source, TensorArg):
            of = InputView(source.index, source.spec.dtype, tuple(source.spec.shape), tuple(source.spec.stride))
        else:
            return None
        import torch

        base, overload_name = split_op_name(op)
        overload = getattr(getattr(torch.ops.aten, base, None), overload_name, None)
        if overload is None:
            return None
        returns = overload._schema.returns
        if len(returns) != 1 or returns[0].alias_info is None or returns[0].alias_info.is_write:
            return None
        kwargs = {k: self._value(v) for k, v in node.get("kwargs", {}).items()}
        if any(isinstance(a, (NodeRef, TensorArg, str)) for a in [*args[1:], *kwargs.values()]):
            return None
        span = of.offset + sum((n - 1) * st for n, st in zip(of.shape, of.stride, strict=True)) + 1
        with torch.inference_mode(False):  # views are tracked outside inference mode
            storage = torch.empty(span, device="meta")
            meta = storage.as_strided(of.shape, of.stride, of.offset)
            result = overload(meta, *args[1:], **kwargs)
        # An op annotated as aliasing may still copy (reshape of a transposed input, contiguous):
        # only a result that is a view of the same storage is read through.
        if not isinstance(result, torch.Tensor) or result.dtype != meta.dtype or result._base is not storage:
            return None
        return InputView(of.tensor, of.dtype, tuple(result.shape), tuple(result.stride()), int(result.storage_offset()))

    def _operand(self, value: Any) -> str:
        """The C expression of a tensor argument: an operand load (of an input or a view of one) or an
        earlier call's local."""
        if isinstance(value, NodeRef) and value.name in self.views:
            view = self.views[value.name]
            strides: tuple[int, ...] | None = _view_strides(view, self.out.shape)
            index, dtype, offset = view.tensor, view.dtype, view.offset
        elif isinstance(value, NodeRef):
            self.reading.add(self.locals[value.name])
            return self.locals[value.name]
        elif isinstance(value, TensorArg):
            if not _broadcasts(value.spec.shape, self.out.shape):
                raise UnsupportedCard(f"{self.card.op}: input {value.index} {value.spec.shape} does not broadcast "
                                      f"to the output {self.out.shape}")
            index, dtype, strides, offset = value.index, value.spec.dtype, None, 0
        else:
            raise UnsupportedCard(f"{self.card.op}: expected a tensor, got {value!r}")
        if dtype not in cxx.FLOAT_DTYPES:
            raise UnsupportedCard(f"{self.card.op}: an input of dtype {dtype}")
        key = (index, strides, offset)
        if key not in self.operand_of:
            self.operand_of[key] = len(self.operands)
            self.operands.append(Operand(index, dtype, offset, strides))
        self.reading.add(f"x{self.operand_of[key]}")
        return f"x{self.operand_of[key]}"

    def _scalar_or_operand(self, value: Any) -> str:
        if isinstance(value, (NodeRef, TensorArg)):
            return self._operand(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UnsupportedCard(f"{self.card.op}: operand {value!r} is not a tensor or a number")
        return cxx.cfloat(float(value))

    def _expression(self, op: str, base: str, call: dict[str, Any], shape: list[int]) -> str:
        first = call.get("self", call.get("input"))
        base = ALIASES.get(base, base)
        if base in UNARY:
            make, uses_math = UNARY[base]
            self.uses_math |= uses_math
            return re.sub(r"\bx0\b", self._operand(first), make(call))
        if base in BINARY:
            if base == "div" and call.get("rounding_mode") is not None:
                raise UnsupportedCard(f"{op} with rounding_mode={call['rounding_mode']!r} is not fused")
            alpha = call.get("alpha", 1)
            if alpha is None or isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
                raise UnsupportedCard(f"{op}: alpha {alpha!r} is not a number")
            return BINARY[base](self._scalar_or_operand(first), self._scalar_or_operand(call.get("other")),
                                float(alpha))
        if base in IDENTITY:
            if call.get("device") is not None:
                raise UnsupportedCard(f"{op} moves data to another device")
            source = first if first is not None else call.get("other")
            if base in RESHAPES and _shape_of(source, self.shapes) != shape:
                raise UnsupportedCard(f"{op} changes the shape inside the chain")
            return self._operand(source)
        raise UnsupportedCard(f"{op} is not an elementwise op the fuser knows")

    def _reduction(self, op: str, base: str, call: dict[str, Any], local: str) -> str:
        """Appends the sweeps of a reduction over one dim of the output (every reduction of the chain
        the same); returns its per-row result."""
        source, dims = call.get("self"), call.get("dim")
        dims = [dims] if isinstance(dims, int) else dims
        shape = _shape_of(source, self.shapes)
        if call.get("keepdim") is not True:
            raise UnsupportedCard(f"{op} without keepdim=True: the fuser keeps each reduced value on its row")
        if shape is None or not dims or len(dims) != 1 or not -len(shape) <= dims[0] < len(shape):
            raise UnsupportedCard(f"{op} over dims {dims}: the fuser reduces over one dim")
        dim = dims[0] % len(shape) + len(self.out.shape) - len(shape)  # the output's dim (shapes align right)
        if dim < 0 or shape[dims[0]] != self.out.shape[dim]:
            raise UnsupportedCard(f"{op} reduces dim {dims[0]} of {shape}, which is not the output's {self.out.shape}")
        if self.row_dim not in (None, dim):
            raise UnsupportedCard(f"{op} reduces over dim {dim}, another reduction over dim {self.row_dim}")
        self.row_dim, length = dim, self.out.shape[dim]
        value = self._operand(source)
        given = (1 if call["unbiased"] else 0) if "unbiased" in call else call.get("correction")
        order = call.get("ord", 2)
        for name, number in (("correction", given), ("ord", order)):
            if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float))):
                raise UnsupportedCard(f"{op}: {name} {number!r} is not a number")
        self.uses_math |= base == "logsumexp"
        steps, result = reduction_steps(base, value, frozenset(self.reading), f"{local}_acc", length,
                                        correction=1.0 if given is None else float(given), order=float(order))
        made = {(s.op, s.value, s.term): s.acc for s in self.steps if isinstance(s, Sweep)}
        for step in steps:
            # A sweep the chain already made (var's mean and the module's own) is read, not repeated.
            if isinstance(step, Sweep) and (step.op, step.value, step.term) in made:
                step = RowValue(step.acc, made[(step.op, step.value, step.term)])
            self.steps.append(step)
        return result


def _view_strides(view: InputView, out: list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """The view's strides per output dim, broadcast (0) where the view is 1 or has no dim."""
    if not _broadcasts(view.shape, out):
        raise UnsupportedCard(f"a view {list(view.shape)} of input {view.tensor} does not broadcast to the output "
                              f"{list(out)}")
    lead = len(out) - len(view.shape)
    return tuple(0 if d < lead or view.shape[d - lead] == 1 else view.stride[d - lead] for d in range(len(out)))


def _shape_of(value: Any, shapes: dict[str, list[int]]) -> list[int] | None:
    if isinstance(value, NodeRef):
        return shapes[value.name]
    return list(value.spec.shape) if isinstance(value, TensorArg) else None


def _rounded(expression: str, dtype: str) -> str:
    """``expression`` rounded to ``dtype`` as eager stores the call's result (fp32 needs nothing)."""
    if dtype == "float32":
        return expression
    return f"kf_to_f32(kf_from_f32<@{dtype}@>({expression}))"


def _broadcasts(shape: list[int] | tuple[int, ...], to: list[int] | tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``to`` (right-aligned, each dim equal or 1)."""
    if len(shape) > len(to):
        return False
    return all(d in (1, t) for d, t in zip(reversed(shape), reversed(to), strict=False))
