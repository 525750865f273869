"""Plain domain models of the sandbox: requests, limits and device facts.

They know nothing of gRPC; :mod:`gpu_sandbox_service.servicer` converts them to and from
``kernel_forge.*.v1`` messages. The sandbox answers with the shared
:class:`kforge_domain.result.CandidateResult`, converted by ``servicekit.convert``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kforge_domain.card import OperatorCard
from kforge_domain.floor import BandwidthAtSize
from kforge_domain.verdict import CandidateStatus

__all__ = ["CandidateStatus", "DeviceInfo", "EvaluationOptions", "EvaluationRequest", "Limits"]


class Limits(BaseModel):
    """What a compiler or candidate process may use. Operator configuration, not per request."""

    model_config = ConfigDict(frozen=True)

    compile_timeout_s: float = 120.0
    run_timeout_s: float = 30.0
    cpu_time_s: int = 600
    max_processes: int = 4096
    open_files: int = 1024
    file_size_bytes: int = 512 * 1024 * 1024
    run_address_space_bytes: int = 16 * 1024**3
    """Address-space cap of a cpu-backend candidate process (cuda needs its large mappings)."""
    compile_address_space_bytes: int = 8 * 1024**3
    output_cap_bytes: int = 8 * 1024 * 1024
    """stdout+stderr a process may write before it is killed."""
    log_tail_bytes: int = 8 * 1024
    floor_slack: float = 0.9
    """A latency under ``floor_slack`` x the memory-bandwidth floor is rejected as suspect."""
    static_audit: bool = True
    """Reject forbidden source before compiling; turned off only to test the runtime isolation."""


class EvaluationOptions(BaseModel):
    """Per-request knobs (``kernel_forge.sandbox.v1.EvaluationOptions``); zero means default."""

    fresh_input_sets: int = Field(default=2, ge=0, le=64)
    timing_runs: int = Field(default=50, ge=1, le=10_000)
    warmup_runs: int = Field(default=5, ge=0, le=1000)
    compile_timeout_s: float | None = Field(default=None, gt=0)
    run_timeout_s: float | None = Field(default=None, gt=0)
    remeasure: bool = False
    best_speedup: float = Field(default=0.0, ge=0)


class EvaluationRequest(BaseModel):
    """One candidate kernel for one card."""

    candidate_id: str
    card: OperatorCard
    source: str
    backend: str
    options: EvaluationOptions = Field(default_factory=EvaluationOptions)


class DeviceInfo(BaseModel):
    """What a sandbox runs on (``kernel_forge.common.v1.DeviceInfo``)."""

    backend: str
    name: str
    arch: str
    sm_count: int
    l2_bytes: int
    copy_bandwidth_gbps: float
    toolchain: str
    memory_bytes: int = 0
    device_count: int = 1
    candidate_slots: int = 1
    sandbox_id: str = ""
    copy_bandwidth_by_size: list[BandwidthAtSize] = Field(default_factory=list)
