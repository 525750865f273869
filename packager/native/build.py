"""Build and cache a native helper of the runtime (see :mod:`packager.native`).

The library links against this process's torch (``libc10``, ``libtorch_cpu``, and ``libc10_cuda``
where torch has CUDA and the CUDA headers are found; a Python extension also ``libtorch_python``
and this Python's headers), so its cache key holds the source, torch's version and CUDA version,
the compiler, and for an extension the Python version. A build goes to a temporary file and is
renamed into place, so processes building at once never load a half-written library.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from kforge_domain.built_once import BuildFailed, build_once
from kforge_domain.paths import user_cache_dir

SOURCE_DIR = Path(__file__).resolve().parent
CACHE_ENV = "KFORGE_NATIVE_CACHE"
ENABLE_ENV = "KFORGE_NATIVE"
BUILD_TIMEOUT_S = 300
Loaded = TypeVar("Loaded")


class NativeBuildError(RuntimeError):
    """A native helper could not be built here (no compiler, no headers, or the compile failed)."""


def cache_dir() -> Path:
    """``$KFORGE_NATIVE_CACHE``, else ``$XDG_CACHE_HOME/kforge/native`` (``~/.cache/kforge/native``)."""
    return user_cache_dir(CACHE_ENV, "native")


def compiler() -> str:
    """The C++ compiler torch's extensions would use (``$CXX``, else ``c++``)."""
    found = shutil.which(os.environ.get("CXX", "c++"))
    if found is None:
        raise NativeBuildError(f"no C++ compiler: {os.environ.get('CXX', 'c++')!r} is not on PATH")
    return found


def _cuda_include() -> Path | None:
    """The CUDA headers c10's stream header needs, where this torch has CUDA: under ``$CUDA_HOME``
    (or ``$CUDA_PATH``), else beside the ``nvcc`` on PATH, else ``/usr/local/cuda``."""
    if torch.version.cuda is None:
        return None
    nvcc = shutil.which("nvcc")
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
             str(Path(nvcc).resolve().parent.parent) if nvcc else None, "/usr/local/cuda"]
    for home in filter(None, homes):
        include = Path(home) / "include"
        if (include / "cuda_runtime_api.h").exists():
            return include
    return None


def _python_include() -> Path:
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        raise NativeBuildError(f"no Python headers: {include / 'Python.h'} is missing")
    return include


def _command(cxx: str, source: Path, output: Path, cuda_include: Path | None,
             python_include: Path | None) -> list[str]:
    torch_dir = Path(torch.__file__).resolve().parent
    lib_dir = torch_dir / "lib"
    command = [
        cxx, "-O2", "-std=c++20", "-shared", "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        "-I", str(source.parent), "-isystem", str(torch_dir / "include"),
        "-isystem", str(torch_dir / "include" / "torch" / "csrc" / "api" / "include"),
        str(source), "-o", str(output),
        f"-L{lib_dir}", f"-Wl,-rpath,{lib_dir}", "-lc10", "-ltorch_cpu",
    ]
    if cuda_include is not None:
        command[1:1] = ["-DKF_WITH_CUDA", "-isystem", str(cuda_include)]
        command.append("-lc10_cuda")
    if python_include is not None:
        command[1:1] = ["-isystem", str(python_include)]
        command.append("-ltorch_python")
    return command


def _compiler_version(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise NativeBuildError(f"{cxx} --version failed: {exc}") from exc


def build(name: str, *, python_extension: bool = False) -> Path:
    """The shared library built from ``packager/native/<name>.cpp``, from the cache when it is there;
    with ``python_extension``, a module this Python imports (``PyInit_<name>``).

    Raises :class:`NativeBuildError` naming what is missing or the compiler's error.
    """
    source = SOURCE_DIR / f"{name}.cpp"
    cxx = compiler()
    cuda_include = _cuda_include()
    python_include = _python_include() if python_extension else None
    key = hashlib.sha256()
    headers = [h.read_bytes() for h in sorted(source.parent.glob("*.h"))]
    for part in (source.read_bytes(), *headers, torch.__version__.encode(), str(torch.version.cuda).encode(),
                 str(cuda_include).encode(), _compiler_version(cxx).encode(), sys.platform.encode(),
                 str(python_include).encode(), sys.version.encode() if python_extension else b""):
        key.update(part)
        key.update(b"\0")
    target = cache_dir() / key.hexdigest()[:24] / f"{name}.so"
    try:
        return build_once(target, lambda output: _command(cxx, source, output, cuda_include, python_include),
                          BUILD_TIMEOUT_S)
    except BuildFailed as exc:
        raise NativeBuildError(f"building {source.name} failed:\n{str(exc)[-4000:]}") from exc


_LOAD_LOCK = threading.Lock()
# Each library this process loaded, by name (a second copy would register its kernels again, over
# the first, with tables of its own), or why it could not be had.
_loaded: dict[str, object] = {}
_failures: dict[str, str] = {}


def load_once(name: str, wrap: Callable[[Path], Loaded], what: str, *,
              python_extension: bool = False) -> Loaded | None:
    """``wrap(build(name))``, once per process; None (with one warning saying that ``what`` stays in
    Python, and why) where it cannot be had, or while ``KFORGE_NATIVE=0``."""
    if os.environ.get(ENABLE_ENV, "1") == "0":
        return None
    with _LOAD_LOCK:
        if name not in _loaded and name not in _failures:
            try:
                _loaded[name] = wrap(build(name, python_extension=python_extension))
            except (NativeBuildError, OSError, ImportError) as exc:
                _failures[name] = str(exc)
                warnings.warn(f"kforge_cast: {what} stays in Python ({exc})", RuntimeWarning, stacklevel=3)
        return _loaded.get(name)  # type: ignore[return-value]
