"""What the sandbox runs on, probed in a child process (the server never initialises CUDA)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from gpu_sandbox_service.compiler import detect_toolchain
from gpu_sandbox_service.pycommand import python_module_command
from kforge_domain.backends import BACKENDS
from kforge_domain.device import DeviceInfo
from kforge_domain.floor import BandwidthAtSize
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


@dataclass(frozen=True)
class ProbedDevice:
    """The device as the sandbox answers it, and how many of it this sandbox sees.

    ``device_count`` stays here: the pool pins run slots to the GPUs, while the wire says only
    ``candidate_slots`` (filled in by the evaluator, with ``sandbox_id``).
    """

    info: DeviceInfo
    device_count: int = 1


def device_from_facts(facts: dict[str, Any], toolchain: str) -> ProbedDevice:
    """The device the probe's JSON facts describe, built with ``toolchain``."""
    facts = dict(facts)
    count = int(facts.pop("device_count", 1))
    by_size = tuple(BandwidthAtSize(int(p["working_set_bytes"]), float(p["gbps"]))
                    for p in facts.pop("copy_bandwidth_by_size", []))
    return ProbedDevice(DeviceInfo(toolchain=toolchain, copy_bandwidth_by_size=by_size, **facts), count)


@functools.cache
def describe_device(backend: str) -> ProbedDevice:
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
    return device_from_facts(facts, toolchain.version)
