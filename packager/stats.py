"""Per-kernel call counters, safe to update from many threads at once."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

# Fallback reasons beyond the guard's miss reasons (packager.guard.MISS_REASONS).
KERNEL_ERROR = "kernel_error"
AUTOGRAD = "autograd"
REMOVED = "removed"


class KernelStats:
    """Calls seen by one kernel's guard: how many ran the kernel and why the others fell back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls = 0
        self._hits = 0
        self._fallbacks: Counter[str] = Counter()
        # Hits counted elsewhere (native slots of compiled graphs), and their sum at the last reset.
        self._counters: list[Callable[[], int]] = []
        self._counted_before_reset = 0

    def add_counter(self, hits: Callable[[], int]) -> None:
        """Count the hits ``hits()`` reports too (a running total kept outside Python)."""
        with self._lock:
            self._counters.append(hits)

    def hit(self) -> None:
        with self._lock:
            self._calls += 1
            self._hits += 1

    def fallback(self, reason: str) -> None:
        with self._lock:
            self._calls += 1
            self._fallbacks[reason] += 1

    def snapshot(self) -> dict[str, object]:
        """``{"calls": n, "hits": n, "fallbacks": {reason: n}}``."""
        with self._lock:
            outside = sum(hits() for hits in self._counters) - self._counted_before_reset
            return {"calls": self._calls + outside, "hits": self._hits + outside, "fallbacks": dict(self._fallbacks)}

    def reset(self) -> None:
        with self._lock:
            self._calls = self._hits = 0
            self._fallbacks.clear()
            self._counted_before_reset = sum(hits() for hits in self._counters)
