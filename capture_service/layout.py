"""Copies of tensors that keep the exact layout a variant key describes.

A captured sample must be re-run with the same strides, storage offset and alignment it was
captured with (they are part of the variant), so copies replicate the memory region the view
spans, not just its values.
"""

from __future__ import annotations

import torch

from kforge_domain.card import TensorSpec
from packager.variant import TensorSignature, tensor_signature


def spanned_elements(shape: tuple[int, ...] | torch.Size, stride: tuple[int, ...]) -> int:
    """Elements of storage a view reaches, from its first element to its last."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((size - 1) * abs(st) for size, st in zip(shape, stride, strict=True))


def clone_exact(tensor: torch.Tensor, device: torch.device | str | None = None) -> torch.Tensor:
    """A detached copy with the same shape, stride, storage offset and dtype (overlaps included)."""
    source = tensor.detach()
    target = torch.device(device) if device is not None else source.device
    offset = source.storage_offset()
    span = spanned_elements(source.shape, source.stride())
    flat = torch.empty(offset + span, dtype=source.dtype, device=target)
    if span:
        region = source.as_strided((span,), (1,), offset)
        flat[offset:].copy_(region)
    return flat.as_strided(source.shape, source.stride(), offset)


def to_spec(signature: TensorSignature) -> TensorSpec:
    """The card's view of a key's tensor signature."""
    return TensorSpec(
        shape=list(signature.shape),
        stride=list(signature.stride),
        dtype=signature.dtype,
        storage_offset=signature.storage_offset,
        aligned16=signature.aligned16,
    )


def tensor_spec(tensor: torch.Tensor) -> TensorSpec:
    """The card's view of a tensor's layout."""
    return to_spec(tensor_signature(tensor))


def nbytes(tensor: torch.Tensor) -> int:
    """Bytes of the tensor's values (what a sample stores), not of its storage."""
    return tensor.numel() * tensor.element_size()

