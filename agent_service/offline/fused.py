"""The fuser: one elementwise kernel for a module card whose forward is a chain of elementwise ops.

Eager runs ``x * torch.sigmoid(x)`` or a GELU written out in Python as one pass over memory per
op; a kernel that reads the inputs once and writes the output once saves the rest. The module's
calls come from its captured program (:mod:`capture_service.program_graph`); every call must be
one the elementwise engine has a formula for (:data:`~agent_service.offline.ops_elementwise.UNARY`,
:data:`~agent_service.offline.ops_elementwise.BINARY`, dtype casts and copies), and every input
must broadcast to the output. Each call's result is rounded to its own dtype as eager rounds it
(a bf16 chain stays a bf16 chain, computed in fp32 between roundings), so the kernel departs from
eager no more than one op's rounding. The plan is the elementwise engine's, specialised to the
card's exact shapes, strides and dtypes, and its knobs are the search's to refine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from agent_service.models import DeviceDescription
from agent_service.offline import cxx
from agent_service.offline.call import TensorArg, UnsupportedCard, bind_schema, decode_argument, split_op_name
from agent_service.offline.elementwise import ElementwisePlan, Operand
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.ops_elementwise import BINARY, UNARY
from kforge_domain.card import OperatorCard

FAMILY = "fused_elementwise"
#: Calls that pass their input's values on (a dtype cast rounds through the node's dtype).
IDENTITY = {"clone", "contiguous", "alias", "detach", "_to_copy", "to", "type_as", "view", "_unsafe_view",
            "reshape", "expand"}
#: Of those, the ones that may move elements: fused only where the shape does not change (an
#: ``expand`` only broadcasts, which reading each value at the output's index already does).
RESHAPES = {"view", "_unsafe_view", "reshape"}
_TYPE_SLOT = re.compile(r"@(\w+)@")


@dataclass(frozen=True)
class NodeRef:
    """An earlier call's result in the module's program."""

    name: str


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
        expression = _TYPE_SLOT.sub(lambda m: cxx.element_type(m.group(1), backend), self.plan.expression)
        return replace(self.plan, expression=expression)

    def knob_space(self, backend: str, device: DeviceDescription) -> KnobSpace:
        return self.for_backend(backend).knob_space(backend, device)

    def render(self, backend: str, knobs: Knobs, device: DeviceDescription) -> str:
        return self.for_backend(backend).render(backend, knobs, device)


def fused_plan(card: OperatorCard) -> FusedPlan:
    """The fused kernel of ``card``'s program, or :class:`UnsupportedCard` saying which call or
    layout stands in the way."""
    graph = card.module_graph
    if not graph or not graph.get("nodes"):
        raise UnsupportedCard(f"{card.op}: capture described no program for the fuser")
    if len(card.outputs) != 1 or len(graph.get("outputs", [])) != 1:
        raise UnsupportedCard(f"{card.op}: the fuser writes one output, the module returns {len(card.outputs)}")
    chain = _Chain(card)
    for node in graph["nodes"]:
        chain.add(node)
    return FusedPlan(chain.plan(graph["outputs"][0]), tuple(chain.ops))


class _Chain:
    """The program's calls as C statements over the operands, one fp32 local per call."""

    def __init__(self, card: OperatorCard) -> None:
        self.card = card
        self.out = card.outputs[0]
        self.operands: list[Operand] = []
        self.operand_of: dict[int, int] = {}  # card input -> operand position
        self.locals: dict[str, str] = {}  # node name -> its C local
        self.shapes: dict[str, list[int]] = {}
        self.dtypes: dict[str, str] = {}
        self.statements: list[str] = []
        self.ops: list[str] = []
        self.uses_math = False

    def add(self, node: dict[str, Any]) -> None:
        op = str(node["op"])
        base = split_op_name(op)[0]
        shape, dtype = [int(d) for d in node["shape"]], str(node["dtype"])
        if dtype not in cxx.FLOAT_DTYPES:
            raise UnsupportedCard(f"{op} returns {dtype}; the fuser computes float dtypes")
        if not _broadcasts(shape, self.out.shape):
            raise UnsupportedCard(f"{op} returns shape {shape}, not broadcast to the output {self.out.shape}")
        call = bind_schema(op, [self._value(a) for a in node.get("args", [])],
                           {k: self._value(v) for k, v in node.get("kwargs", {}).items()})
        expression = self._expression(op, base, call, shape)
        local = f"t{len(self.statements)}"
        self.statements.append(f"const float {local} = {_rounded(expression, dtype)};")
        self.locals[str(node["name"])], self.shapes[str(node["name"])] = local, shape
        self.dtypes[str(node["name"])] = dtype
        self.ops.append(base)

    def plan(self, output: Any) -> ElementwisePlan:
        result = self._value(output)
        if isinstance(result, NodeRef):
            if self.shapes[result.name] != list(self.out.shape) or self.dtypes[result.name] != self.out.dtype:
                raise UnsupportedCard(f"{self.card.op}: the program's result is not the card's output layout")
        elif not isinstance(result, TensorArg):
            raise UnsupportedCard(f"{self.card.op}: the program returns a constant")
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
            if name not in self.locals:
                raise UnsupportedCard(f"{self.card.op}: a call reads {name}, which no earlier call made")
            return NodeRef(name)
        return decode_argument(encoded, self.card)

    def _operand(self, value: Any) -> str:
        """The C expression of a tensor argument: an operand load or an earlier call's local."""
        if isinstance(value, NodeRef):
            return self.locals[value.name]
        if not isinstance(value, TensorArg):
            raise UnsupportedCard(f"{self.card.op}: expected a tensor, got {value!r}")
        if value.spec.dtype not in cxx.FLOAT_DTYPES:
            raise UnsupportedCard(f"{self.card.op}: an input of dtype {value.spec.dtype}")
        if not _broadcasts(value.spec.shape, self.out.shape):
            raise UnsupportedCard(f"{self.card.op}: input {value.index} {value.spec.shape} does not broadcast "
                                  f"to the output {self.out.shape}")
        if value.index not in self.operand_of:
            self.operand_of[value.index] = len(self.operands)
            self.operands.append(Operand(value.index, value.spec.dtype))
        return f"x{self.operand_of[value.index]}"

    def _scalar_or_operand(self, value: Any) -> str:
        if isinstance(value, (NodeRef, TensorArg)):
            return self._operand(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UnsupportedCard(f"{self.card.op}: operand {value!r} is not a tensor or a number")
        return cxx.cfloat(float(value))

    def _expression(self, op: str, base: str, call: dict[str, Any], shape: list[int]) -> str:
        first = call.get("self", call.get("input"))
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
