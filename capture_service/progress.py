"""Progress of a capture, as the CLI prints it and the gRPC stream sends it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

STAGES = ("loading", "capturing", "exporting", "timing", "writing", "done", "failed")


@dataclass(frozen=True)
class CaptureProgress:
    """One step of a capture. ``fraction`` runs from 0 to 1 over the whole capture."""

    stage: str
    message: str
    fraction: float
    n_cards: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaptureProgress:
        return cls(str(data["stage"]), str(data["message"]), float(data["fraction"]), int(data.get("n_cards", 0)))


ProgressFn = Callable[[CaptureProgress], None]


def ignore_progress(_: CaptureProgress) -> None:
    """The progress sink when nobody listens."""
