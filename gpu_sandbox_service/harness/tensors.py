"""Tensors of the harness: allocation to a card's exact layout, samples, fresh draws, poison."""

from __future__ import annotations

import torch

from kforge_domain.card import TensorSpec
from packager.variant import dtype_from_name

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def allocate(spec: TensorSpec, device: str) -> torch.Tensor:
    """An uninitialised tensor with exactly the spec's shape, stride, dtype and storage offset."""
    dtype = dtype_from_name(spec.dtype)
    extent = 1 + sum((size - 1) * stride for size, stride in zip(spec.shape, spec.stride, strict=True)) if all(
        spec.shape) else 0
    base = torch.empty(spec.storage_offset + max(extent, 1), dtype=dtype, device=device)
    return base.as_strided(spec.shape, spec.stride, spec.storage_offset)


def writable_view(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor with broadcast (stride-0) dimensions narrowed to one element, so it can be written."""
    view = tensor
    for dim, stride in enumerate(tensor.stride()):
        if stride == 0 and tensor.shape[dim] > 1:
            view = view.narrow(dim, 0, 1)
    return view


def assign(target: torch.Tensor, values: torch.Tensor) -> None:
    """Write ``values`` into ``target`` in place (``target`` may be broadcast)."""
    view = writable_view(target)
    source = values.to(device=target.device, dtype=target.dtype)
    index = tuple(slice(0, n) for n in view.shape)
    view.copy_(source.expand(target.shape)[index] if source.shape != view.shape else source)


#: Elements of a sample its statistics are read from: a strided subset of a large sample describes
#: its distribution as well as the whole and costs a fraction of a pass over 256 MB.
STATISTICS_ELEMENTS = 1 << 20


def statistics_subset(sample: torch.Tensor) -> torch.Tensor:
    """At most :data:`STATISTICS_ELEMENTS` of ``sample``'s elements, evenly spaced."""
    flat = sample.reshape(-1)
    step = -(-flat.numel() // STATISTICS_ELEMENTS)
    return flat[::step] if step > 1 else flat


def draw_like(spec: TensorSpec, sample: torch.Tensor | None, generator: torch.Generator) -> torch.Tensor:
    """Fresh values distributed like ``sample`` (same dtype, similar mean and spread), never all zeros,
    drawn on the generator's device (the device the kernel will read them on).

    Integer tensors stay within the sample's range, so indices remain valid; without a sample,
    floats are standard normal and integers small and non-negative.
    """
    dtype = dtype_from_name(spec.dtype)
    shape = spec.shape
    device = generator.device
    subset = statistics_subset(sample) if sample is not None and sample.numel() else None
    if dtype == torch.bool:
        p = float(subset.float().mean()) if subset is not None else 0.5
        return torch.rand(shape, generator=generator, device=device) < min(max(p, 0.1), 0.9)
    if dtype in FLOAT_DTYPES:
        mean, std = 0.0, 1.0
        if subset is not None:
            values = subset.double()
            finite = values[torch.isfinite(values)]
            if finite.numel():
                mean = float(finite.mean())
                std = float(finite.std()) if finite.numel() > 1 else 0.0
        std = max(std, abs(mean) * 0.1, 1e-2)
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        drawn = torch.randn(shape, generator=generator, dtype=wide, device=device).mul_(std).add_(mean)
        return drawn.to(dtype)
    low, high = 0, 16
    if sample is not None and sample.numel():
        low, high = int(sample.min()), int(sample.max()) + 1
    info = torch.iinfo(dtype)
    low, high = max(low, info.min), min(high, info.max)
    if high - low <= 1 and sample is None:
        high = low + 2
    drawn = torch.randint(low, max(high, low + 1), shape, generator=generator, dtype=torch.int64, device=device)
    return drawn.to(dtype)


def poison(tensor: torch.Tensor, variant: int) -> None:
    """Fill an output so that unwritten elements are detectable: NaN, then a different sentinel."""
    view = writable_view(tensor)
    if tensor.dtype in FLOAT_DTYPES:
        view.fill_(float("nan") if variant == 0 else torch.finfo(tensor.dtype).max)
    elif tensor.dtype == torch.bool:
        view.fill_(variant == 0)
    else:
        info = torch.iinfo(tensor.dtype)
        view.fill_(info.min + 3 if variant == 0 else info.max - 5)


#: Byte patterns a workspace is filled with before each call: 0xFF makes every float word NaN and
#: every integer -1 / its maximum; 0x7F makes float32 and bfloat16 words about 3.4e38.
WORKSPACE_POISON = (0xFF, 0x7F)


def poison_workspace(workspace: torch.Tensor, variant: int) -> None:
    """Fill a kernel's workspace with garbage, so a kernel that reads scratch it never wrote (a
    zero it assumed, a value kept from the previous call) gets a wrong or unstable result."""
    workspace.fill_(WORKSPACE_POISON[variant % len(WORKSPACE_POISON)])


def storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A uint8 view of the tensor's whole storage (padding included), for bit-exact comparisons."""
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())


def storage_range(tensor: torch.Tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def nbytes_of(tensor: torch.Tensor) -> int:
    """Bytes a kernel must touch for this tensor (its elements, broadcast ones once)."""
    return writable_view(tensor).numel() * tensor.element_size()
