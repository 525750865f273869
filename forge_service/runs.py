"""Runs: start, execute, resume, cancel and watch, each run in its own directory.

A run captures the model through the capture service, plans which cards to search, searches
each on the sandbox pool with proposals from the agent, then packages the winners and measures
the model end to end. Its state lives only in the run store, so any step can be resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from forge_service.card_pipeline import CardPipeline
from forge_service.card_search import BUDGET_SPENT, NO_PROPOSAL, CardSearch, SearchSettings
from forge_service.clients import AgentClient, CaptureClient, SandboxClient, SandboxPool
from forge_service.config import RunConfig
from forge_service.kernel_cache import KernelCache
from forge_service.local_blobs import take_local_blobs
from forge_service.scheduler import RUNS_ONLY_INSIDE_MODULE_CARD, RefusalFn, not_in_top, plan_cards
from forge_service.store import DB_FILE, CardRow, RunStore, best_candidate
from kernel_forge.capture.v1 import messages_pb2 as capture_pb2
from kforge_domain.blobs import BLOBS_DIR, PROGRAM_SUFFIX, SAFETENSORS_SUFFIX, blob_file_name
from kforge_domain.card import CardSet, OperatorCard
from kforge_domain.device import DeviceInfo
from kforge_domain.result import CandidateResult
from servicekit.errors import FailedPrecondition, KforgeError, NotFound
from servicekit.security import Security

log = logging.getLogger(__name__)

TERMINAL = ("done", "failed", "cancelled")
CAST_FILE = "model.cast"


@dataclass
class ServiceAddresses:
    """Where the forge finds the other services."""

    capture: str
    agent: str
    sandboxes: list[str]
    security: Security | None = None
    #: Services started in this process on loopback: reached in plain text without ``security``,
    #: which is meant for the remote ones.
    embedded: frozenset[str] = frozenset()
    #: The work folder of a capture service started in this process: its blobs are linked from
    #: there (:mod:`forge_service.local_blobs`) rather than streamed.
    local_capture_dir: Path | None = None

    def security_for(self, address: str) -> Security | None:
        """How to reach ``address``: ``security``, unless it is an embedded service."""
        return None if address in self.embedded else self.security


@dataclass
class _Live:
    """In-memory companions of a run that is executing in this process."""

    task: asyncio.Task[None] | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class RunManager:
    """Owns the runs under ``runs_dir``; several runs may execute at once."""

    def __init__(self, runs_dir: Path, services: ServiceAddresses) -> None:
        self.runs_dir = Path(runs_dir).resolve()
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.services = services
        self._stores: dict[str, RunStore] = {}
        self._live: dict[str, _Live] = {}
        self._closing = False
        self.kernel_cache = KernelCache(self.runs_dir)

    # -- queries -------------------------------------------------------------------------------
    def run_ids(self) -> list[str]:
        return sorted(p.parent.name for p in self.runs_dir.glob(f"*/{DB_FILE}"))

    def store(self, run_id: str) -> RunStore:
        if run_id not in self._stores:
            run_dir = self.runs_dir / run_id
            if "/" in run_id or run_id in ("", ".", "..") or not (run_dir / DB_FILE).is_file():
                raise NotFound(f"no run {run_id!r} in {self.runs_dir}")
            self._stores[run_id] = RunStore(run_dir)
        return self._stores[run_id]

    def config(self, run_id: str) -> RunConfig:
        return RunConfig.model_validate_json(self.store(run_id).run_row()["config_json"])

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, config: RunConfig) -> str:
        run_id = new_run_id()
        store = RunStore(self.runs_dir / run_id)
        store.create_run(run_id, config.model_dump_json(), Path(config.model_spec.split(":")[0]).stem)
        self._stores[run_id] = store
        await self._emit(run_id, "status", "run created", status="pending")
        self._launch(run_id)
        return run_id

    async def resume(self, run_id: str) -> None:
        store = self.store(run_id)
        live = self._live.get(run_id)
        if live is not None and live.task is not None and not live.task.done():
            raise FailedPrecondition(f"run {run_id} is already executing")
        if store.run_row()["status"] == "done":
            raise FailedPrecondition(f"run {run_id} is already done")
        await self._emit(run_id, "status", "run resumed", status="pending")
        self._launch(run_id)

    async def cancel(self, run_id: str) -> None:
        self.store(run_id)
        live = self._live.get(run_id)
        if live is None or live.task is None or live.task.done():
            raise FailedPrecondition(f"run {run_id} is not executing")
        live.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await live.task

    async def wait(self, run_id: str) -> str:
        live = self._live.get(run_id)
        if live is not None and live.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await live.task
        return str(self.store(run_id).run_row()["status"])

    async def watch(self, run_id: str, after_seq: int = 0) -> AsyncIterator[Any]:
        """Every event after ``after_seq``, then new ones as they come, until the run stops or
        this manager closes (a watcher then ends its stream instead of reading a closed store)."""
        store = self.store(run_id)
        live = self._live.setdefault(run_id, _Live())
        seq = after_seq
        while not self._closing:
            async with live.changed:
                if self._closing:
                    return
                rows = store.events(seq)
                if not rows:
                    if store.run_row()["status"] in TERMINAL and (live.task is None or live.task.done()):
                        return
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(live.changed.wait(), timeout=1.0)
                    continue
            for row in rows:
                seq = row["seq"]
                yield row

    async def close(self) -> None:
        self._closing = True
        for live in self._live.values():
            if live.task is not None and not live.task.done():
                live.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await live.task
            async with live.changed:
                live.changed.notify_all()
        for store in self._stores.values():
            store.close()
        self.kernel_cache.close()

    # -- execution -----------------------------------------------------------------------------
    def _launch(self, run_id: str) -> None:
        live = self._live.setdefault(run_id, _Live())
        live.task = asyncio.create_task(self._execute(run_id), name=f"run-{run_id}")

    async def _emit(self, run_id: str, kind: str, message: str, *, card_id: str = "", candidate_id: str = "",
                    status: str = "", result: CandidateResult | None = None) -> None:
        store = self.store(run_id)
        status = status or str(store.run_row()["status"])
        store.add_event(kind, message, card_id, candidate_id, status)
        live = self._live.setdefault(run_id, _Live())
        async with live.changed:
            live.changed.notify_all()

    async def _set_status(self, run_id: str, status: str, message: str, error: str = "") -> None:
        self.store(run_id).update_run(status=status, error=error)
        await self._emit(run_id, "status", message, status=status)

    async def _execute(self, run_id: str) -> None:
        config = self.config(run_id)
        try:
            await self._set_status(run_id, "running", "run started")
            if config.time_limit_s is not None:
                async with asyncio.timeout(config.time_limit_s):
                    await self._search(run_id, config)
            else:
                await self._search(run_id, config)
            await self._finish(run_id, config)
            await self._set_status(run_id, "done", "run finished")
        except asyncio.CancelledError:
            await self._set_status(run_id, "cancelled", "run cancelled")
            raise
        except TimeoutError:
            await self._emit(run_id, "log", f"time limit of {config.time_limit_s:g} s reached")
            if not self.store(run_id).evaluation_count():
                await self._emit(run_id, "log", "no candidate was evaluated: the time limit counts from the run's "
                                                "start, capture included; raise --time-limit")
            await self._finish(run_id, config)
            await self._set_status(run_id, "done", "run finished at its time limit")
        except KforgeError as exc:
            await self._set_status(run_id, "failed", f"run failed: {exc}", error=str(exc))
        except grpc.aio.AioRpcError as exc:
            error = f"a service answered {exc.code().name}: {exc.details()}"
            await self._set_status(run_id, "failed", f"run failed: {error}", error=error)
        except Exception as exc:
            log.exception("run %s failed", run_id)
            await self._set_status(run_id, "failed", f"run failed: {type(exc).__name__}: {exc}",
                                   error=f"{type(exc).__name__}: {exc}")

    async def _search(self, run_id: str, config: RunConfig) -> None:
        store = self.store(run_id)
        addresses = config.sandbox_addresses or self.services.sandboxes
        sandboxes = [SandboxClient(a, self.services.security_for(a)) for a in addresses]
        agent = AgentClient(self.services.agent, self.services.security_for(self.services.agent))
        try:
            pool = SandboxPool(sandboxes)
            device = await _first_device(pool, config.backend)
            backend = device.backend
            store.update_run(device_json=json.dumps({"backend": backend, "name": device.name, "arch": device.arch,
                                                     "copy_bandwidth_gbps": device.copy_bandwidth_gbps}))
            cards = await self._capture(run_id, config, backend)
            if not store.cards():
                plans = plan_cards(cards, config, device.copy_bandwidth, proposer_refusal(config, backend))
                store.put_cards([
                    CardRow(p.card.id, p.card.to_json(), p.rank, p.selected, "pending" if p.selected else "skipped",
                            p.reason, p.budget, p.floor_us)
                    for p in plans
                ])
                chosen = [p for p in plans if p.selected]
                await self._emit(run_id, "log", f"{len(chosen)} of {len(plans)} cards selected for search")
            blob_dir = store.capture_dir / BLOBS_DIR
            parallel = config.parallel or pool.size

            async def search(row: CardRow, first_round: int | None, issued: asyncio.Event) -> None:
                """Search ``row``'s card to its budget, or only ``first_round`` evaluations of it;
                ``issued`` is set once it sends no more candidates."""
                card = OperatorCard.from_json(row.card_json)
                store.set_card_status(card.id, "searching")
                round_of = "" if first_round is None else f": a first round of {first_round}"
                share = f"{card.time_share:.1%} of eager time"
                await self._emit(run_id, "card_started", f"searching {card.op} ({share}){round_of}", card_id=card.id)
                blobs = {sha: blob_dir / name for sha, name in _card_blobs(card).items()}
                settings = SearchSettings(
                    budget=first_round or row.budget, parallel=parallel, backend=backend, proposer=config.proposer,
                    api_base=config.api_base, seed=config.seed, run_id=run_id, budget_usd=config.budget_usd,
                    policy=config.search_policy, patience=config.patience, partial=first_round is not None,
                )

                async def emit(kind: str, message: str, **kw: Any) -> None:
                    await self._emit(run_id, kind, message, **kw)

                searcher = CardSearch(card, store, agent, pool, device, blobs, settings, emit, self.kernel_cache,
                                      issued=issued)
                try:
                    await searcher.run()
                except grpc.aio.AioRpcError as exc:
                    reason = card_refusal(exc)
                    if reason is None:
                        raise
                    searcher.stop_reason = reason  # this card ends here; the run goes on with the others
                if first_round is not None and searcher.stop_reason == BUDGET_SPENT and first_round < row.budget:
                    store.set_card_status(card.id, "pending")  # its round is over; the rest of its budget waits
                    return
                store.set_card_status(card.id, "done", searcher.stop_reason)
                await self._emit(run_id, "card_done", f"{card.op}: {searcher.stop_reason}", card_id=card.id)
                if searcher.stop_reason == NO_PROPOSAL and (promoted := promote_next_card(store, config, row)):
                    await self._emit(run_id, "log", "nothing to propose: the next card by eager time takes its place",
                                     card_id=promoted.id)

            async with CardPipeline() as cards_in_turn:
                if config.time_limit_s is not None:
                    await self._first_round(store, parallel, cards_in_turn, search)
                while True:
                    for module, released in release_shadowed_cards(store, config):
                        inner = OperatorCard.from_json(released.card_json).op
                        await self._emit(run_id, "log", f"no passing kernel for the module card {module.op}: "
                                                        f"{inner}, which runs only inside it, is searched after all",
                                         card_id=released.id)
                    row = next((r for r in store.cards()
                                if r.selected and r.status != "done" and r.id not in cards_in_turn.running), None)
                    if row is None:
                        if await cards_in_turn.drain():  # the last card may yet release or promote another
                            continue
                        break
                    await cards_in_turn.start(row.id, functools.partial(search, row, None))
            while (extra_row := grant_spare_budget(store, config)) is not None:
                await self._emit(run_id, "log", f"budget raised to {extra_row.budget}: still improving",
                                 card_id=extra_row.id)
                await search(extra_row, None, asyncio.Event())
        finally:
            await agent.close()
            for client in sandboxes:
                await client.close()

    async def _first_round(self, store: RunStore, parallel: int, cards_in_turn: CardPipeline,
                           search: Callable[[CardRow, int | None, asyncio.Event], Awaitable[None]]) -> None:
        """Under a time limit, give every selected card one round (``parallel`` evaluations) before
        any card gets more: a template's first kernels hold most of what a card gains, and a card
        searched to its budget while the next waits may leave that one none when the limit comes."""
        rounded: set[str] = set()
        while True:
            row = next((r for r in store.cards() if r.selected and r.status != "done" and r.id not in rounded
                        and not store.evaluation_count(r.id)), None)
            if row is None:
                if await cards_in_turn.drain():  # a card that proposed nothing may yet promote another
                    continue
                return
            rounded.add(row.id)
            await cards_in_turn.start(row.id, functools.partial(search, row, min(row.budget, parallel)))

    async def _capture(self, run_id: str, config: RunConfig, backend: str) -> list[OperatorCard]:
        """The run's cards, captured once (a resumed run reuses its capture)."""
        store = self.store(run_id)
        with contextlib.suppress(FileNotFoundError):
            return CardSet.load(store.capture_dir).cards
        client = CaptureClient(self.services.capture, self.services.security_for(self.services.capture))
        try:
            request = capture_pb2.StartCaptureRequest(
                model_spec=config.model_spec, device=backend, grad_mode=config.grad_mode, samples=config.samples,
                sample_budget_bytes=config.sample_budget_bytes, allow_unsampled=True,
                trace_compiled=not config.skip_compile_baseline)

            async def progress(p: capture_pb2.CaptureProgress) -> None:
                await self._emit(run_id, "capture", f"{p.stage}: {p.message}")

            capture_id = await client.capture(request, progress)
            cards, total_eager_us = await client.cards(capture_id)
            blob_dir = store.capture_dir / BLOBS_DIR
            blob_dir.mkdir(parents=True, exist_ok=True)
            wanted = {sha: name for card in cards for sha, name in _card_blobs(card).items()
                      if not (blob_dir / name).exists()}
            if self.services.local_capture_dir is not None:
                await asyncio.to_thread(take_local_blobs, self.services.local_capture_dir, capture_id,
                                        {sha: (name, blob_dir / name) for sha, name in wanted.items()})
            else:
                await client.fetch_blobs(capture_id, {sha: blob_dir / name for sha, name in wanted.items()})
            CardSet(model_spec=config.model_spec, device=backend, grad_mode=config.grad_mode,
                    total_eager_us=total_eager_us, cards=cards).save(store.capture_dir)
            store.update_run(total_eager_us=total_eager_us)
            await self._emit(run_id, "capture", f"captured {len(cards)} cards")
            return cards
        finally:
            await client.close()

    async def _finish(self, run_id: str, config: RunConfig) -> None:
        """Package the winners, measure the model end to end with the .cast applied, and leave the
        run's bundle in its folder for ``packager build``."""
        from forge_service.bundle import export_bundle
        from forge_service.phase_events import phase_events
        from forge_service.report import build_report

        store = self.store(run_id)
        loop = asyncio.get_running_loop()

        def step(message: str) -> None:  # from packaging's worker thread
            asyncio.run_coroutine_threadsafe(self._emit(run_id, "log", message), loop).result()

        await self._emit(run_id, "log", "packaging the best kernels and checking the model end to end")
        with phase_events(step):
            report = await asyncio.to_thread(build_report, store, config)
        store.update_run(report_json=report.model_dump_json())
        try:
            await asyncio.to_thread(export_bundle, store.run_dir)
        except Exception as exc:  # the run and its .cast stand; only `packager build` lacks its input
            await self._emit(run_id, "log", f"no run bundle written: {type(exc).__name__}: {exc}")
        await self._emit(run_id, "run_done", report.summary_line())


def proposer_refusal(config: RunConfig, backend: str) -> RefusalFn | None:
    """What selection asks of the run's proposer before giving a card a slot: the offline
    templates answer from the catalog the agent service proposes from (same code, no network,
    no rendering); an LLM writes for any card, so there is nothing to ask (None)."""
    if config.proposer.strip() != "offline":
        return None
    from agent_service.offline.proposer import offline_refusal

    return functools.partial(offline_refusal, backend=backend)


def promote_next_card(store: RunStore, config: RunConfig, vacated: CardRow) -> CardRow | None:
    """Search the next card by priority in place of ``vacated``, which the proposer has nothing
    for: the next of its own pool (eager or compiled-only)."""
    waiting = not_in_top(config, OperatorCard.from_json(vacated.card_json))
    row = next((r for r in store.cards() if not r.selected and r.reason == waiting), None)
    if row is None:
        return None
    with store.transaction() as db:
        db.execute("UPDATE cards SET selected = 1, status = 'pending', budget = ?, reason = '' WHERE id = ?",
                   (config.budget_per_card, row.id))
    return store.card(row.id)


def release_shadowed_cards(store: RunStore, config: RunConfig) -> list[tuple[OperatorCard, CardRow]]:
    """Return to the queue the cards that selection passed over because they run only inside a
    module card, once that module card's search has ended without a passing kernel: nothing will
    replace their calls. The highest ranked ``max_cards`` of them are selected with the normal
    budget; the rest wait like any card outside the top. Returns (module card, selected row) pairs."""
    rows = store.cards()
    released = []
    for module_row in rows:
        if not module_row.selected or module_row.status != "done":
            continue
        module = OperatorCard.from_json(module_row.card_json)
        if module.kind != "module" or best_candidate(store, module.id) is not None:
            continue
        shadowed = RUNS_ONLY_INSIDE_MODULE_CARD.format(op=module.op, card_id=module.id)
        inner = [r for r in rows if not r.selected and r.reason == shadowed]
        with store.transaction() as db:
            db.executemany("UPDATE cards SET selected = 1, status = 'pending', budget = ?, reason = '' WHERE id = ?",
                           [(config.budget_per_card, r.id) for r in inner[:config.max_cards]])
            db.executemany("UPDATE cards SET reason = ? WHERE id = ?",
                           [(not_in_top(config, OperatorCard.from_json(r.card_json)), r.id)
                            for r in inner[config.max_cards:]])
        released += [(module, store.card(r.id)) for r in inner[:config.max_cards]]
    return released


def grant_spare_budget(store: RunStore, config: RunConfig) -> CardRow | None:
    """Give evaluations that cards left unspent (they converged, or nothing was proposed) to the
    card that still improved when its budget ran out and carries the most expected gain: its time
    share times its remaining distance to the memory-bandwidth floor. Returns that card, or None."""
    rows = [r for r in store.cards() if r.selected]
    spare = config.budget_per_card * min(config.max_cards + config.compiled_slots, len(rows)) - store.evaluation_count()
    if spare <= 0:
        return None
    best_gain, chosen = 0.0, None
    for row in rows:
        if row.status != "done" or row.reason != BUDGET_SPENT:
            continue
        best = best_candidate(store, row.id)
        if best is None or not best[1].latency_us:
            continue
        share = OperatorCard.from_json(row.card_json).time_share
        headroom = 1.0 - (row.floor_us or 0.0) / best[1].latency_us
        if share * headroom > best_gain:
            best_gain, chosen = share * headroom, row
    if chosen is None:
        return None
    extra = min(spare, max(2, config.budget_per_card // 2))
    with store.transaction() as db:
        db.execute("UPDATE cards SET budget = budget + ?, status = 'searching' WHERE id = ?", (extra, chosen.id))
    return store.card(chosen.id)


def _card_blobs(card: OperatorCard) -> dict[str, str]:
    """The card's blobs (sha256 -> file name in a capture directory's blobs folder)."""
    names = {sha: blob_file_name(sha, SAFETENSORS_SUFFIX)
             for s in card.samples for sha in (s.inputs_blob, s.outputs_blob)}
    if card.module_program_blob:
        names[card.module_program_blob] = blob_file_name(card.module_program_blob, PROGRAM_SUFFIX)
    return names


def card_refusal(exc: grpc.aio.AioRpcError) -> str | None:
    """Why a sandbox refused to evaluate a card (``INVALID_ARGUMENT``: it cannot replay the card, e.g.
    a module program holding an op only the user's process defines), or None for a failure of the
    service itself, which ends the run."""
    if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
        return None
    return f"the sandbox cannot evaluate this card: {exc.details()}"


async def _first_device(pool: SandboxPool, backend: str) -> DeviceInfo:
    """The device the run targets: that of the first sandbox serving the requested backend.

    Every sandbox of that backend is admitted with the candidates it takes at once; the others
    are dismissed, since a sandbox refuses candidates for another backend.
    """
    seen = []
    chosen: DeviceInfo | None = None
    for client in pool.clients:
        info = await client.device_info()
        seen.append(f"{client.address}: {info.backend}")
        if chosen is None and backend in ("auto", info.backend):
            chosen = info
        if chosen is not None and info.backend == chosen.backend:
            pool.admit(client, info.candidate_slots)
        else:
            pool.dismiss(client)
    if chosen is None:
        raise FailedPrecondition(f"no sandbox serves backend {backend!r} ({'; '.join(seen)})")
    return chosen
