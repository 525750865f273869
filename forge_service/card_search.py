"""The per-card search: MCTS (or a loop it is measured against) picks parents, the agent revises
them, the sandboxes judge them.

Every tree operation is written to the run store together with the fact that caused it
(``forge_service.tree_log``), so a resumed card replays its operations into a fresh tree and
continues exactly where it stopped: finished evaluations are never lost nor repeated; a candidate
proposed but not evaluated is evaluated; one whose proposal was lost is proposed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from forge_service.clients import AgentClient, Proposal, SandboxPool
from forge_service.kernel_cache import CachedKernel, KernelCache, searcher_of
from forge_service.parent_policy import DEFAULT_POLICY, pick_parents
from forge_service.store import CandidateRow, RunStore, best_candidate
from forge_service.tree_log import (
    add_child_op,
    ask_op,
    cancel_op,
    card_seed,
    new_card_tree,
    pick_op,
    replay,
    tell_op,
)
from kforge_domain.card import OperatorCard
from kforge_domain.cost import Cost
from kforge_domain.device import DeviceInfo
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from kforge_domain.propose_request import Feedback, ParentCandidate, ProposeRequest, Revision
from kforge_domain.result import CandidateResult

log = logging.getLogger(__name__)

ROOT = 0
BUDGET_SPENT = "budget spent"
DOLLARS_SPENT = "dollar budget spent"
NO_PROPOSAL = "no proposal for this card"


@dataclass(frozen=True)
class SearchSettings:
    budget: int                     # evaluations for this card
    parallel: int                   # candidates in flight
    backend: str
    proposer: str
    api_base: str
    seed: int
    run_id: str
    patience: int = 8               # evaluations without improvement before the card is converged
    max_idle_proposals: int = 4     # consecutive "no proposal" answers before the card stops
    remeasure: bool = True
    budget_usd: float | None = None  # the run's dollar budget for LLM calls
    policy: str = DEFAULT_POLICY    # how parents are picked (forge_service.parent_policy)
    partial: bool = False           # a first round: the card's search goes on later, so its best
                                    # is not offered to the kernel cache as a finished search


EmitFn = Callable[..., Awaitable[None]]


class CardSearch:
    """Searches one card until its budget is spent, it converges, or nothing more is proposed."""

    def __init__(
        self,
        card: OperatorCard,
        store: RunStore,
        agent: AgentClient,
        sandboxes: SandboxPool,
        device: DeviceInfo,
        blobs: dict[str, Path],
        settings: SearchSettings,
        emit: EmitFn,
        cache: KernelCache | None = None,
        issued: asyncio.Event | None = None,
    ) -> None:
        self.card = card
        self.store = store
        self.agent = agent
        self.sandboxes = sandboxes
        self.device = device
        self.blobs = blobs
        self.settings = settings
        self.emit = emit
        self.cache = cache
        self.tree = new_card_tree(settings.seed, card.id, card.eager_us)
        self.node_to_candidate: dict[int, str] = {}
        self._idle_proposals = 0
        self.stop_reason = ""
        # set once the search sends no more candidates (it only finishes those in flight): the
        # next card may start then (forge_service.card_pipeline)
        self.issued = issued or asyncio.Event()
        # The offline proposer answers at once and the same way to the same request: candidates
        # proposed at the same time would be one kernel, so each waits for the one before it and
        # sees its knobs. An LLM's proposals take seconds each and are drawn with their own seed.
        self._proposing = asyncio.Lock() if settings.proposer == "offline" else contextlib.nullcontext()

    # -- replay --------------------------------------------------------------------------------
    def _replay(self) -> tuple[list[CandidateRow], list[int]]:
        """Rebuild the tree from the stored operations.

        Returns the candidates still to finish and the parents an ``ask`` chose that were not
        expanded yet (the process stopped in between), in the order they were chosen.
        """
        replayed = replay(self.card.id, self.tree, self.store.tree_ops(self.card.id))
        self.node_to_candidate.update(replayed.node_to_candidate)
        unfinished = [c for c in self.store.candidates(self.card.id) if c.state in ("proposing", "proposed")]
        return unfinished, replayed.unexpanded

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.issued.set()

    async def _run(self) -> None:
        unfinished, unexpanded = self._replay()
        if (not self.store.candidates(self.card.id) and await self._start_from_cache()) or (
                self._completed_from_cache()):
            self.stop_reason = "complete from the kernel cache"
            return
        in_flight: set[asyncio.Task[None]] = set()
        for row in unfinished:
            in_flight.add(asyncio.create_task(self._finish(row)))
        for parent in unexpanded:
            in_flight.add(asyncio.create_task(self._expand(parent)))
        if self._stale_cache_candidate() and len(self.store.candidates(self.card.id)) == 1 and self.settings.budget > 1:
            # these templates' own first kernel, beside the cached one of other templates
            in_flight.add(asyncio.create_task(self._expand(ROOT)))
        try:
            await self._search(in_flight)
        except BaseException:
            for task in in_flight:  # a failure ends the card: nothing of it keeps running
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
            raise
        if in_flight:
            await asyncio.gather(*in_flight)
        if not self.settings.partial:
            self._remember_best()

    async def _search(self, in_flight: set[asyncio.Task[None]]) -> None:
        """Propose and evaluate until the card should stop; ``in_flight`` holds the tasks still
        running (the first failure of one is raised)."""
        while True:
            done_count = self.store.evaluation_count(self.card.id)
            if self._should_stop(done_count + len(in_flight)):
                self.issued.set()
                break
            free = min(self.settings.parallel - len(in_flight), self.settings.budget - done_count - len(in_flight))
            if free > 0:
                parents = pick_parents(self.settings.policy, self.tree, free)
                logged = ask_op if self.settings.policy == DEFAULT_POLICY else pick_op
                self.store.log_tree_op(self.card.id, *logged(free, parents))
                for parent in parents:
                    in_flight.add(asyncio.create_task(self._expand(parent)))
                if done_count + len(in_flight) >= self.settings.budget:
                    self.issued.set()  # the budget is all sent, unless some come back without a proposal
            if not in_flight:
                self.stop_reason = self.stop_reason or "no node left to expand"
                break
            finished, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            in_flight -= finished
            for task in finished:
                task.result()

    # -- the kernel cache ----------------------------------------------------------------------
    @functools.cached_property
    def _cache_hit(self) -> CachedKernel | None:
        """This card's entry in the kernel cache as the search started: read once, since the
        search writes the card's entry only when it ends and every proposal asks for it."""
        if self.cache is None:
            return None
        return self.cache.lookup(self.card.id, self.device.arch, self.device.toolchain)

    async def _start_from_cache(self) -> bool:
        """Evaluate the cached kernel of this card first; True when nothing more is needed."""
        hit = self._cache_hit
        if hit is None:
            return False
        node = self.tree.add_child(ROOT)
        candidate_id = uuid.uuid4().hex[:12]
        self.node_to_candidate[node] = candidate_id
        self.store.add_candidate(candidate_id, self.card.id, "", node, "cache",
                                 add_child_op(ROOT, node, candidate_id))
        self.store.set_proposal(candidate_id, hit.source, f"best kernel of run {hit.run_id} (kernel cache)",
                                hit.knobs, Cost(), [], self.card.id, tree_op=None)
        await self.emit("log", f"kernel cache hit from run {hit.run_id}", card_id=self.card.id)
        await self._finish(self.store.candidate(candidate_id))
        return self._completed_from_cache()

    def _completed_from_cache(self) -> bool:
        """The first candidate came from a complete earlier search and passed again."""
        rows = self.store.candidates(self.card.id)
        if not rows or rows[0].proposer != "cache":
            return False
        hit = self._cache_hit
        result = self.store.result(rows[0].id)
        return bool(hit and hit.completes_search_for(searcher_of(self.settings.proposer)) and result is not None
                    and result.passed)

    def _stale_cache_candidate(self) -> str | None:
        """The id of this card's candidate taken from the cache, where another searcher (other
        templates, another model) made it."""
        rows = self.store.candidates(self.card.id)
        if not rows or rows[0].proposer != "cache":
            return None
        hit = self._cache_hit
        return rows[0].id if hit is None or hit.proposer != searcher_of(self.settings.proposer) else None

    def _remember_best(self) -> None:
        best = best_candidate(self.store, self.card.id)
        if self.cache is None or best is None:
            return
        row, result = best
        assert result.latency_us is not None  # best_candidate picks only timed candidates
        self.cache.offer(CachedKernel(
            card_id=self.card.id, arch=self.device.arch, toolchain=self.device.toolchain, source=row.source or "",
            description=row.description, knobs=row.knobs, latency_us=result.latency_us, speedup=result.speedup or 0.0,
            search_complete=True, run_id=self.settings.run_id, proposer=searcher_of(self.settings.proposer),
        ))

    def _should_stop(self, committed: int) -> bool:
        """Whether to start no new candidate; sets :attr:`stop_reason` when it says so."""
        if committed >= self.settings.budget:
            self.stop_reason = BUDGET_SPENT
        elif (usd_left := self._usd_left()) is not None and usd_left <= 0.0:
            self.stop_reason = DOLLARS_SPENT
        elif self._idle_proposals >= self.settings.max_idle_proposals:
            self.stop_reason = "no more proposals"
        elif self._nothing_proposed():
            self.stop_reason = NO_PROPOSAL
        elif self._converged():
            self.stop_reason = "converged"
        return bool(self.stop_reason)

    def _usd_left(self) -> float | None:
        """Dollars the run may still spend on LLM calls (None: no dollar budget)."""
        if self.settings.budget_usd is None:
            return None
        return self.settings.budget_usd - self.store.total_cost().usd

    def _nothing_proposed(self) -> bool:
        """Every attempt under the root came back without a proposal."""
        rows = self.store.candidates(self.card.id)
        return bool(rows) and all(r.state == "no_proposal" for r in rows)

    def _converged(self) -> bool:
        """No improvement over the best in the last ``patience`` evaluations (never, with 0)."""
        if self.settings.patience == 0:
            return False
        results = self.store.results(self.card.id)
        rows = [c for c in self.store.candidates(self.card.id) if c.id in results]
        if len(rows) < self.settings.patience * 2:
            return False
        latencies = [_passed_latency(results[c.id]) for c in rows]
        cut = len(latencies) - self.settings.patience
        return min(latencies[cut:]) >= min(latencies[:cut])

    async def _expand(self, parent: int) -> None:
        node = self.tree.add_child(parent)
        candidate_id = uuid.uuid4().hex[:12]
        self.node_to_candidate[node] = candidate_id
        parent_id = self.node_to_candidate.get(parent, "")
        self.store.add_candidate(
            candidate_id, self.card.id, parent_id, node, self.settings.proposer,
            add_child_op(parent, node, candidate_id),
        )
        await self._finish(self.store.candidate(candidate_id))

    async def _finish(self, row: CandidateRow) -> None:
        if row.state == "proposing":
            async with self._proposing:
                proposal = await self.agent.propose(self._propose_request(row))
                self._record_proposal(row, proposal)
            if self.store.candidate(row.id).source is None:
                self._idle_proposals += 1
                self.tree.cancel(row.node_id)
                await self.emit("candidate", f"no proposal: {proposal.description}", card_id=self.card.id,
                                candidate_id=row.id)
                return
            self._idle_proposals = 0
            row = self.store.candidate(row.id)
        assert row.source is not None
        await self._evaluate(row)

    def _record_proposal(self, row: CandidateRow, proposal: Proposal) -> None:
        """Store what the agent proposed for ``row`` (or why it proposed nothing)."""
        self.store.set_proposal(row.id, proposal.source, proposal.description, proposal.knobs, proposal.cost,
                                proposal.exchanges, self.card.id,
                                tree_op=None if proposal.source else cancel_op(row.node_id))

    async def _evaluate(self, row: CandidateRow) -> None:
        """Send ``row``'s source to a sandbox and record its verdict in the store and the tree."""
        request = self._evaluate_request(row)

        async def lost(address: str, why: str) -> None:
            await self.emit("log", f"sandbox {address} lost ({why}); candidate {row.id} retried elsewhere",
                            card_id=self.card.id, candidate_id=row.id)

        result = await self.sandboxes.evaluate(request, self.blobs, on_lost=lost)
        figures = result.figures if result.passed else None
        latency = figures.latency_us if figures else None
        spread = figures.latency_spread_us if figures else None
        self.store.put_result(result, self.card.id, tell_op(row.node_id, result.passed, latency, spread))
        self.tree.tell(row.node_id, result.passed, latency, spread)
        summary = result.status.value + (f" {latency:.2f} µs (x{result.speedup or 0.0:.2f})" if latency else "")
        await self.emit("candidate", f"{row.description or 'candidate'}: {summary}", card_id=self.card.id,
                        candidate_id=row.id, result=result)

    def _evaluate_request(self, row: CandidateRow) -> EvaluateRequest:
        assert row.source is not None
        return EvaluateRequest(
            candidate_id=row.id, card=self.card, source=row.source, backend=self.settings.backend,
            options=EvaluationOptions(remeasure=self.settings.remeasure, best_speedup=self._best_speedup()),
        )

    def _best_speedup(self) -> float:
        """The card's best speedup so far (0 before any candidate passed): the sandbox stops timing a
        candidate clearly below it early and re-measures only one that beats it."""
        return max((r.speedup or 0.0 for r in self.store.results(self.card.id).values() if r.passed), default=0.0)

    def _propose_request(self, row: CandidateRow) -> ProposeRequest:
        """What the agent is told for ``row``: its parent and the parent's lineage, the failed
        siblings (the last one's failure as feedback), every knob set already proposed."""
        results = self.store.results(self.card.id)
        # in flight too, so parallel proposals differ; a cached kernel of other templates leaves its knob
        # set to propose again, rendered by these templates
        stale = self._stale_cache_candidate()
        tried = tuple(o.knobs for o in self.store.candidates(self.card.id)
                      if o.source and o.id != row.id and o.id != stale)
        parent = None
        lineage: list[Revision] = []
        if row.parent_id:
            parent_row = self.store.candidate(row.parent_id)
            parent_result = results.get(parent_row.id)
            latency: float | None = None
            eager: float | None = None
            if parent_result is not None and parent_result.latency_us is not None:  # a timed parent: both set
                latency, eager = parent_result.latency_us, parent_result.eager_latency_us or 0.0
            parent = ParentCandidate(candidate_id=parent_row.id, source=parent_row.source or "",
                                     description=parent_row.description, knobs=parent_row.knobs,
                                     latency_us=latency, eager_latency_us=eager)
            lineage = [self._revision(self.node_to_candidate[node], results)
                       for node in [*self.tree.ancestors(parent_row.node_id), parent_row.node_id]
                       if node in self.node_to_candidate]
        failed = [self._revision(self.node_to_candidate[sibling], results)
                  for sibling in self.tree.failed_siblings(row.node_id) if sibling in self.node_to_candidate]
        usd_left = self._usd_left()
        return ProposeRequest(
            card=self.card, device=self.device, backend=self.settings.backend, proposer=self.settings.proposer,
            api_base=self.settings.api_base, run_id=self.settings.run_id,
            seed=card_seed(self.settings.seed, self.card.id) + row.seq,
            parent=parent, lineage=tuple(lineage), failed_siblings=tuple(failed),
            feedback=Feedback(status=failed[-1].status, error_message=failed[-1].error_message) if failed else None,
            budget_usd_remaining=None if usd_left is None else max(usd_left, 0.0), tried_knobs=tried,
        )

    def _revision(self, candidate_id: str, results: dict[str, CandidateResult]) -> Revision:
        row = self.store.candidate(candidate_id)
        result = results.get(row.id)
        if result is None:
            return Revision(candidate_id=row.id, description=row.description, knobs=row.knobs)
        return Revision(candidate_id=row.id, description=row.description, knobs=row.knobs, status=result.status,
                        error_message=result.error_message, latency_us=result.latency_us)


def _passed_latency(result: CandidateResult) -> float:
    """A result's latency as convergence compares it: a failed or untimed candidate is infinitely slow."""
    return result.latency_us if result.passed and result.latency_us is not None else float("inf")
