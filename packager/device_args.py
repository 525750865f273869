"""Device arguments of a kernel's call (``x.to(copy=True)`` names ``x``'s own device).

A variant key records a device's type, not its index (``cuda``, not ``cuda:1``), and a kernel
writes its outputs on its tensors' device. A call naming another device of the same type
(``x.to("cuda:1", copy=True)`` with ``x`` on cuda:0, a pipeline's hand-over between GPUs) matches
the key yet asks for a copy to that device: the runtime hands it to eager.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

#: Fallback reason: a device argument names another device than the call's tensors are on.
OTHER_DEVICE = "other_device"


def names_a_device(template: Mapping[str, object]) -> bool:
    """Whether a key's template (``{"args": [...], "kwargs": {...}}``) passes a device."""
    args = template.get("args", [])
    kwargs = template.get("kwargs", {})
    values = [*(args if isinstance(args, list) else []), *(kwargs.values() if isinstance(kwargs, dict) else [])]
    return any(isinstance(v, dict) and "device" in v for v in values)


def _resolved(device: torch.device) -> torch.device:
    """``cuda`` without an index is the current cuda device, as eager takes it."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def names_another_device(args: Sequence[object], kwargs: Mapping[str, object], device: torch.device) -> bool:
    """Whether a device argument of the call is not ``device``, where the call's tensors are."""
    named = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.device)]
    return any(_resolved(v) != _resolved(device) for v in named)
