"""ForgeService over gRPC: converts messages and delegates to :class:`RunManager`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from google.protobuf import json_format

from forge_service.config import RunConfig
from forge_service.runs import CAST_FILE, RunManager
from forge_service.store import RunStore, audit_class, best_candidate
from forge_service.tree_log import TreeLogError, candidate_nodes
from kernel_forge.common.v1 import types_pb2
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from kernel_forge.forge.v1 import service_pb2_grpc as forge_grpc
from kforge_domain.blobs import blob_digest
from kforge_domain.card import OperatorCard
from servicekit.convert import card_to_proto
from servicekit.errors import FailedPrecondition, NotFound

CHUNK_BYTES = 1 << 20


def run_message(manager: RunManager, run_id: str) -> forge_pb2.Run:
    """The Run message of a stored run: status, progress against budget, cost, best speedup."""
    store = manager.store(run_id)
    row = store.run_row()
    config = RunConfig.model_validate_json(row["config_json"])
    cards = store.cards()
    selected = [c for c in cards if c.selected]
    msg = forge_pb2.Run(
        run_id=row["id"], config=config.to_proto(), status=row["status"], error=row["error"],
        created_at=row["created_at"], updated_at=row["updated_at"], cards_total=len(selected),
        cards_done=sum(c.status == "done" for c in selected), evaluations_done=store.evaluation_count(),
        evaluations_budget=sum(c.budget for c in selected), cost=store.total_cost(), run_dir=str(store.run_dir),
        model_name=row["model_name"],
    )
    if row["report_json"]:
        e2e = json.loads(row["report_json"]).get("end_to_end") or {}
        if e2e.get("cast_speedup") is not None:
            msg.best_e2e_speedup = e2e["cast_speedup"]
    return msg


def run_cards(store: RunStore) -> list[forge_pb2.RunCard]:
    out = []
    for row in store.cards():
        msg = forge_pb2.RunCard(
            card=card_to_proto(OperatorCard.from_json(row.card_json)),
            status=row.status, reason=row.reason, evaluations=store.evaluation_count(row.id),
            cost=store.total_cost(row.id), audit_class="fallback", budget=row.budget,
        )
        if row.floor_us is not None:
            msg.floor_us = row.floor_us
        best = best_candidate(store, row.id)
        if best is not None:
            cand, result = best
            msg.best_candidate_id = cand.id
            msg.best_latency_us = result.latency_us
            msg.eager_latency_us = result.eager_latency_us
            msg.speedup = result.speedup
            msg.audit_class = audit_class(result)
        out.append(msg)
    return out


class ForgeServicer(forge_grpc.ForgeServiceServicer):
    def __init__(self, manager: RunManager) -> None:
        self.manager = manager

    async def StartRun(self, request: forge_pb2.StartRunRequest, context: grpc.aio.ServicerContext) -> forge_pb2.Run:
        config = RunConfig.from_proto(request.config)
        run_id = await self.manager.start(config)
        return run_message(self.manager, run_id)

    async def WatchRun(
        self, request: forge_pb2.WatchRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[forge_pb2.RunEvent]:
        async for row in self.manager.watch(request.run_id, request.after_seq):
            event = forge_pb2.RunEvent(
                run_id=request.run_id, seq=row["seq"], timestamp=row["ts"], kind=row["kind"], message=row["message"],
                card_id=row["card_id"], candidate_id=row["candidate_id"], status=row["status"],
            )
            if row["candidate_id"]:
                result = self.manager.store(request.run_id).result(row["candidate_id"])
                if result is not None:
                    event.result.CopyFrom(result)
            yield event

    async def ListRuns(self, request: forge_pb2.ListRunsRequest, context: grpc.aio.ServicerContext
                       ) -> forge_pb2.ListRunsResponse:
        runs = []
        for run_id in self.manager.run_ids():
            try:
                runs.append(run_message(self.manager, run_id))
            except LookupError:
                continue
        return forge_pb2.ListRunsResponse(runs=runs)

    async def GetRun(self, request: forge_pb2.GetRunRequest, context: grpc.aio.ServicerContext) -> forge_pb2.Run:
        return run_message(self.manager, request.run_id)

    async def CancelRun(self, request: forge_pb2.CancelRunRequest, context: grpc.aio.ServicerContext
                        ) -> forge_pb2.Run:
        await self.manager.cancel(request.run_id)
        return run_message(self.manager, request.run_id)

    async def ResumeRun(self, request: forge_pb2.ResumeRunRequest, context: grpc.aio.ServicerContext
                        ) -> forge_pb2.Run:
        await self.manager.resume(request.run_id)
        return run_message(self.manager, request.run_id)

    async def ListCards(self, request: forge_pb2.ListRunCardsRequest, context: grpc.aio.ServicerContext
                        ) -> forge_pb2.ListRunCardsResponse:
        return forge_pb2.ListRunCardsResponse(cards=run_cards(self.manager.store(request.run_id)))

    async def GetCardTree(self, request: forge_pb2.GetCardTreeRequest, context: grpc.aio.ServicerContext
                          ) -> forge_pb2.CardTree:
        store = self.manager.store(request.run_id)
        if request.card_id not in {c.id for c in store.cards()}:
            raise NotFound(f"run {request.run_id} has no card {request.card_id!r}")
        results = store.results(request.card_id)
        candidates = store.candidates(request.card_id)
        seed = RunConfig.model_validate_json(store.run_row()["config_json"]).seed
        try:
            views = candidate_nodes(store, request.card_id, seed)
        except TreeLogError as exc:
            raise FailedPrecondition(f"run {request.run_id}: {exc}") from exc
        depth: dict[str, int] = {}
        tree = forge_pb2.CardTree(card_id=request.card_id)
        for cand in candidates:
            depth[cand.id] = depth.get(cand.parent_id, 0) + 1 if cand.parent_id else 1
            node = forge_pb2.TreeNode(candidate_id=cand.id, parent_id=cand.parent_id, depth=depth[cand.id],
                                      description=cand.description)
            if (view := views.get(cand.id)) is not None:
                node.visits = view.visits
                if view.value is not None:
                    node.value = view.value
            result = results.get(cand.id)
            if result is not None:
                node.status = result.status
                if result.HasField("latency_us"):
                    node.latency_us = result.latency_us
                if result.HasField("speedup"):
                    node.speedup = result.speedup
            tree.nodes.append(node)
        best = best_candidate(store, request.card_id)
        if best is not None:
            tree.best_candidate_id = best[0].id
        return tree

    async def GetCandidate(self, request: forge_pb2.GetCandidateRequest, context: grpc.aio.ServicerContext
                           ) -> forge_pb2.Candidate:
        store = self.manager.store(request.run_id)
        try:
            cand = store.candidate(request.candidate_id)
        except LookupError as exc:
            raise NotFound(str(exc)) from exc
        msg = forge_pb2.Candidate(
            candidate_id=cand.id, card_id=cand.card_id, parent_id=cand.parent_id, source=cand.source or "",
            description=cand.description, knobs_json=json.dumps(cand.knobs, sort_keys=True), proposer=cand.proposer,
            exchanges=store.llm_calls(cand.id), cost=json_format.ParseDict(cand.cost, types_pb2.Cost()),
        )
        result = store.result(cand.id)
        if result is not None:
            msg.result.CopyFrom(result)
        return msg

    async def ExportCast(self, request: forge_pb2.ExportCastRequest, context: grpc.aio.ServicerContext
                         ) -> AsyncIterator[types_pb2.BlobChunk]:
        from forge_service.packaging import write_cast

        store = self.manager.store(request.run_id)
        path = Path(store.run_dir) / CAST_FILE
        if request.HasField("min_speedup"):
            path = path.with_name(f"model-min{request.min_speedup:g}.cast")
            write_cast(store, request.min_speedup, path)
        if not path.is_file():
            raise FailedPrecondition(f"run {request.run_id} has no .cast yet")
        data = path.read_bytes()
        sha = blob_digest(data)
        for offset in range(0, max(len(data), 1), CHUNK_BYTES):
            yield types_pb2.BlobChunk(sha256=sha, offset=offset, total_size=len(data),
                                      data=data[offset:offset + CHUNK_BYTES])

    async def GetReport(self, request: forge_pb2.GetReportRequest, context: grpc.aio.ServicerContext
                        ) -> forge_pb2.Report:
        from forge_service.report import RunReport

        row = self.manager.store(request.run_id).run_row()
        if not row["report_json"]:
            raise FailedPrecondition(f"run {request.run_id} has no report yet (status {row['status']})")
        report = RunReport.model_validate_json(row["report_json"])
        return forge_pb2.Report(run_id=request.run_id, json=row["report_json"], markdown=report.markdown())
