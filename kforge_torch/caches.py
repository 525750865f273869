"""The size of the cache a timer flushes, per device.

cpu: the last-level data cache, from sysfs, else sysconf, else :data:`DEFAULT_CPU_CACHES`.
cuda: the device's L2, from its properties. The sandbox's device probe reports this figure as the
device's ``l2_bytes`` and the harness flushes by it; capture flushes by the same figure, so both
evict the same amount before every timed call.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

#: Per-level cache sizes assumed where the OS reports none (a common desktop/server core).
DEFAULT_CPU_CACHES = {2: 1024 * 1024, 3: 32 * 1024 * 1024}
#: L2 assumed for a CUDA device whose properties report none.
DEFAULT_CUDA_L2_BYTES = 50 * 1024 * 1024
SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def cpu_cache_sizes(root: Path = SYSFS_CACHES) -> dict[int, int]:
    """Data (or unified) cache size by level, from sysfs, else sysconf, else :data:`DEFAULT_CPU_CACHES`."""
    sizes: dict[int, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 1024, "M": 1024 * 1024, "G": 1024 * 1024 * 1024}.get(size[-1:], 1)
        with contextlib.suppress(ValueError):
            sizes[level] = int(size.rstrip("KMG")) * scale
    for level, name in ((1, "SC_LEVEL1_DCACHE_SIZE"), (2, "SC_LEVEL2_CACHE_SIZE"), (3, "SC_LEVEL3_CACHE_SIZE")):
        if level not in sizes and name in os.sysconf_names:
            value = os.sysconf(name)
            if value and value > 0:
                sizes[level] = value
    return sizes or dict(DEFAULT_CPU_CACHES)


def last_level_cache_bytes(device: torch.device) -> int:
    """Bytes of ``device``'s last-level cache: the L2 of a CUDA device, the largest cpu cache."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return int(getattr(props, "L2_cache_size", 0)) or DEFAULT_CUDA_L2_BYTES
    return max(cpu_cache_sizes().values())
