"""Per-kernel call counters, safe to update from many threads at once."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

#: What a counter kept outside Python reports: hits, and fallbacks by reason.
Counts = tuple[int, dict[str, int]]

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
        # Calls counted elsewhere (the native guard and graph op), and what they held at the last reset.
        self._counters: list[Callable[[], Counts]] = []
        self._counted_before_reset: Counts = (0, {})

    def add_counter(self, counts: Callable[[], Counts]) -> None:
        """Count what ``counts()`` reports too (running totals kept outside Python)."""
        with self._lock:
            self._counters.append(counts)

    def _outside(self) -> Counts:
        hits, fallbacks = 0, Counter[str]()
        for counts in self._counters:
            more_hits, more_fallbacks = counts()
            hits += more_hits
            fallbacks.update(more_fallbacks)
        before_hits, before_fallbacks = self._counted_before_reset
        fallbacks.subtract(before_fallbacks)
        return hits - before_hits, {reason: n for reason, n in fallbacks.items() if n}

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
            hits, fallbacks = self._outside()
            every = self._fallbacks + Counter(fallbacks)
            return {"calls": self._calls + hits + sum(fallbacks.values()), "hits": self._hits + hits,
                    "fallbacks": dict(every)}

    def reset(self) -> None:
        with self._lock:
            self._calls = self._hits = 0
            self._fallbacks.clear()
            self._counted_before_reset = (0, {})
            self._counted_before_reset = self._outside()
