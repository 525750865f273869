"""The dashboard's plain data: what each view shows, read once from the forge's messages.

Views take these frozen dataclasses, never protobuf messages, so they can be exercised on
hand-made data and cached by Streamlit (everything here pickles).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernel_forge.common.v1 import types_pb2
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2

ACTIVE_STATUSES = ("pending", "running")


def _optional(msg: object, name: str) -> float | None:
    return getattr(msg, name) if msg.HasField(name) else None  # type: ignore[attr-defined]


def status_name(status: int) -> str:
    """``PASSED``, ``WRONG_RESULT``, ...; ``PENDING`` for a candidate not evaluated yet."""
    if status == types_pb2.CANDIDATE_STATUS_UNSPECIFIED:
        return "PENDING"
    return types_pb2.CandidateStatus.Name(status)


@dataclass(frozen=True)
class RunSummary:
    """One run as the runs list and the run page show it."""

    run_id: str
    model_name: str
    model_spec: str
    backend: str
    proposer: str
    status: str
    error: str
    created_at: float
    updated_at: float
    cards_total: int
    cards_done: int
    evaluations_done: int
    evaluations_budget: int
    cost_usd: float
    llm_calls: int
    best_e2e_speedup: float | None
    run_dir: str = ""
    budget_usd: float | None = None
    time_limit_s: float | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def model(self) -> str:
        return self.model_name or self.model_spec

    @property
    def progress(self) -> float:
        """Evaluations done against the budget, in [0, 1]."""
        if self.evaluations_budget <= 0:
            return 1.0 if self.status == "done" else 0.0
        return min(1.0, self.evaluations_done / self.evaluations_budget)

    @classmethod
    def from_proto(cls, run: forge_pb2.Run) -> RunSummary:
        return cls(
            run_id=run.run_id, model_name=run.model_name, model_spec=run.config.model_spec,
            backend=run.config.backend, proposer=run.config.proposer, status=run.status, error=run.error,
            created_at=run.created_at, updated_at=run.updated_at, cards_total=run.cards_total,
            cards_done=run.cards_done, evaluations_done=run.evaluations_done,
            evaluations_budget=run.evaluations_budget, cost_usd=run.cost.usd, llm_calls=run.cost.llm_calls,
            best_e2e_speedup=_optional(run, "best_e2e_speedup"), run_dir=run.run_dir,
            budget_usd=_optional(run.config, "budget_usd"), time_limit_s=_optional(run.config, "time_limit_s"),
        )


@dataclass(frozen=True)
class RunEvent:
    """One step of a run as the forge logged it (WatchRun): what happened, when, to which card or
    candidate, and the run's status after it."""

    seq: int
    timestamp: float
    kind: str
    """``status``, ``capture``, ``card_started``, ``candidate``, ``card_done``, ``log`` or ``run_done``."""
    message: str
    card_id: str = ""
    candidate_id: str = ""
    run_status: str = ""
    candidate_status: str = ""
    """The verdict of the event's candidate; empty when it names none or none was reached."""
    speedup: float | None = None

    @classmethod
    def from_proto(cls, event: forge_pb2.RunEvent) -> RunEvent:
        result = event.result if event.HasField("result") else None
        return cls(
            seq=event.seq, timestamp=event.timestamp, kind=event.kind, message=event.message,
            card_id=event.card_id, candidate_id=event.candidate_id, run_status=event.status,
            candidate_status=status_name(result.status) if result is not None and result.status else "",
            speedup=_optional(result, "speedup") if result is not None else None,
        )


@dataclass(frozen=True)
class EndToEndMode:
    """One deployment mode of the model measured end to end: its latency and speedup over eager."""

    name: str
    ms: float | None
    speedup: float | None


@dataclass(frozen=True)
class EndToEnd:
    """A run's end-to-end figures from its report: eager, the ``.cast`` (guards on), and where the
    compiled baseline was measured, torch.compile and ``cast.compile``."""

    measured: bool
    error: str
    eager_ms: float | None
    cast: EndToEndMode
    compile: EndToEndMode | None  # None: torch.compile was not measured (--no-compile-baseline)
    cast_compile: EndToEndMode | None
    cast_runs_as_eager: bool = False  # the .cast holds no kernel for eager use on the device: the model runs as eager

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> EndToEnd:
        """From a run report's JSON; ``cast.compile`` with no kernel in the graphs is torch.compile."""
        e2e = report.get("end_to_end") or {}
        compiled = e2e.get("compile_ms") is not None or e2e.get("cast_compile_ms") is not None
        kernels = bool(e2e.get("cast_compile_kernels"))
        return cls(
            measured=bool(e2e.get("measured")), error=str(e2e.get("error") or ""), eager_ms=e2e.get("eager_ms"),
            cast=EndToEndMode(".cast", e2e.get("cast_ms"), e2e.get("cast_speedup")),
            compile=EndToEndMode("torch.compile", e2e.get("compile_ms"), e2e.get("compile_speedup"))
            if compiled else None,
            cast_compile=EndToEndMode(
                "cast.compile", e2e.get("cast_compile_ms" if kernels else "compile_ms"),
                e2e.get("cast_compile_speedup" if kernels else "compile_speedup")) if compiled else None,
            cast_runs_as_eager=e2e.get("cast_kernels") == 0,
        )


@dataclass(frozen=True)
class CardSummary:
    """One operator card of a run and the best kernel found for it."""

    card_id: str
    op: str
    kind: str
    time_share: float
    call_count: int
    optimisable: bool
    status: str
    reason: str
    audit_class: str
    eager_us: float | None
    best_us: float | None
    speedup: float | None
    floor_us: float | None
    best_candidate_id: str
    evaluations: int
    cost_usd: float
    budget: int = 0
    """Evaluations granted to the card; raised while it still improves."""
    eager_in_series: bool = False
    """``eager_us`` was timed beside the best kernel, in the interleaved series its speedup comes
    from; otherwise (no kernel passed yet) it is the card's time in the model, at capture."""
    model_eager_us: float | None = None
    """The card's eager time in the model, at capture: what its time share is a share of."""
    eager_spread_us: float | None = None
    """The interquartile range of ``eager_us``'s timed calls; None: not recorded."""
    model_eager_spread_us: float | None = None
    """The interquartile range of ``model_eager_us``'s timed calls; None: not recorded."""
    best_spread_us: float | None = None
    """The interquartile range of ``best_us``'s timed calls; None: not recorded."""

    @property
    def pct_of_floor(self) -> float | None:
        """Floor over best latency: 100% means the kernel runs at the memory-bandwidth floor."""
        if self.floor_us is None or not self.best_us:
            return None
        return 100.0 * self.floor_us / self.best_us

    @classmethod
    def from_proto(cls, card: forge_pb2.RunCard) -> CardSummary:
        eager = _optional(card, "eager_latency_us")
        model_spread = _optional(card.card, "eager_spread_us")
        return cls(
            card_id=card.card.id, op=card.card.op, kind=card.card.kind, time_share=card.card.time_share,
            call_count=card.card.call_count, optimisable=card.card.optimisable, status=card.status,
            reason=card.reason, audit_class=card.audit_class or "fallback",
            eager_us=eager if eager is not None else (card.card.eager_us or None),
            best_us=_optional(card, "best_latency_us"), speedup=_optional(card, "speedup"),
            floor_us=_optional(card, "floor_us"), best_candidate_id=card.best_candidate_id,
            evaluations=card.evaluations, cost_usd=card.cost.usd, budget=card.budget,
            eager_in_series=eager is not None, model_eager_us=card.card.eager_us or None,
            eager_spread_us=_optional(card, "eager_spread_us") if eager is not None else model_spread,
            model_eager_spread_us=model_spread, best_spread_us=_optional(card, "best_spread_us"),
        )


@dataclass(frozen=True)
class TreeNode:
    """One candidate in a card's revision tree."""

    candidate_id: str
    parent_id: str
    depth: int
    status: str
    latency_us: float | None
    speedup: float | None
    visits: int
    """Evaluations in this candidate's subtree, itself included, failures counted."""
    value: float | None
    """The search's value of the subtree: mean ``ln(eager / latency)`` of its passed evaluations
    (0 is eager speed, positive is faster); None while none passed."""
    description: str
    order: int = 0
    """1 for the first candidate the search expanded the tree with, 2 for the next, ...; 0: unknown."""

    @property
    def slower_than_eager(self) -> bool:
        """Passed its checks but is no faster than eager: correct, yet no reason to ship it."""
        return self.status == "PASSED" and self.speedup is not None and self.speedup <= 1.0


@dataclass(frozen=True)
class CardTree:
    """A card's MCTS revision tree; the root is eager PyTorch (parent id "")."""

    card_id: str
    nodes: tuple[TreeNode, ...]
    best_candidate_id: str

    def node(self, candidate_id: str) -> TreeNode | None:
        return next((n for n in self.nodes if n.candidate_id == candidate_id), None)

    @property
    def best_beats_eager(self) -> bool:
        best = self.node(self.best_candidate_id)
        return best is not None and best.speedup is not None and best.speedup > 1.0

    def best_lineage(self) -> list[str]:
        """Candidate ids from the best candidate up to its first ancestor, best first; empty when
        the best is no faster than eager, since the .cast then keeps eager and there is no lineage
        worth following."""
        if not self.best_beats_eager:
            return []
        parents = {n.candidate_id: n.parent_id for n in self.nodes}
        lineage: list[str] = []
        current = self.best_candidate_id
        while current and current in parents and current not in lineage:
            lineage.append(current)
            current = parents[current]
        return lineage

    @classmethod
    def from_proto(cls, tree: forge_pb2.CardTree) -> CardTree:
        """The forge lists a card's candidates in the order they were proposed, which is the order
        the search expanded the tree in: each node's ``order`` is its place in that list."""
        return cls(
            card_id=tree.card_id, best_candidate_id=tree.best_candidate_id,
            nodes=tuple(
                TreeNode(
                    candidate_id=n.candidate_id, parent_id=n.parent_id, depth=n.depth, status=status_name(n.status),
                    latency_us=_optional(n, "latency_us"), speedup=_optional(n, "speedup"), visits=n.visits,
                    value=_optional(n, "value"), description=n.description, order=order,
                )
                for order, n in enumerate(tree.nodes, 1)
            ),
        )


@dataclass(frozen=True)
class LlmExchange:
    """One prompt and answer, kept for audit."""

    model: str
    prompt: str
    response: str
    prompt_tokens: int
    completion_tokens: int
    usd: float
    latency_s: float
    error: str

    @classmethod
    def from_proto(cls, ex: types_pb2.LlmExchange) -> LlmExchange:
        return cls(model=ex.model, prompt=ex.prompt, response=ex.response, prompt_tokens=ex.cost.prompt_tokens,
                   completion_tokens=ex.cost.completion_tokens, usd=ex.cost.usd, latency_s=ex.latency_s,
                   error=ex.error)


@dataclass(frozen=True)
class CandidateDetail:
    """Everything known about one candidate: its source, its verdict and how it was made."""

    candidate_id: str
    card_id: str
    parent_id: str
    source: str
    description: str
    knobs_json: str
    proposer: str
    status: str
    error_message: str = ""
    log_tail: str = ""
    audit_class: str = ""
    latency_us: float | None = None
    latency_spread_us: float | None = None
    eager_latency_us: float | None = None
    eager_spread_us: float | None = None
    speedup: float | None = None
    floor_us: float | None = None
    rel_l2_error: float | None = None
    max_scaled_error: float | None = None
    compile_s: float = 0.0
    total_s: float = 0.0
    compiler_flags: str = ""
    toolchain: str = ""
    arch: str = ""
    sandbox_id: str = ""
    remeasured: bool = False
    usd: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    exchanges: tuple[LlmExchange, ...] = field(default=())

    @property
    def evaluated(self) -> bool:
        return self.status != "PENDING"

    @classmethod
    def from_proto(cls, cand: forge_pb2.Candidate) -> CandidateDetail:
        result = cand.result
        return cls(
            candidate_id=cand.candidate_id, card_id=cand.card_id, parent_id=cand.parent_id, source=cand.source,
            description=cand.description, knobs_json=cand.knobs_json, proposer=cand.proposer,
            status=status_name(result.status), error_message=result.error_message, log_tail=result.log_tail,
            audit_class=result.audit_class, latency_us=_optional(result, "latency_us"),
            latency_spread_us=_optional(result, "latency_spread_us"),
            eager_latency_us=_optional(result, "eager_latency_us"),
            eager_spread_us=_optional(result, "eager_spread_us"), speedup=_optional(result, "speedup"),
            floor_us=_optional(result, "floor_us"), rel_l2_error=_optional(result, "rel_l2_error"),
            max_scaled_error=_optional(result, "max_scaled_error"), compile_s=result.compile_s,
            total_s=result.total_s, compiler_flags=result.compiler_flags, toolchain=result.toolchain,
            arch=result.arch, sandbox_id=result.sandbox_id, remeasured=result.remeasured, usd=cand.cost.usd,
            prompt_tokens=cand.cost.prompt_tokens, completion_tokens=cand.cost.completion_tokens,
            exchanges=tuple(LlmExchange.from_proto(e) for e in cand.exchanges),
        )
