"""Runs one loaded kernel on a call the guard accepted.

The guard has already fixed every input layout, so each ``kf_tensor`` descriptor is packed
once from the card and only its data pointer changes per call; outputs are allocated with
exactly the card's shapes, strides and dtypes. A kernel that exports ``kf_workspace_bytes``
also gets a fresh ``uint8`` workspace of that size as one trailing output, never returned.

Every launch is CUDA-graph safe on the runtime's side: outputs and workspace come from torch's
caching allocator on the current stream, the kernel is given that stream, and nothing waits
on the device.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from packager.abi import DATA_POINTER, KernelLibrary, allocate_workspace, pack_descriptor, workspace_descriptor
from packager.variant import dtype_from_name

Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]
_NO_TENSOR = pack_descriptor((), (), torch.float32)


def spec_layout(entry: Mapping[str, Any]) -> Layout:
    """A card spec's (shape, stride, dtype)."""
    return tuple(entry["shape"]), tuple(entry["stride"]), dtype_from_name(entry["dtype"])


class CallDescriptors:
    """The packed descriptors of one card's inputs and outputs, and of the kernel's workspace.

    ``n_outputs`` counts the op's outputs; ``n_launch_outputs`` the descriptors kf_launch gets
    (one more when ``workspace_bytes`` > 0).
    """

    def __init__(self, inputs: Sequence[Mapping[str, Any]], outputs: Sequence[Mapping[str, Any]],
                 workspace_bytes: int = 0, aliased: Mapping[int, int] | None = None) -> None:
        """``aliased`` maps an output to the input an in-place op mutates and returns
        (:func:`packager.inplace.aliased_outputs`): that output is the live input tensor itself."""
        if workspace_bytes < 0:
            raise ValueError(f"workspace_bytes must be >= 0, got {workspace_bytes}")
        self._specs = (list(inputs), list(outputs))
        self.aliased = dict(aliased or {})
        input_layouts = [spec_layout(s) for s in inputs]
        self._outputs = [spec_layout(s) for s in outputs]
        self.n_inputs = len(input_layouts)
        self.n_outputs = len(self._outputs)
        self.workspace_bytes = workspace_bytes
        self.n_launch_outputs = self.n_outputs + (1 if workspace_bytes else 0)
        output_descriptors = [pack_descriptor(*layout) for layout in self._outputs]
        if workspace_bytes:
            output_descriptors.append(workspace_descriptor(workspace_bytes))
        self._pack_inputs = _packer([pack_descriptor(*layout) for layout in input_layouts])
        self._pack_outputs = _packer(output_descriptors)
        # An output laid out like a contiguous input is allocated with empty_like, the cheapest allocation.
        self._like_input = [
            next((i for i, lay in enumerate(input_layouts) if lay == out and _is_contiguous(out)), None)
            for out in self._outputs
        ]
        self._is_input = [self.aliased.get(j) for j in range(self.n_outputs)]

    def with_workspace(self, workspace_bytes: int) -> CallDescriptors:
        """These descriptors for a kernel whose workspace is ``workspace_bytes`` (self if unchanged)."""
        if workspace_bytes == self.workspace_bytes:
            return self
        return CallDescriptors(*self._specs, workspace_bytes=workspace_bytes, aliased=self.aliased)

    def allocate_outputs(self, device: torch.device, inputs: Sequence[torch.Tensor] = ()) -> list[torch.Tensor]:
        """The op's outputs (the workspace is not one of them); an output an in-place op returns is
        its input tensor, already holding the values the kernel reads."""
        if self.aliased and inputs:
            return [inputs[same] if same is not None
                    else torch.empty_strided(shape, stride, dtype=dtype, device=device)
                    for same, (shape, stride, dtype) in zip(self._is_input, self._outputs, strict=True)]
        return [
            torch.empty_like(inputs[like]) if like is not None and inputs
            else torch.empty_strided(shape, stride, dtype=dtype, device=device)
            for like, (shape, stride, dtype) in zip(self._like_input, self._outputs, strict=True)
        ]

    def allocate_workspace(self, device: torch.device) -> torch.Tensor | None:
        """A fresh workspace for one call (None when the kernel has none); its contents are garbage."""
        return allocate_workspace(self.workspace_bytes, device) if self.workspace_bytes else None

    def prepare(self, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor],
                workspace: torch.Tensor | None = None) -> tuple[bytes, bytes]:
        """Fresh descriptor arrays (per call: calls may run on many threads) pointing at the tensors.

        ``workspace`` is required exactly when ``workspace_bytes`` > 0, and must hold that many bytes.
        """
        if self.workspace_bytes:
            if workspace is None:
                raise ValueError(f"this kernel needs a workspace of {self.workspace_bytes} bytes")
            return self._pack_inputs(inputs), self._pack_outputs([*outputs, workspace])
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
    """A loaded kernel plus its card's descriptors (given the workspace the kernel asks for)."""

    def __init__(self, library: KernelLibrary, descriptors: CallDescriptors) -> None:
        self.library = library
        self.descriptors = descriptors.with_workspace(library.workspace_bytes)

    def launch(self, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor],
               workspace: torch.Tensor | None = None) -> int:
        """Call kf_launch on matched tensors on the device's current stream; returns its status (0 is success).

        A kernel with a workspace gets ``workspace``, or one allocated here for the call.
        """
        device = outputs[0].device if outputs else inputs[0].device if inputs else torch.device("cpu")
        if workspace is None and self.descriptors.workspace_bytes:
            workspace = self.descriptors.allocate_workspace(device)
        ins, outs = self.descriptors.prepare(inputs, outputs, workspace)
        n_in, n_out = self.descriptors.n_inputs, self.descriptors.n_launch_outputs
        if device.type != "cuda":
            return self.library.launch_packed(ins, n_in, outs, n_out, None)
        current = torch.cuda.current_device()
        index = current if device.index is None else device.index
        # The raw handle of the current stream, as inductor's generated code reads it: no Stream object.
        stream = torch._C._cuda_getCurrentRawStream(index)
        if index != current:
            with torch.cuda.device(index):
                return self.library.launch_packed(ins, n_in, outs, n_out, stream)
        return self.library.launch_packed(ins, n_in, outs, n_out, stream)

    def run(self, inputs: Sequence[torch.Tensor], device: torch.device) -> tuple[int, list[torch.Tensor]]:
        """Allocate outputs (and the workspace) and launch; returns ``(status, outputs)``, workspace left out."""
        outputs = self.descriptors.allocate_outputs(device, inputs)
        return self.launch(inputs, outputs, self.descriptors.allocate_workspace(device)), outputs
