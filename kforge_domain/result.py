"""A candidate's result: the verdict on it (:mod:`kforge_domain.verdict`) with the evidence around it.

The verdict says what happened and what a run measured; the evidence says where and with what:
the audit class, the compiler's and the run's log, the toolchain and device, the source's hash,
the compiled artifact. ``servicekit.convert`` holds the converter pair to and from
``kernel_forge.common.v1.CandidateResult``; the forge's run store keeps it as that message's JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_domain.verdict import CandidateStatus, RunFigures, Verdict


@dataclass(frozen=True)
class CandidateResult:
    """The verdict on one candidate and its evidence. Times are in seconds, latencies in µs."""

    candidate_id: str
    verdict: Verdict
    audit_class: str = ""  # "custom" | "backend_wrapper"
    log_tail: str = ""
    compile_s: float = 0.0
    total_s: float = 0.0
    source_sha256: str = ""
    compiler_flags: str = ""
    toolchain: str = ""
    arch: str = ""  # "sm_90", or "cpu-x86_64"
    sandbox_id: str = ""
    remeasured: bool = False  # timing confirmed in a fresh process
    start_s: float = 0.0  # from the library ready to the candidate's checks beginning (the process's start)
    prepared_ahead_s: float = 0.0  # how long before the library was ready its process had prepared all else
    artifact: bytes = b""  # the compiled shared object, PASSED only; the run store keeps it as a blob

    @property
    def status(self) -> CandidateStatus:
        return self.verdict.status

    @property
    def error_message(self) -> str:
        return self.verdict.error_message

    @property
    def passed(self) -> bool:
        return self.verdict.status == CandidateStatus.PASSED

    @property
    def figures(self) -> RunFigures | None:
        """What the run measured; ``None`` for a candidate that never ran."""
        return self.verdict if isinstance(self.verdict, RunFigures) else None

    # The figures the search ranks candidates by (None when not measured).
    @property
    def latency_us(self) -> float | None:
        return self.figures.latency_us if self.figures else None

    @property
    def eager_latency_us(self) -> float | None:
        return self.figures.eager_latency_us if self.figures else None

    @property
    def eager_spread_us(self) -> float | None:
        return self.figures.eager_spread_us if self.figures else None

    @property
    def latency_spread_us(self) -> float | None:
        return self.figures.latency_spread_us if self.figures else None

    @property
    def speedup(self) -> float | None:
        return self.figures.speedup if self.figures else None
