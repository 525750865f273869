"""Child program that describes the device: ``python -I -m gpu_sandbox_service.device_probe BACKEND``.

It runs apart from the server because querying CUDA initialises it, and the server process
must never touch CUDA. It prints one JSON object on stdout.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch

from kforge_torch.caches import cpu_cache_sizes, last_level_cache_bytes

COPY_BYTES = 256 * 1024 * 1024
#: Bytes moved per timed sample at a small working set, so the clock's resolution does not count.
SAMPLE_BYTES = 64 * 1024 * 1024


def copy_working_sets(caches: dict[int, int]) -> list[int]:
    """Working sets (source + destination bytes) the CPU copy is measured at: half of each
    cache above L1 (resident there), twice the last level (mostly spilled), and a DRAM size
    well beyond it, the last being the device's headline bandwidth."""
    last = max(caches.values())
    sizes = {caches[level] // 2 for level in caches if level >= 2}
    sizes |= {2 * last, min(max(4 * last, COPY_BYTES // 2), 4 * COPY_BYTES)}
    return sorted(s for s in sizes if s >= 64 * 1024)


def cpu_copy_gbps(working_set: int, samples: int = 7) -> float:
    """The best copy bandwidth (read + write, GB/s) of ``working_set`` bytes of source and
    destination, copied back to back so that a set that fits a cache stays there: the floor
    is a bound, and it must not be pessimistic."""
    src = torch.ones(max(working_set // 8, 1), dtype=torch.float32)
    dst = torch.empty_like(src)
    repeats = max(1, SAMPLE_BYTES // max(working_set, 1))
    dst.copy_(src)
    best = math.inf
    for _ in range(samples):
        started = time.perf_counter()
        for _ in range(repeats):
            dst.copy_(src)
        best = min(best, (time.perf_counter() - started) / repeats)
    return 2 * src.numel() * 4 / best / 1e9


def cpu_facts() -> dict[str, object]:
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    caches = cpu_cache_sizes()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    by_size = [{"working_set_bytes": size, "gbps": cpu_copy_gbps(size)} for size in copy_working_sets(caches)]
    return {"backend": "cpu", "name": name, "arch": f"cpu-{platform.machine()}", "sm_count": os.cpu_count() or 1,
            "l2_bytes": last_level_cache_bytes(torch.device("cpu")), "copy_bandwidth_gbps": by_size[-1]["gbps"],
            "copy_bandwidth_by_size": by_size, "memory_bytes": memory, "device_count": 1}


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
            "l2_bytes": last_level_cache_bytes(torch.device("cuda", 0)),
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
