"""What a sandbox runs on, as it answers ``GetDeviceInfo``.

The forge targets the first sandbox's device, ranks cards by its copy bandwidth, keys the kernel
cache by its arch and toolchain, and passes it on to the agent with every proposal request.
``servicekit.convert`` holds the converter pair to and from ``kernel_forge.common.v1.DeviceInfo``;
every field here is that message's field of the same name, with its default.
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_domain.floor import BandwidthAtSize, CopyBandwidth


@dataclass(frozen=True)
class DeviceInfo:
    """One sandbox's device: what it is, what it measured, how many candidates it takes at once."""

    backend: str = ""  # "cpu" | "cuda"
    name: str = ""  # "NVIDIA H200", or the CPU model
    arch: str = ""  # "sm_90", or "cpu-x86_64"
    sm_count: int = 0  # multiprocessors (cuda) or cores (cpu)
    l2_bytes: int = 0
    copy_bandwidth_gbps: float = 0.0  # DRAM copy bandwidth, read + write
    toolchain: str = ""  # "nvcc 13.0" / "g++ 12.2.0"
    sandbox_id: str = ""
    memory_bytes: int = 0
    copy_bandwidth_by_size: tuple[BandwidthAtSize, ...] = ()  # ascending; empty: copy_bandwidth_gbps at every size
    candidate_slots: int = 0  # 0: the sandbox does not say (one)

    @property
    def copy_bandwidth(self) -> CopyBandwidth:
        """The copy bandwidth by working-set size, as the memory-bandwidth floor reads it."""
        return CopyBandwidth(self.copy_bandwidth_gbps, self.copy_bandwidth_by_size)
