"""The verdict on one candidate: a build failure or the figures of a run, never both.

As TVM's ``BuilderResult`` / ``RunnerResult``: a candidate that never ran (the static audit
rejected it, or it did not compile) is a :class:`BuildFailure`, which has no field a run could
fill; one that ran is a :class:`RunFigures`, whatever the run's status, with what the run
measured (nothing when it failed before timing). Latencies are medians in microseconds,
spreads interquartile ranges. ``servicekit.convert`` holds the converter pair to and from
``kernel_forge.common.v1.CandidateResult``; every layer after the harness passes the verdict
on whole, so a new figure is one field here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


class CandidateStatus(str, enum.Enum):
    """The verdict of one evaluation; names match ``kernel_forge.common.v1.CandidateStatus``."""

    COMPILE_ERROR = "COMPILE_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIMEOUT = "TIMEOUT"
    WRONG_RESULT = "WRONG_RESULT"
    REJECTED = "REJECTED"
    PASSED = "PASSED"


#: The statuses of a candidate that never ran: refused by the audit, or not compiled.
BUILD_STATUSES = frozenset({CandidateStatus.COMPILE_ERROR, CandidateStatus.REJECTED})


@dataclass(frozen=True)
class BuildFailure:
    """A candidate that never ran: ``REJECTED`` by the static audit or a ``COMPILE_ERROR``."""

    status: CandidateStatus
    error_message: str = ""

    def __post_init__(self) -> None:
        if self.status not in BUILD_STATUSES:
            raise ValueError(f"a build failure is COMPILE_ERROR or REJECTED, not {self.status.value}")


@dataclass(frozen=True)
class RunFigures:
    """A candidate that ran: its status and what the run measured.

    ``REJECTED`` here is a run whose timing was suspect (the figures say why); a run that failed
    before it was timed has its status and message and no figures. ``floor_us`` is the card's
    memory-bandwidth floor on the device; ``workspace_bytes`` what the kernel's
    ``kf_workspace_bytes`` returned (0 without the export).
    """

    status: CandidateStatus
    error_message: str = ""
    latency_us: float | None = None
    latency_spread_us: float | None = None
    eager_latency_us: float | None = None
    eager_spread_us: float | None = None
    rel_l2_error: float | None = None  # ||out - ref|| / ||ref||, worst over the checked sets
    max_scaled_error: float | None = None  # max |out - ref| / max |ref|, worst over the checked sets
    floor_us: float | None = None
    workspace_bytes: int = 0

    def __post_init__(self) -> None:
        if self.status == CandidateStatus.COMPILE_ERROR:
            raise ValueError("a candidate that ran has no COMPILE_ERROR; that is a BuildFailure")

    @property
    def speedup(self) -> float | None:
        """``eager_latency_us / latency_us``; ``None`` unless both were measured (and non-zero)."""
        if self.latency_us and self.eager_latency_us:
            return self.eager_latency_us / self.latency_us
        return None


Verdict = BuildFailure | RunFigures
"""The verdict on one candidate (see the module docstring)."""

#: The figures a run measures: every field of :class:`RunFigures` but its status and message.
FIGURE_NAMES = tuple(f.name for f in fields(RunFigures) if f.name not in ("status", "error_message"))


def verdict_of(status: CandidateStatus, error_message: str, measured: Mapping[str, Any]) -> Verdict:
    """The verdict that a status and the figures measured (by name, only those measured) make.

    A ``COMPILE_ERROR``, or a ``REJECTED`` with no figure, never ran: a :class:`BuildFailure`
    (a run rejected for suspect timing carries that timing). Every reader of a stored or received
    result decides by this one rule.
    """
    if status in BUILD_STATUSES and (status == CandidateStatus.COMPILE_ERROR or not measured):
        return BuildFailure(status, error_message)
    return RunFigures(status, error_message, **measured)
