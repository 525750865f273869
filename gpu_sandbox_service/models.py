"""The sandbox's own settings: its limits and how one evaluation times its candidate.

The request and the device are the shared :class:`kforge_domain.evaluate_request.EvaluateRequest`
and :class:`kforge_domain.device.DeviceInfo`, the answer the shared
:class:`kforge_domain.result.CandidateResult`, all converted by ``servicekit.convert``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kforge_domain.verdict import CandidateStatus

__all__ = ["CandidateStatus", "Limits", "Timing"]


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


class Timing(BaseModel):
    """How one evaluation measures: a request's counts with the sandbox's defaults for zero, checked.

    Not the request's :class:`~kforge_domain.evaluate_request.EvaluationOptions`: zero is resolved
    here, the bounds are the sandbox's, and the warm-up count never travels; ``evaluator.timing_of`` resolves it.
    """

    model_config = ConfigDict(frozen=True)

    fresh_input_sets: int = Field(default=2, ge=0, le=64)
    timing_runs: int = Field(default=50, ge=1, le=10_000)
    warmup_runs: int = Field(default=5, ge=0, le=1000)
    compile_timeout_s: float | None = Field(default=None, gt=0)  # None: the limit's
    run_timeout_s: float | None = Field(default=None, gt=0)
    best_speedup: float = Field(default=0.0, ge=0)

