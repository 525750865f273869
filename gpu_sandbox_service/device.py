"""What the sandbox runs on, probed in a child process (the server never initialises CUDA)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys

from gpu_sandbox_service.compiler import detect_toolchain
from gpu_sandbox_service.models import DeviceInfo
from gpu_sandbox_service.pycommand import python_module_command
from kforge_domain.backends import BACKENDS
from servicekit.errors import FailedPrecondition, InvalidArgument


def resolve_backend(backend: str) -> str:
    """``auto`` picks cuda when a GPU and nvcc are present, else cpu."""
    if backend == "auto":
        has_gpu = os.path.exists("/dev/nvidiactl") or bool(shutil.which("nvidia-smi"))
        return "cuda" if has_gpu and shutil.which("nvcc") and _cuda_visible() else "cpu"
    if backend not in BACKENDS:
        raise InvalidArgument(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)} or auto")
    return backend


def _cuda_visible() -> bool:
    try:
        probe = subprocess.run([sys.executable, "-I", "-c", "import torch; print(torch.cuda.is_available())"],
                               capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.stdout.strip() == "True"


@functools.cache
def describe_device(backend: str) -> DeviceInfo:
    """Name, arch, SM (or core) count, cache size, measured copy bandwidth and toolchain.

    Measured once per process; raises :class:`FailedPrecondition` if the backend is unusable here.
    """
    backend = resolve_backend(backend)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "HOME")}
    try:
        probe = subprocess.run([*python_module_command("gpu_sandbox_service.device_probe"), backend],
                               capture_output=True, text=True, timeout=300, check=False, env=env)
    except subprocess.TimeoutExpired as exc:
        raise FailedPrecondition(f"describing the {backend} device timed out") from exc
    try:
        facts = json.loads(probe.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise FailedPrecondition(f"cannot describe the {backend} device: {probe.stderr.strip()[-2000:]}") from exc
    if "error" in facts:
        raise FailedPrecondition(f"{backend} backend unavailable: {facts['error']}")
    try:
        toolchain = detect_toolchain(backend, str(facts["arch"]))
    except (FileNotFoundError, subprocess.SubprocessError) as exc:
        raise FailedPrecondition(str(exc)) from exc
    return DeviceInfo(toolchain=toolchain.version, **facts)
