"""What proposers have spent: per run, per card and in total, for GetUsage and for budgets."""

from __future__ import annotations

import threading
from collections import defaultdict

from kforge_domain.cost import Cost


class UsageLedger:
    """Running totals of proposer cost. Safe to share between threads and proposers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = Cost()
        self._by_run: dict[str, Cost] = defaultdict(Cost)
        self._by_card: dict[tuple[str, str], Cost] = defaultdict(Cost)

    def record(self, cost: Cost, run_id: str = "", card_id: str = "") -> None:
        with self._lock:
            self._total = self._total + cost
            self._by_run[run_id] = self._by_run[run_id] + cost
            self._by_card[(run_id, card_id)] = self._by_card[(run_id, card_id)] + cost

    def spent(self, run_id: str | None = None) -> Cost:
        """Everything recorded, or one run's share (an unknown run has spent nothing)."""
        with self._lock:
            if run_id is None or run_id == "":
                return self._total
            return self._by_run.get(run_id, Cost())

    def spent_on_card(self, run_id: str, card_id: str) -> Cost:
        with self._lock:
            return self._by_card.get((run_id, card_id), Cost())
