"""Runs one loaded kernel on a call the guard accepted.

The guard has already fixed every input layout, so each ``kf_tensor`` descriptor is packed
once from the card and only its data pointer changes per call; outputs are allocated with
exactly the card's shapes, strides and dtypes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from packager.abi import DATA_POINTER, KernelLibrary, pack_descriptor
from packager.variant import dtype_from_name

Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]
_NO_TENSOR = pack_descriptor((), (), torch.float32)


def _layout(entry: Mapping[str, Any]) -> Layout:
    return tuple(entry["shape"]), tuple(entry["stride"]), dtype_from_name(entry["dtype"])


class CallDescriptors:
    """The packed descriptors of one card's inputs and outputs."""

    def __init__(self, inputs: Sequence[Mapping[str, Any]], outputs: Sequence[Mapping[str, Any]]) -> None:
        input_layouts = [_layout(s) for s in inputs]
        self._outputs = [_layout(s) for s in outputs]
        self.n_inputs = len(input_layouts)
        self.n_outputs = len(self._outputs)
        self._pack_inputs = _packer([pack_descriptor(*layout) for layout in input_layouts])
        self._pack_outputs = _packer([pack_descriptor(*layout) for layout in self._outputs])
        # An output laid out like a contiguous input is allocated with empty_like, the cheapest allocation.
        self._like_input = [
            next((i for i, lay in enumerate(input_layouts) if lay == out and _is_contiguous(out)), None)
            for out in self._outputs
        ]

    def allocate_outputs(self, device: torch.device, inputs: Sequence[torch.Tensor] = ()) -> list[torch.Tensor]:
        return [
            torch.empty_like(inputs[like]) if like is not None and inputs
            else torch.empty_strided(shape, stride, dtype=dtype, device=device)
            for like, (shape, stride, dtype) in zip(self._like_input, self._outputs, strict=True)
        ]

    def prepare(self, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> tuple[bytes, bytes]:
        """Fresh descriptor arrays (per call: calls may run on many threads) pointing at the tensors."""
        return self._pack_inputs(inputs), self._pack_outputs(outputs)


def _is_contiguous(layout: Layout) -> bool:
    shape, stride, _ = layout
    expected = 1
    for size, step in zip(reversed(shape), reversed(stride), strict=True):
        if size != 1 and step != expected:
            return False
        expected *= size
    return True


def _packer(descriptors: Sequence[bytes]) -> Callable[[Sequence[torch.Tensor]], bytes]:
    """A function packing tensors' data pointers into copies of ``descriptors`` (unrolled for 1-2 tensors)."""
    tails = [d[DATA_POINTER.size:] for d in descriptors]
    fmt = struct.Struct("=" + "".join(f"Q{len(t)}s" for t in tails))
    if not tails:
        return lambda tensors: _NO_TENSOR
    if len(tails) == 1:
        (t0,) = tails
        return lambda tensors: fmt.pack(tensors[0].data_ptr(), t0)
    if len(tails) == 2:
        t0, t1 = tails
        return lambda tensors: fmt.pack(tensors[0].data_ptr(), t0, tensors[1].data_ptr(), t1)

    def pack_many(tensors: Sequence[torch.Tensor]) -> bytes:
        values: list[object] = []
        for tensor, tail in zip(tensors, tails, strict=True):
            values += (tensor.data_ptr(), tail)
        return fmt.pack(*values)

    return pack_many


class KernelLauncher:
    """A loaded kernel plus its card's descriptors."""

    def __init__(self, library: KernelLibrary, descriptors: CallDescriptors) -> None:
        self.library = library
        self.descriptors = descriptors

    def launch(self, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> int:
        """Call kf_launch on matched tensors; returns its status (0 is success)."""
        ins, outs = self.descriptors.prepare(inputs, outputs)
        n_in, n_out = self.descriptors.n_inputs, self.descriptors.n_outputs
        device = outputs[0].device if outputs else inputs[0].device if inputs else None
        if device is None or device.type != "cuda":
            return self.library.launch_packed(ins, n_in, outs, n_out, None)
        if device.index is not None and device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                stream = torch.cuda.current_stream(device).cuda_stream
                return self.library.launch_packed(ins, n_in, outs, n_out, stream)
        stream = torch.cuda.current_stream(device).cuda_stream
        return self.library.launch_packed(ins, n_in, outs, n_out, stream)

    def run(self, inputs: Sequence[torch.Tensor], device: torch.device) -> tuple[int, list[torch.Tensor]]:
        """Allocate outputs and launch; returns ``(status, outputs)``."""
        outputs = self.descriptors.allocate_outputs(device, inputs)
        return self.launch(inputs, outputs), outputs
