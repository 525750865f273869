"""A model's own rounding noise, measured without a compiler: its weights one unit in the last place away.

A kernel that sums in another order or fuses in fp32 departs from eager by rounding, about one
unit in the last place (ulp) of each value it writes; a deep low-precision model amplifies that.
How far the model's output moves when every floating parameter and input moves by one ulp is a
yardstick of that amplification that needs no torch.compile. Flipping the lowest bit of a finite
value's encoding moves it by exactly one ulp (up or down by the bit's parity) and keeps it finite,
and flipping it again restores the value bit for bit, so the weights are perturbed in place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch

#: The integer type of each floating type's encoding.
_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}


def flip_last_bit(tensor: torch.Tensor) -> None:
    """Moves each finite value of ``tensor`` one ulp, in place; calling it again restores the tensor exactly."""
    bits_dtype = _BITS.get(tensor.dtype)
    if bits_dtype is None or tensor.is_sparse or tensor.device.type == "meta" or tensor.numel() == 0:
        return
    with torch.no_grad():
        finite = torch.isfinite(tensor)
        tensor.detach().view(bits_dtype).bitwise_xor_(finite.to(bits_dtype))


@contextlib.contextmanager
def one_ulp_apart(tensors: Iterable[torch.Tensor]) -> Iterator[None]:
    """While the block runs, every finite value of ``tensors`` sits one ulp from where it was (tensors
    of other types stay as they are)."""
    moved = list({id(t): t for t in tensors}.values())  # a tied weight moves once
    for tensor in moved:
        flip_last_bit(tensor)
    try:
        yield
    finally:
        for tensor in moved:
            flip_last_bit(tensor)

