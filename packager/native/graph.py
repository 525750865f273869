"""The slots of ``kforge_cast::native`` (``graph_op.cpp``): kernels in compiled graphs with no Python per call.

A slot is made for one kernel when a graph that uses it is traced, and holds what the C++ op
needs to run it on its own: the address of ``kf_launch``, the card's input and output layouts,
the workspace size, and the names (owner token, card id) under which ``kforge_cast::kernel``
serves every call the slot turns away. Its hits are counted in C++ and read back for
``Cast.stats()``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import torch

from packager.abi import DTYPE_CODES, MAX_DIMS
from packager.launcher import Layout
from packager.native.build import NativeBuildError, load_once
from packager.variant import TensorSignature, dtype_from_name

ABI_VERSION = 1
_LAYOUT_WORDS = 4 + 2 * MAX_DIMS

Words = ctypes.Array[ctypes.c_int64]
_Layout = tuple[Sequence[int], Sequence[int], torch.dtype, int, bool]


def _layout_words(layouts: Sequence[_Layout]) -> Words:
    """Layouts (shape, stride, dtype, storage offset, 16-byte aligned) as kf_native.h reads them."""
    words: list[int] = []
    for shape, stride, dtype, offset, aligned in layouts:
        if len(shape) > MAX_DIMS or dtype not in DTYPE_CODES:
            raise ValueError(f"layout {tuple(shape)} {dtype} is outside the kernel contract")
        pad = [0] * (MAX_DIMS - len(shape))
        words += [len(shape), DTYPE_CODES[dtype], offset, int(aligned), *shape, *pad, *stride, *pad]
    return (ctypes.c_int64 * max(len(words), 1))(*words)


def card_words(inputs: Sequence[TensorSignature], outputs: Sequence[Layout]) -> tuple[Words, Words]:
    """A card's input signatures and output layouts as the native helpers read them; ValueError
    for a layout outside the kernel contract."""
    return (_layout_words([(t.shape, t.stride, dtype_from_name(t.dtype), t.storage_offset, t.aligned16)
                           for t in inputs]),
            _layout_words([(shape, stride, dtype, 0, True) for shape, stride, dtype in outputs]))


class NativeGraphOp:
    """The loaded library: makes slots, switches them off, reads their hit counts."""

    def __init__(self, path: Path) -> None:
        self._lib = ctypes.CDLL(str(path))
        self._lib.kfg_abi_version.restype = ctypes.c_int32
        version = self._lib.kfg_abi_version()
        if version != ABI_VERSION:
            raise NativeBuildError(f"{path.name} speaks version {version}, this runtime {ABI_VERSION}")
        self._lib.kfg_has_cuda.restype = ctypes.c_int32
        self.has_cuda = bool(self._lib.kfg_has_cuda())
        self._add = self._lib.kfg_add_slot
        self._add.restype = ctypes.c_int64
        self._add.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64),
                              ctypes.c_int32, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64,
                              ctypes.c_char_p, ctypes.c_char_p]
        self._set_active = self._lib.kfg_set_active
        self._set_active.argtypes = [ctypes.c_int64, ctypes.c_int32]
        self._hits = self._lib.kfg_hits
        self._hits.restype = ctypes.c_int64
        self._hits.argtypes = [ctypes.c_int64]

    def add_slot(self, launch_address: int, device_type: str, inputs: Sequence[TensorSignature],
                 outputs: Sequence[Layout], workspace_bytes: int, token: str, card_id: str) -> int | None:
        """A new slot's number, or None where this library cannot run the kernel (its device, its layouts)."""
        if device_type not in ("cpu", "cuda") or (device_type == "cuda" and not self.has_cuda):
            return None
        try:
            input_words, output_words = card_words(inputs, outputs)
        except ValueError:
            return None
        slot = int(self._add(launch_address, int(device_type == "cuda"), len(inputs), input_words, len(outputs),
                             output_words, workspace_bytes, token.encode(), card_id.encode()))
        return slot if slot >= 0 else None

    def set_active(self, slot: int, active: bool) -> None:
        self._set_active(slot, int(active))

    def hits(self, slot: int) -> int:
        return int(self._hits(slot))


def native_graph_op() -> NativeGraphOp | None:
    """The library, built on first use; None where it cannot be had (callers keep to the Python op)."""
    return load_once("graph_op", NativeGraphOp, "the kernel call in compiled graphs")
