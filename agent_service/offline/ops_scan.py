"""Aten cards the scan engine covers: cumsum and cumprod along one dim, with or without ``dtype=``.

The output dtype is eager's: ``dtype`` when given, else int64 for a bool or integer input, else the
input's; each element is converted to it before it is accumulated (see
:mod:`agent_service.offline.scan.elements`).
"""

from __future__ import annotations

from typing import Any

from agent_service.offline.call import UnsupportedCard, split_op_name, tensor_argument
from agent_service.offline.scan.plan import ScanPlan
from kforge_domain.card import OperatorCard

#: aten op base name -> scan kind
SCANS = {"cumsum": "sum", "cumprod": "prod"}


def eager_dtype(source: str, dtype: Any) -> str:
    """The dtype eager's cumsum/cumprod of a ``source`` tensor returns, ``dtype`` the bound argument."""
    if isinstance(dtype, str) and dtype.startswith("dtype:"):
        return dtype.removeprefix("dtype:")
    if dtype is not None:
        raise UnsupportedCard(f"dtype argument {dtype!r} is not a dtype")
    return "int64" if source == "bool" or source.startswith(("int", "uint")) else source


def scan_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ScanPlan:
    """cumsum.default and cumprod.default over any dim: family ``scan``."""
    if split_op_name(card.op)[1] != "default":
        raise UnsupportedCard(f"{card.op}: only the default overload (an int dim) is templated")
    x = tensor_argument(call)
    shape, out = x.spec.shape, card.outputs[0]
    rank = max(len(shape), 1)
    dim = int(call["dim"])
    if not -rank <= dim < rank:
        raise UnsupportedCard(f"dim {dim} is out of range for {len(shape)} dims")
    want = eager_dtype(x.spec.dtype, call.get("dtype"))
    if out.dtype != want:
        raise UnsupportedCard(f"the card's output is {out.dtype}, eager's {base} gives {want}")
    return ScanPlan(summary=f"{card.op} over dim {dim} of {shape} {x.spec.dtype} to {out.dtype}",
                    kind=SCANS[base], inputs=tuple(card.inputs), outputs=tuple(card.outputs), x=x.index,
                    dim=dim % rank)
