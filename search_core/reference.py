"""A pure-Python reference of the native search tree: the same algorithm, step for step.

It exists to check the Rust core (property tests drive both with the same operations and
require identical choices, node for node and bit for bit) and as the baseline of the speed
benchmark. It reads and writes the native snapshot format, so a tree can move between the two.
Keep every arithmetic expression in the order of ``tree.rs``: the two must round identically.
"""

from __future__ import annotations

import json
import math
from typing import Any

from search_core.config import SearchConfig
from search_core.errors import InvalidArgumentError, InvalidSnapshotError, InvalidStateError, UnknownNodeError
from search_core.node import NodeStatus, NodeView

_MASK64 = (1 << 64) - 1
_SNAPSHOT_FORMAT = 1
_EXPANDABLE = ("root", "passed")
_STATUS_NAMES = {
    "root": "the root",
    "pending": "pending",
    "passed": "passed",
    "failed": "failed",
    "cancelled": "cancelled",
}


class SplitMix64:
    """The native PRNG, reproduced exactly."""

    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK64

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    def below(self, length: int) -> int:
        return self.next_u64() % length


class ReferenceTree:
    """The search tree in plain Python; the API of :class:`search_core.SearchTree`.

    Nodes are stored as parallel lists (one per field), the layout of the snapshot format.
    """

    def __init__(self, config: SearchConfig, reference_latency_us: float) -> None:
        _check_latency("reference_latency_us", reference_latency_us)
        self.config = config
        self.reference_latency_us = float(reference_latency_us)
        self.rng = SplitMix64(config.seed)
        self.reward_min = 0.0
        self.reward_max = 0.0
        self._best: int | None = None
        self.parent: list[int | None] = [None]
        self.depth: list[int] = [0]
        self.status: list[str] = ["root"]
        self.latency_us: list[float | None] = [self.reference_latency_us]
        self.spread_us: list[float | None] = [None]
        self.visits: list[int] = [1]
        self.passed: list[int] = [1]
        self.reward_sum: list[float] = [0.0]
        self.best_reward: list[float | None] = [0.0]
        self.best_below: list[int | None] = [None]
        self.in_flight: list[int] = [0]
        self.reserved: list[int] = [0]
        self.expansions: list[int] = [0]
        self.child_ids: list[list[int]] = [[]]

    def __len__(self) -> int:
        return len(self.parent)

    # --- operations -------------------------------------------------------------------------

    def ask(self, n: int) -> list[int]:
        if n < 0:
            raise InvalidArgumentError(f"n must be >= 0, got {n}")
        parents = []
        for _ in range(n):
            parent = self._select()
            self.reserved[parent] += 1
            self._add_in_flight(parent, 1)
            parents.append(parent)
        return parents

    def release(self, parent_id: int) -> None:
        self._check_id(parent_id)
        if self.reserved[parent_id] == 0:
            raise InvalidStateError(f"node {parent_id} has no parent pick from ask to release")
        self.reserved[parent_id] -= 1
        self._add_in_flight(parent_id, -1)

    def add_child(self, parent_id: int) -> int:
        self._check_id(parent_id)
        status = self.status[parent_id]
        if status not in _EXPANDABLE:
            raise InvalidStateError(
                f"node {parent_id} is {_STATUS_NAMES[status]}; only the root and passed nodes can be revised"
            )
        reserved = self.reserved[parent_id] > 0
        child = len(self.parent)
        if reserved:
            self.reserved[parent_id] -= 1
        self.expansions[parent_id] += 1
        self.child_ids[parent_id].append(child)
        if not reserved:
            self._add_in_flight(parent_id, 1)
        self._append_node(parent_id, self.depth[parent_id] + 1, "pending")
        self.in_flight[child] = 1
        return child

    def tell(self, child_id: int, passed: bool, latency_us: float | None, spread_us: float | None = None) -> None:
        self._check_pending(child_id, "told")
        if passed:
            if latency_us is None:
                raise InvalidArgumentError(f"node {child_id} passed, so it needs a latency_us")
            _check_latency("latency_us", latency_us)
        elif latency_us is not None or spread_us is not None:
            raise InvalidArgumentError(f"node {child_id} failed, so it has no latency_us or spread_us")
        if spread_us is not None and not (math.isfinite(spread_us) and spread_us >= 0.0):
            raise InvalidArgumentError(f"spread_us must be finite and >= 0, got {spread_us}")
        latency = float(latency_us) if passed and latency_us is not None else None
        self._add_in_flight(child_id, -1)
        self.status[child_id] = "passed" if passed else "failed"
        self.latency_us[child_id] = latency
        self.spread_us[child_id] = None if spread_us is None else float(spread_us)
        self._backpropagate(child_id, latency)

    def cancel(self, child_id: int) -> None:
        self._check_pending(child_id, "cancelled")
        self._add_in_flight(child_id, -1)
        self.status[child_id] = "cancelled"
        parent = self.parent[child_id]
        if parent is not None:
            self.expansions[parent] -= 1

    # --- queries ----------------------------------------------------------------------------

    def best(self) -> int | None:
        return self._best

    def node(self, node_id: int) -> NodeView:
        self._check_id(node_id)
        status = self.status[node_id]
        passed = self.passed[node_id]
        view_status: NodeStatus = "failed" if status == "cancelled" else status  # type: ignore[assignment]
        return NodeView(
            id=node_id,
            parent=self.parent[node_id],
            depth=self.depth[node_id],
            status=view_status,
            latency_us=self.latency_us[node_id],
            spread_us=self.spread_us[node_id],
            visits=self.visits[node_id],
            value=self.reward_sum[node_id] / passed if passed > 0 else None,
            in_flight=self.in_flight[node_id],
            cancelled=status == "cancelled",
            best_reward=self.best_reward[node_id],
        )

    def ancestors(self, node_id: int) -> list[int]:
        self._check_id(node_id)
        out = []
        cursor = self.parent[node_id]
        while cursor is not None:
            out.append(cursor)
            cursor = self.parent[cursor]
        return out

    def best_descendant(self, node_id: int) -> int | None:
        self._check_id(node_id)
        return self.best_below[node_id]

    def failed_siblings(self, node_id: int) -> list[int]:
        self._check_id(node_id)
        parent = self.parent[node_id]
        if parent is None:
            return []
        return [s for s in self.child_ids[parent] if s != node_id and self.status[s] in ("failed", "cancelled")]

    def children(self, node_id: int) -> list[int]:
        self._check_id(node_id)
        return list(self.child_ids[node_id])

    def reward(self, latency_us: float) -> float:
        return math.log(self.reference_latency_us / latency_us)

    # --- the algorithm ----------------------------------------------------------------------

    def _select(self) -> int:
        alpha = self.config.widen_alpha_after(self.visits[0] - 1)
        c = self.config.exploration
        vl = self.config.virtual_loss
        lam = self.config.max_weight
        rmin = self.reward_min
        span = self.reward_max - rmin
        current = 0
        while True:
            effective = float(self.visits[current]) + vl * float(self.in_flight[current])
            limit = max(self.config.widen_k * effective**alpha, 1.0)
            may_widen = float(self.expansions[current] + self.reserved[current] + 1) <= limit
            log_parent = math.log(effective)
            best_score = -math.inf
            ties: list[int] = []
            if may_widen:
                # Revising this node is one more option: its own reward stands in for its future
                # children, and the picks already made on it for their visits.
                own = self.reward(self.latency_us[current] or self.reference_latency_us)
                made = float(self.expansions[current] + 1)
                made_effective = made + vl * float(self.reserved[current])
                own_part = (own - rmin) / span if span > 0.0 else 0.0
                best_score = own_part * made / made_effective + c * math.sqrt(log_parent / made_effective)
                ties = [current]
            for child in self.child_ids[current]:
                if self.status[child] != "passed":
                    continue
                visits = float(self.visits[child])
                child_effective = visits + vl * float(self.in_flight[child])
                if span > 0.0:
                    best_reward = self.best_reward[child]
                    best_reward = rmin if best_reward is None else best_reward
                    mean_part = (self.reward_sum[child] - float(self.passed[child]) * rmin) / span
                    best_part = (best_reward - rmin) / span
                else:
                    mean_part = best_part = 0.0
                q = ((1.0 - lam) * mean_part + lam * best_part * visits) / child_effective
                score = q + c * math.sqrt(log_parent / child_effective)
                if score > best_score:
                    best_score = score
                    ties = [child]
                elif score == best_score:
                    ties.append(child)
            if not ties:
                return current
            chosen = ties[0] if len(ties) == 1 else ties[self.rng.below(len(ties))]
            if chosen == current:
                return current
            current = chosen

    def _backpropagate(self, node_id: int, latency: float | None) -> None:
        reward = None if latency is None else self.reward(latency)
        if reward is not None and latency is not None:
            self.reward_min = min(self.reward_min, reward)
            self.reward_max = max(self.reward_max, reward)
            if self._is_better(self._best, latency):
                self._best = node_id
            cursor = self.parent[node_id]
            while cursor is not None:
                if self._is_better(self.best_below[cursor], latency):
                    self.best_below[cursor] = node_id
                cursor = self.parent[cursor]
        cursor_id: int | None = node_id
        while cursor_id is not None:
            self.visits[cursor_id] += 1
            if reward is not None:
                self.passed[cursor_id] += 1
                self.reward_sum[cursor_id] += reward
                current_best = self.best_reward[cursor_id]
                self.best_reward[cursor_id] = reward if current_best is None else max(current_best, reward)
            cursor_id = self.parent[cursor_id]

    def _is_better(self, incumbent: int | None, latency: float) -> bool:
        if incumbent is None:
            return True
        incumbent_latency = self.latency_us[incumbent]
        return incumbent_latency is not None and latency < incumbent_latency

    def _add_in_flight(self, node_id: int, delta: int) -> None:
        cursor: int | None = node_id
        while cursor is not None:
            self.in_flight[cursor] += delta
            cursor = self.parent[cursor]

    def _append_node(self, parent: int | None, depth: int, status: str) -> None:
        self.parent.append(parent)
        self.depth.append(depth)
        self.status.append(status)
        self.latency_us.append(None)
        self.spread_us.append(None)
        self.visits.append(0)
        self.passed.append(0)
        self.reward_sum.append(0.0)
        self.best_reward.append(None)
        self.best_below.append(None)
        self.in_flight.append(0)
        self.reserved.append(0)
        self.expansions.append(0)
        self.child_ids.append([])

    def _check_id(self, node_id: int) -> None:
        if not 0 <= node_id < len(self.parent):
            raise UnknownNodeError(f"no node with id {node_id}")

    def _check_pending(self, node_id: int, verb: str) -> None:
        self._check_id(node_id)
        status = self.status[node_id]
        if status != "pending":
            raise InvalidStateError(f"node {node_id} is {_STATUS_NAMES[status]}; only a pending node can be {verb}")

    # --- snapshots --------------------------------------------------------------------------

    _COLUMNS = (
        "parent",
        "status",
        "latency_us",
        "spread_us",
        "visits",
        "passed",
        "reward_sum",
        "best_reward",
        "best_below",
        "in_flight",
        "reserved",
    )

    def snapshot_dict(self) -> dict[str, Any]:
        """The tree in the native snapshot layout, as parsed JSON."""
        c = self.config
        config: dict[str, Any] = {
            "seed": c.seed,
            "exploration": float(c.exploration),
            "widen_k": float(c.widen_k),
            "widen_alpha": float(c.widen_alpha),
        }
        if c.widen_alpha_end is not None:  # written only when set, as the native format does
            config["widen_alpha_end"] = float(c.widen_alpha_end)
            config["widen_anneal_evaluations"] = c.widen_anneal_evaluations
        config["virtual_loss"] = float(c.virtual_loss)
        config["max_weight"] = float(c.max_weight)
        return {
            "format": _SNAPSHOT_FORMAT,
            "config": config,
            "reference_latency_us": self.reference_latency_us,
            "rng": {"state": self.rng.state},
            "reward_min": self.reward_min,
            "reward_max": self.reward_max,
            "best": self._best,
            "nodes": {name: list(getattr(self, name)) for name in self._COLUMNS},
        }

    def snapshot(self) -> bytes:
        return json.dumps(self.snapshot_dict(), separators=(",", ":")).encode()

    @classmethod
    def restore(cls, data: bytes) -> ReferenceTree:
        """Loads a native (or reference) snapshot."""
        try:
            raw = json.loads(data)
            if raw["format"] != _SNAPSHOT_FORMAT:
                raise ValueError(f"format {raw['format']} is not the supported {_SNAPSHOT_FORMAT}")
            tree = cls(SearchConfig(**raw["config"]), raw["reference_latency_us"])
            tree.rng.state = raw["rng"]["state"]
            tree.reward_min = raw["reward_min"]
            tree.reward_max = raw["reward_max"]
            tree._best = raw["best"]
            columns = raw["nodes"]
            for name in cls._COLUMNS:
                setattr(tree, name, list(columns[name]))
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidSnapshotError(f"invalid snapshot: {error}") from error
        size = len(tree.parent)
        tree.depth = [0] * size
        tree.expansions = [0] * size
        tree.child_ids = [[] for _ in range(size)]
        for node_id in range(1, size):
            parent = tree.parent[node_id]
            if parent is None or not 0 <= parent < node_id:
                raise InvalidSnapshotError(f"invalid snapshot: node {node_id} has an invalid parent")
            tree.depth[node_id] = tree.depth[parent] + 1
            tree.child_ids[parent].append(node_id)
            if tree.status[node_id] != "cancelled":
                tree.expansions[parent] += 1
        return tree


def _check_latency(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0.0):
        raise InvalidArgumentError(f"{name} must be a finite number > 0, got {value}")
