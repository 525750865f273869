"""ForgeService over gRPC: converts messages, and delegates to :class:`RunManager` (runs) and
:mod:`forge_service.queries` (what a stored run holds)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from google.protobuf.message import Message

from forge_service import queries
from forge_service.config import RunConfig
from forge_service.runs import CAST_FILE, RunManager
from forge_service.store import RunStore
from kernel_forge.common.v1 import types_pb2
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from kernel_forge.forge.v1 import service_pb2_grpc as forge_grpc
from kforge_domain.blobs import blob_digest
from servicekit.convert import (
    candidate_result_to_proto,
    card_to_proto,
    cost_to_proto,
    exchange_to_proto,
    status_to_proto,
)
from servicekit.errors import FailedPrecondition

CHUNK_BYTES = 1 << 20


def run_message(manager: RunManager, run_id: str) -> forge_pb2.Run:
    """The Run message of a stored run: status, progress against budget, cost, best speedup."""
    run = queries.run_summary(manager.store(run_id))
    msg = forge_pb2.Run(
        run_id=run.run_id, config=run.config.to_proto(), status=run.status, error=run.error,
        created_at=run.created_at, updated_at=run.updated_at, cards_total=run.cards_total,
        cards_done=run.cards_done, evaluations_done=run.evaluations_done, evaluations_budget=run.evaluations_budget,
        cost=cost_to_proto(run.cost), run_dir=run.run_dir, model_name=run.model_name,
    )
    if run.best_e2e_speedup is not None:
        msg.best_e2e_speedup = run.best_e2e_speedup
    return msg


def run_cards(store: RunStore) -> list[forge_pb2.RunCard]:
    out = []
    for card in queries.card_summaries(store):
        msg = forge_pb2.RunCard(
            card=card_to_proto(card.card), status=card.status, reason=card.reason, evaluations=card.evaluations,
            cost=cost_to_proto(card.cost), audit_class=card.audit_class, budget=card.budget,
        )
        _set_present(msg, floor_us=card.floor_us, best_candidate_id=card.best_candidate_id,
                     best_latency_us=card.best_latency_us, eager_latency_us=card.eager_latency_us,
                     eager_spread_us=card.eager_spread_us, best_spread_us=card.best_spread_us,
                     speedup=card.speedup)
        out.append(msg)
    return out


def card_tree_message(tree: queries.CardTreeView) -> forge_pb2.CardTree:
    msg = forge_pb2.CardTree(card_id=tree.card_id)
    for node in tree.nodes:
        node_msg = forge_pb2.TreeNode(candidate_id=node.candidate_id, parent_id=node.parent_id, depth=node.depth,
                                      description=node.description)
        _set_present(node_msg, visits=node.visits, value=node.value,
                     status=status_to_proto(node.status) if node.status is not None else None,
                     latency_us=node.latency_us, speedup=node.speedup)
        msg.nodes.append(node_msg)
    _set_present(msg, best_candidate_id=tree.best_candidate_id)
    return msg


def candidate_message(detail: queries.CandidateDetail) -> forge_pb2.Candidate:
    cand = detail.row
    msg = forge_pb2.Candidate(
        candidate_id=cand.id, card_id=cand.card_id, parent_id=cand.parent_id, source=cand.source or "",
        description=cand.description, knobs_json=json.dumps(cand.knobs, sort_keys=True), proposer=cand.proposer,
        exchanges=[exchange_to_proto(x) for x in detail.exchanges], cost=cost_to_proto(cand.cost),
    )
    if detail.result is not None:
        msg.result.CopyFrom(candidate_result_to_proto(detail.result))
    return msg


def _set_present(msg: Message, **fields: object) -> None:
    """Set the fields whose value is known; an unknown one stays unset (absent, for optional fields)."""
    for name, value in fields.items():
        if value is not None:
            setattr(msg, name, value)


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
                    event.result.CopyFrom(candidate_result_to_proto(result))
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
        return card_tree_message(queries.card_tree(self.manager.store(request.run_id), request.card_id))

    async def GetCandidate(self, request: forge_pb2.GetCandidateRequest, context: grpc.aio.ServicerContext
                           ) -> forge_pb2.Candidate:
        return candidate_message(queries.candidate_detail(self.manager.store(request.run_id), request.candidate_id))

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
