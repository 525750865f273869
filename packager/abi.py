"""ctypes view of the kernel contract (kf_abi.h): load a compiled kernel and call kf_launch.

Used by the runtime and by the sandbox's harness alike, so both call kernels the same way.
A kernel may export ``kf_workspace_bytes``: its scratch memory, which the caller allocates with
torch and passes as one trailing ``uint8`` output (see :func:`allocate_workspace`).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from pathlib import Path

import torch

from kforge_domain.dtypes import ABI_DTYPE_CODES

MAX_DIMS = 8

#: ``kf_dtype`` codes by torch dtype (the table itself is :data:`kforge_domain.dtypes.ABI_DTYPE_CODES`).
DTYPE_CODES: dict[torch.dtype, int] = {getattr(torch, name): code for name, code in ABI_DTYPE_CODES.items()}


class KfTensor(ctypes.Structure):
    """Mirror of ``kf_tensor``."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("stride", ctypes.c_int64 * MAX_DIMS),
        ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
    ]


# kf_launch seen as taking raw descriptor bytes; the GIL is released during the call.
_PACKED_LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_char_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32, ctypes.c_void_p
)
DATA_POINTER = struct.Struct("=Q")


def pack_descriptor(shape: Sequence[int], stride: Sequence[int], dtype: torch.dtype, data: int = 0) -> bytes:
    """The bytes of one ``kf_tensor`` (its first 8 bytes are the data pointer)."""
    if len(shape) > MAX_DIMS:
        raise AbiError(f"tensor has {len(shape)} dimensions; the contract allows {MAX_DIMS}")
    code = DTYPE_CODES.get(dtype)
    if code is None:
        raise AbiError(f"dtype {dtype} is not in the kernel contract")
    desc = KfTensor()
    desc.data = data
    for i, (size, step) in enumerate(zip(shape, stride, strict=True)):
        desc.shape[i] = size
        desc.stride[i] = step
    desc.ndim = len(shape)
    desc.dtype = code
    return bytes(desc)


def pack_tensors(tensors: Sequence[torch.Tensor]) -> bytes:
    """The ``kf_tensor`` array of ``tensors`` as they lie now, packed once for
    :meth:`KernelLibrary.launch_packed` (one zeroed descriptor for none, as :meth:`KernelLibrary.launch`
    passes): valid while each tensor keeps its storage, shape and strides."""
    return b"".join(bytes(to_kf_tensor(t)) for t in tensors) or bytes(KfTensor())


class AbiError(ValueError):
    """A tensor or library that the kernel contract cannot express."""


def allocate_workspace(nbytes: int, device: torch.device | str) -> torch.Tensor:
    """A kernel's workspace: ``nbytes`` uninitialised bytes from torch's allocator on ``device``.

    On cuda the block belongs to the current stream, so the kernel must run on that stream (or
    the caller keeps the tensor alive until it has finished); under CUDA graph capture it comes
    from the graph's pool. Fresh storage is aligned far beyond the 16 bytes the contract promises.
    """
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def workspace_descriptor(nbytes: int, data: int = 0) -> bytes:
    """The packed ``kf_tensor`` of a workspace: 1-D, ``nbytes`` long, dtype ``KF_U8``."""
    return pack_descriptor((nbytes,), (1,), torch.uint8, data)


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
        address = ctypes.cast(launch, ctypes.c_void_p).value
        if address is None:
            raise AbiError(f"{self.path.name}: kf_launch has no address")
        self._launch_packed = _PACKED_LAUNCH(address)
        self.launch_address: int = address  # for native callers (packager.native.graph)
        self.workspace_bytes = self._read_workspace_bytes()

    def _read_workspace_bytes(self) -> int:
        """What the optional ``kf_workspace_bytes`` export returns; 0 when the kernel has none."""
        try:
            query = self._lib.kf_workspace_bytes
        except AttributeError:
            return 0
        query.restype = ctypes.c_int64
        query.argtypes = []
        nbytes = int(query())
        if nbytes < 0:
            raise AbiError(f"{self.path.name}: kf_workspace_bytes returned {nbytes}")
        return nbytes

    def launch(self, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], stream: int | None,
               workspace: torch.Tensor | None = None) -> int:
        """Call kf_launch on the given tensors; returns the kernel's status code (0 is success).

        ``outputs`` are the op's outputs. A kernel with a workspace gets ``workspace`` as the
        trailing output; without one, a workspace is allocated on the outputs' device for this
        call, which is right only when ``stream`` is that device's current stream.
        """
        if self.workspace_bytes:
            if workspace is None:
                device = outputs[0].device if outputs else inputs[0].device if inputs else torch.device("cpu")
                workspace = allocate_workspace(self.workspace_bytes, device)
            elif workspace.dtype != torch.uint8 or workspace.dim() != 1 or workspace.numel() < self.workspace_bytes:
                raise AbiError(f"{self.path.name}: the workspace must be {self.workspace_bytes} uint8 bytes, "
                               f"got {tuple(workspace.shape)} {workspace.dtype}")
            outputs = [*outputs, workspace]
        ins = (KfTensor * max(len(inputs), 1))(*(to_kf_tensor(t) for t in inputs))
        outs = (KfTensor * max(len(outputs), 1))(*(to_kf_tensor(t) for t in outputs))
        return int(self._launch(ins, len(inputs), outs, len(outputs), stream))

    def launch_packed(self, inputs: bytes, n_inputs: int, outputs: bytes, n_outputs: int, stream: int | None) -> int:
        """Call kf_launch on descriptor arrays packed as raw ``kf_tensor`` bytes (see :func:`pack_descriptor`).

        The runtime keeps each card's descriptors as bytes and only patches the data pointers
        per call, which is several times cheaper than filling ctypes structures. A kernel with a
        workspace expects its descriptor (:func:`workspace_descriptor`) after the outputs'.
        """
        return int(self._launch_packed(inputs, n_inputs, outputs, n_outputs, stream))
