"""What crosses between the sandbox and a harness process: JSON, no tensors, no CUDA state."""

from __future__ import annotations

from dataclasses import fields

from pydantic import BaseModel, Field

from gpu_sandbox_service.models import CandidateStatus
from kforge_domain.card import OperatorCard
from kforge_domain.floor import BandwidthAtSize
from kforge_domain.verdict import RunFigures

REQUEST_FILE = "request.json"


class HarnessRequest(BaseModel):
    """Everything a harness needs; paths are inside its private run directory."""

    card: OperatorCard
    backend: str
    library: str
    sample_inputs: list[str]
    module_program: str | None = None
    fresh_input_sets: int = 2
    timing_runs: int = 50
    warmup_runs: int = 5
    best_speedup: float = 0.0
    verify_fresh: bool = True
    copy_bandwidth_gbps: float = 0.0
    copy_bandwidth_by_size: list[BandwidthAtSize] = Field(default_factory=list)
    l2_bytes: int = 0
    # cpu: the cache-line eviction helper (kforge_torch.eviction); None: every timed call flushes the cache
    evict_library: str | None = None
    floor_slack: float = 0.9
    seed: int = 0


class HarnessReport(BaseModel):
    """The harness's verdict, flat as it crosses the result pipe. ``setup_error`` means the card,
    not the candidate, is at fault. Its fields of the same names make :meth:`run_figures`."""

    status: CandidateStatus
    error_message: str = ""
    setup_error: str = ""
    checked_sets: int = 0
    rel_l2_error: float | None = None
    max_scaled_error: float | None = None
    latency_us: float | None = None
    latency_spread_us: float | None = None
    eager_latency_us: float | None = None
    eager_spread_us: float | None = None
    floor_us: float | None = None
    workspace_bytes: int = 0  # what the candidate's kf_workspace_bytes returned (0 without the export)
    # time.monotonic() when the start that needs no candidate ended and when the checks began
    # (harness.phases); they differ in a process prepared while its candidate built
    prepared_at_s: float | None = None
    checks_at_s: float | None = None

    def run_figures(self) -> RunFigures:
        """The domain verdict of this run: every :class:`RunFigures` field, taken by name."""
        return RunFigures(**{f.name: getattr(self, f.name) for f in fields(RunFigures)})
