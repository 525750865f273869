"""Stand-ins for measuring the runtime's per-call cost: tensors of a card's exact layouts, and
the outputs a measurement allocates for a card of another device."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from packager.variant import TensorSignature, VariantKey, dtype_from_name


def synthetic_tensor(signature: TensorSignature, device: str = "cpu") -> torch.Tensor:
    """A tensor on ``device`` with the signature's shape, strides, dtype and storage offset (alignment as it falls)."""
    dtype = dtype_from_name(signature.dtype)
    extent = 0 if 0 in signature.shape else 1 + sum(
        (size - 1) * abs(step) for size, step in zip(signature.shape, signature.stride, strict=True)
    )
    storage = torch.empty(signature.storage_offset + extent, dtype=dtype, device=device)
    return storage.as_strided(signature.shape, signature.stride, signature.storage_offset)


def synthetic_call(key: VariantKey) -> tuple[VariantKey, list[torch.Tensor]]:
    """CPU tensors for the key's signature, and the key adjusted to their device and alignment."""
    tensors = [synthetic_tensor(t) for t in key.tensors]
    signatures = tuple(
        t._replace(device="cpu", aligned16=x.data_ptr() % 16 == 0) for t, x in zip(key.tensors, tensors, strict=True)
    )
    return key._replace(tensors=signatures), tensors


def allocated_outputs(card: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The outputs the measurement allocates: the card's own, or one-element stand-ins for another device."""
    if card.get("device", "cpu") == "cpu":
        return [dict(out) for out in card["outputs"]]
    return [{**out, "shape": [1] * len(out["shape"]), "stride": [1] * len(out["shape"])} for out in card["outputs"]]


def allocated_workspace_bytes(card: Mapping[str, Any], workspace_bytes: int) -> int:
    """The workspace the measurement allocates: the kernel's own, or a one-byte stand-in for another device."""
    if workspace_bytes <= 0 or card.get("device", "cpu") == "cpu":
        return max(workspace_bytes, 0)
    return 1
