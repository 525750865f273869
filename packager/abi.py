"""ctypes view of the kernel contract (kf_abi.h): load a compiled kernel and call kf_launch.

Used by the runtime and by the sandbox's harness alike, so both call kernels the same way.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import torch

MAX_DIMS = 8

DTYPE_CODES: dict[torch.dtype, int] = {
    torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3, torch.int32: 4,
    torch.int64: 5, torch.bool: 6, torch.uint8: 7, torch.int8: 8,
}


class KfTensor(ctypes.Structure):
    """Mirror of ``kf_tensor``."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("stride", ctypes.c_int64 * MAX_DIMS),
        ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
    ]


class AbiError(ValueError):
    """A tensor or library that the kernel contract cannot express."""


def to_kf_tensor(tensor: torch.Tensor) -> KfTensor:
    """Describe a tensor for kf_launch (no copy: the kernel sees the tensor's own memory)."""
    if tensor.dim() > MAX_DIMS:
        raise AbiError(f"tensor has {tensor.dim()} dimensions; the contract allows {MAX_DIMS}")
    code = DTYPE_CODES.get(tensor.dtype)
    if code is None:
        raise AbiError(f"dtype {tensor.dtype} is not in the kernel contract")
    desc = KfTensor()
    desc.data = tensor.data_ptr()
    for i, (size, stride) in enumerate(zip(tensor.shape, tensor.stride(), strict=True)):
        desc.shape[i] = size
        desc.stride[i] = stride
    desc.ndim = tensor.dim()
    desc.dtype = code
    return desc


class KernelLibrary:
    """A compiled candidate (a shared object exporting ``kf_launch``)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self._lib = ctypes.CDLL(str(self.path), mode=ctypes.RTLD_LOCAL)
            launch = self._lib.kf_launch
        except (OSError, AttributeError) as exc:
            raise AbiError(f"{self.path.name}: cannot load kf_launch: {exc}") from exc
        launch.restype = ctypes.c_int
        launch.argtypes = [
            ctypes.POINTER(KfTensor), ctypes.c_int32, ctypes.POINTER(KfTensor), ctypes.c_int32,
            ctypes.c_void_p,
        ]
        self._launch = launch

    def launch(self, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], stream: int | None) -> int:
        """Call kf_launch on the given tensors; returns the kernel's status code (0 is success)."""
        ins = (KfTensor * max(len(inputs), 1))(*(to_kf_tensor(t) for t in inputs))
        outs = (KfTensor * max(len(outputs), 1))(*(to_kf_tensor(t) for t in outputs))
        return int(self._launch(ins, len(inputs), outs, len(outputs), stream))
