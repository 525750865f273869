"""Cold caches on the CPU without writing the whole last-level cache before every timed call.

The timer's cold start (:mod:`kforge_torch.timing`) writes a buffer twice the last-level cache:
on a CPU with a 105 MiB L3 that is 19 ms a call, most of a candidate's evaluation. What the
flush is for is that a call finds none of its operands cached; evicting exactly those lines
(``clflushopt`` or ``clflush`` on x86, ``dc civac`` on arm64, :file:`evict.c`) gives that for what the operands
weigh. The helper is a small C library built once per machine with the system's C compiler and
loaded with ctypes; where it cannot be built, timing keeps the full flush.

Eviction is also the cleaner cold start: the flush leaves the cache full of dirty lines that the
timed call must write back before it can use them, which on the development CPU made the same
eager call 1.1-3.2x slower than after eviction (``bench/results/cold_start_2026-12-03_cpu.json``).
The sandbox and capture both evict on the cpu, for every measurement, so a card's figures share one
method. What eviction does not clear is memory a call keeps to itself (eager's temporaries, a
kernel's static buffer); the harness's fresh inputs, rotated buffers and output checks stand
against a kernel that would live on what it kept.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
from collections.abc import Iterable
from pathlib import Path

import torch

from kforge_domain.built_once import BuildFailed, build_once
from kforge_domain.paths import user_cache_dir

SOURCE = Path(__file__).with_name("evict.c")
CACHE_ENV = "KFORGE_EVICT_CACHE"
BUILD_TIMEOUT_S = 60


class EvictionUnavailable(RuntimeError):
    """The eviction helper cannot be built or loaded here; timing flushes the whole cache."""


def cache_dir() -> Path:
    """``$KFORGE_EVICT_CACHE``, else ``$XDG_CACHE_HOME/kforge/evict`` (``~/.cache/kforge/evict``)."""
    return user_cache_dir(CACHE_ENV, "evict")


def build_library(folder: Path | None = None) -> Path:
    """The helper built for this machine under ``folder`` (default :func:`cache_dir`), reused when
    present; raises :class:`EvictionUnavailable` without a C compiler or when the build fails."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        raise EvictionUnavailable(f"no C compiler: {os.environ.get('CC', 'cc')!r} is not on PATH")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + platform.machine().encode() + compiler.encode()).hexdigest()[:16]
    library = (folder or cache_dir()) / f"kf_evict-{key}.so"
    try:
        return build_once(library, lambda output: [compiler, "-O2", "-shared", "-fPIC", "-o", str(output),
                                                   str(SOURCE)], BUILD_TIMEOUT_S)
    except (BuildFailed, OSError) as exc:
        raise EvictionUnavailable(f"building {SOURCE.name} failed: {str(exc)[-300:]}") from exc


class Evictor:
    """Evicts tensors' storages from the CPU's caches (the whole storage: views share its lines)."""

    def __init__(self, library: Path) -> None:
        try:
            self._evict = ctypes.CDLL(str(library)).kf_evict
        except (OSError, AttributeError) as exc:
            raise EvictionUnavailable(f"cannot load {library}: {exc}") from exc
        self._evict.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._evict.restype = None
        self.library = library

    def evict(self, tensors: Iterable[torch.Tensor]) -> None:
        for address, size in storages(tensors).items():
            self._evict(address, size)


def storages(tensors: Iterable[torch.Tensor]) -> dict[int, int]:
    """The cpu storages under ``tensors``, each once: address to bytes."""
    found: dict[int, int] = {}
    for tensor in tensors:
        if tensor.device.type == "cpu" and tensor.layout == torch.strided:
            storage = tensor.untyped_storage()
            if storage.data_ptr() and storage.nbytes():
                found[storage.data_ptr()] = storage.nbytes()
    return found


def held_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """Every tensor ``module`` holds, which its call reads besides its arguments: parameters,
    buffers, and plain tensor attributes (an exported program's lifted constants)."""
    held = [*module.parameters(), *module.buffers()]
    for sub in module.modules():
        held += [value for value in vars(sub).values() if isinstance(value, torch.Tensor)]
    return held


def machine_evictor() -> Evictor | None:
    """This machine's evictor, built on first use; None where it cannot be (timing then flushes)."""
    try:
        return Evictor(build_library())
    except EvictionUnavailable:
        return None
