"""A run's progress as ``kforge`` shows it on stderr while the run works.

One line per card update: the card's evaluations of its budget, its best time and speedup so
far, and the run's evaluations, elapsed time and an estimate of the search time left. On a
terminal the line is redrawn in place, with the run's phases (capture, cards selected, time
limit) printed above it; elsewhere every update is a plain line, so logs stay readable.
Times come from the forge's clock (event timestamps), so a remote forge reads the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from kernel_forge.forge.v1 import messages_pb2 as forge_pb2

#: Events after which the cards' figures have changed.
CARD_EVENTS = ("card_started", "candidate", "card_done")
#: Events that mark a phase of the run, shown even without ``-v``.
PHASE_EVENTS = ("status", "capture", "log", "run_done")


def clock(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def card_progress(card: forge_pb2.RunCard) -> str:
    """``op (card id): n/budget evaluations, best 12.3 µs, 1.85x``."""
    best = (f"best {card.best_latency_us:.3g} µs, {card.speedup:.2f}x"
            if card.HasField("best_latency_us") and card.HasField("speedup") else "no passing kernel yet")
    return f"{card.card.op} ({card.card.id}): {card.evaluations}/{card.budget} evaluations, {best}"


@dataclass
class SearchClock:
    """Estimates the search time left from the pace of this watch's evaluations so far."""

    started_at: float | None = None  # forge time of the first card search seen
    done_at_start: int = 0

    def left_s(self, run: forge_pb2.Run, now: float) -> float | None:
        """Seconds of search left at forge time ``now``; None until an evaluation sets the pace."""
        if self.started_at is None:
            return None
        done = run.evaluations_done - self.done_at_start
        remaining = max(0, run.evaluations_budget - run.evaluations_done)
        left = (now - self.started_at) / done * remaining if done > 0 else None
        if run.config.HasField("time_limit_s"):
            limit_left = max(0.0, run.config.time_limit_s - (now - run.created_at))
            left = limit_left if left is None else min(left, limit_left)
        return left

    def run_progress(self, run: forge_pb2.Run, now: float) -> str:
        """``run 4/16 evaluations, 0:42 elapsed, about 2:06 of search left``."""
        left = self.left_s(run, now)
        estimate = f"about {clock(left)} of search left" if left is not None else "estimate after the first evaluation"
        return (f"run {run.evaluations_done}/{run.evaluations_budget} evaluations, "
                f"{clock(now - run.created_at)} elapsed, {estimate}")


class ProgressView:
    """Writes progress to ``stream``: a redrawn line on a terminal, plain lines elsewhere."""

    def __init__(self, stream: TextIO, terminal: bool) -> None:
        self.stream = stream
        self.terminal = terminal
        self.search = SearchClock()
        self._status = ""  # the last card line, redrawn under each phase on a terminal
        self._drawn = False

    def phase(self, run: forge_pb2.Run, now: float, message: str) -> None:
        """A phase of the run (capture stage, cards selected, finished), kept above the status line."""
        self._write(f"[{clock(now - run.created_at)}] {message}", keep=True)
        if self.terminal and self._status:
            self._write(self._status, keep=False)

    def card(self, run: forge_pb2.Run, card: forge_pb2.RunCard, now: float, started: bool = False) -> None:
        """The figures of ``card`` after an update, with the run's clock."""
        if started and self.search.started_at is None:
            self.search = SearchClock(now, run.evaluations_done)
        line = f"{card_progress(card)} | {self.search.run_progress(run, now)}"
        if line != self._status:  # a card's end repeats its last evaluation's figures
            self._status = line
            self._write(line, keep=not self.terminal)

    def close(self) -> None:
        """End the redrawn line, so what follows starts on a line of its own."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def _write(self, line: str, keep: bool) -> None:
        if self.terminal:
            self.stream.write("\r\x1b[2K" + line + ("\n" if keep else ""))
            self._drawn = not keep
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
