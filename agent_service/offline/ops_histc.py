"""Aten cards the histc engine covers: ``histc.default`` of any layout, on cpu and cuda.

Hugging Face MoE routing counts the tokens each expert takes with it (float ids on cpu, int ids
on cuda, ``bins`` experts, ``min=0``, ``max`` the last expert): see :mod:`agent_service.offline.histc`.
"""

from __future__ import annotations

from typing import Any

from agent_service.offline.call import UnsupportedCard, split_op_name, tensor_argument
from agent_service.offline.histc.eager_range import cpu_range, cuda_range
from agent_service.offline.histc.plan import HistcPlan
from kforge_domain.card import OperatorCard


def histc_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> HistcPlan:
    """histc.default: family ``histc``, following eager's arithmetic on the input's device."""
    if split_op_name(card.op)[1] != "default":
        raise UnsupportedCard(f"{card.op}: only the default overload is templated")
    x = tensor_argument(call)
    bins = call["bins"]
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise UnsupportedCard(f"bins {bins!r} is not a positive int: eager raises")
    backend = "cuda" if x.device.startswith("cuda") else x.device
    if backend not in ("cpu", "cuda"):
        raise UnsupportedCard(f"histc on {x.device} has no template")
    eager_range = (cuda_range if backend == "cuda" else cpu_range)(x.spec.dtype, bins, call["min"], call["max"])
    summary = (f"{card.op} of {x.spec.shape} {x.spec.dtype} into {bins} bins over "
               f"[{eager_range.low}, {eager_range.high}] ({backend})")
    return HistcPlan(summary=summary, backend=backend, inputs=tuple(card.inputs),
                     outputs=tuple(card.outputs), x=x.index, bins=bins, range=eager_range)
