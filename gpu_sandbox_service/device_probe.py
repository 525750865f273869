"""Child program that describes the device: ``python -I -m gpu_sandbox_service.device_probe BACKEND``.

It runs apart from the server because querying CUDA initialises it, and the server process
must never touch CUDA. It prints one JSON object on stdout.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

COPY_BYTES = 256 * 1024 * 1024


def cpu_facts() -> dict[str, object]:
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    caches = [int(v) for v in (os.sysconf(n) if n in os.sysconf_names else 0
                               for n in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE")) if v and v > 0]
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    src = torch.ones(COPY_BYTES // 8 // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    samples = []
    for _ in range(7):
        started = time.perf_counter()
        dst.copy_(src)
        samples.append(time.perf_counter() - started)
    bandwidth = 2 * src.numel() * 4 / min(samples) / 1e9  # the best copy: a floor must not be pessimistic
    return {"backend": "cpu", "name": name, "arch": f"cpu-{platform.machine()}", "sm_count": os.cpu_count() or 1,
            "l2_bytes": caches[0] if caches else 32 * 1024 * 1024, "copy_bandwidth_gbps": bandwidth,
            "memory_bytes": memory, "device_count": 1}


def cuda_facts() -> dict[str, object]:
    props = torch.cuda.get_device_properties(0)
    major, minor = torch.cuda.get_device_capability(0)
    src = torch.ones(COPY_BYTES // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(12):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    bandwidth = 2 * COPY_BYTES / min(samples[2:]) / 1e9
    return {"backend": "cuda", "name": props.name, "arch": f"sm_{major}{minor}",
            "sm_count": props.multi_processor_count,
            "l2_bytes": int(getattr(props, "L2_cache_size", 0)) or 50 * 1024 * 1024,
            "copy_bandwidth_gbps": bandwidth, "memory_bytes": int(props.total_memory),
            "device_count": torch.cuda.device_count()}


def main(backend: str) -> int:
    if backend == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device is visible"}))
        return 1
    print(json.dumps(cuda_facts() if backend == "cuda" else cpu_facts()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "cpu"))
