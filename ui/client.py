"""A blocking client of the forge service that hands back the dashboard's plain data.

Every failure becomes a :class:`ForgeError` whose message names the address and the problem,
so a page can show it instead of a traceback.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc

from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from kernel_forge.forge.v1 import service_pb2_grpc as forge_grpc
from servicekit.errors import KforgeError
from ui.connection import ForgeTarget, blocking_channel, call_metadata
from ui.models import CandidateDetail, CardSummary, CardTree, EndToEnd, RunEvent, RunSummary

DEFAULT_TIMEOUT_S = 10.0
EXPORT_TIMEOUT_S = 120.0
#: WatchRun replays a run's events at once and then follows it: a pause this long means the
#: replay is over and the rest would be waiting for the live run.
EVENTS_IDLE_S = 0.5
T = TypeVar("T")


class ForgeError(Exception):
    """A call to the forge service failed; ``code`` says how (UNAVAILABLE: the service is down)."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.UNKNOWN) -> None:
        super().__init__(message)
        self.code = code

    @property
    def unavailable(self) -> bool:
        return self.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class ForgeClient:
    """The forge's RPCs the dashboard uses, one method each."""

    def __init__(self, target: ForgeTarget, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.target = target
        self.timeout_s = timeout_s
        try:
            self._channel = blocking_channel(target)
        except KforgeError as exc:
            raise ForgeError(str(exc), exc.code) from exc
        self._stub = forge_grpc.ForgeServiceStub(self._channel)
        self._metadata = call_metadata(target)

    @property
    def address(self) -> str:
        return self.target.address

    def close(self) -> None:
        self._channel.close()

    def _call(self, what: str, rpc: Callable[..., T], request: object, timeout_s: float | None = None) -> T:
        try:
            return rpc(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _forge_error(self.address, what, exc) from exc

    def list_runs(self) -> list[RunSummary]:
        """Every run, newest first."""
        response = self._call("list runs", self._stub.ListRuns, forge_pb2.ListRunsRequest())
        runs = [RunSummary.from_proto(r) for r in response.runs]
        return sorted(runs, key=lambda r: r.created_at, reverse=True)

    def get_run(self, run_id: str) -> RunSummary:
        return RunSummary.from_proto(self._call(f"read run {run_id}", self._stub.GetRun,
                                                forge_pb2.GetRunRequest(run_id=run_id)))

    def list_cards(self, run_id: str) -> list[CardSummary]:
        """The run's cards, those carrying the most eager time first."""
        response = self._call(f"list the cards of run {run_id}", self._stub.ListCards,
                              forge_pb2.ListRunCardsRequest(run_id=run_id))
        cards = [CardSummary.from_proto(c) for c in response.cards]
        return sorted(cards, key=lambda c: c.time_share, reverse=True)

    def card_tree(self, run_id: str, card_id: str) -> CardTree:
        return CardTree.from_proto(self._call(f"read the tree of card {card_id}", self._stub.GetCardTree,
                                              forge_pb2.GetCardTreeRequest(run_id=run_id, card_id=card_id)))

    def candidate(self, run_id: str, candidate_id: str) -> CandidateDetail:
        return CandidateDetail.from_proto(self._call(
            f"read candidate {candidate_id}", self._stub.GetCandidate,
            forge_pb2.GetCandidateRequest(run_id=run_id, candidate_id=candidate_id)))

    def report_markdown(self, run_id: str) -> str:
        return self._call(f"read the report of run {run_id}", self._stub.GetReport,
                          forge_pb2.GetReportRequest(run_id=run_id)).markdown

    def end_to_end(self, run_id: str) -> EndToEnd:
        report = self._call(f"read the report of run {run_id}", self._stub.GetReport,
                            forge_pb2.GetReportRequest(run_id=run_id))
        return EndToEnd.from_report(json.loads(report.json) if report.json else {})

    def run_events(self, run_id: str, idle_s: float = EVENTS_IDLE_S) -> list[RunEvent]:
        """Every event of the run so far, oldest first: WatchRun read until it ends (a finished
        run) or falls quiet for ``idle_s`` (a live one, which it would otherwise follow)."""
        call = self._stub.WatchRun(forge_pb2.WatchRunRequest(run_id=run_id), timeout=self.timeout_s,
                                   metadata=self._metadata)
        try:
            return [RunEvent.from_proto(e) for e in _until_quiet(call, idle_s)]
        except grpc.RpcError as exc:
            raise _forge_error(self.address, f"read the events of run {run_id}", exc) from exc

    def start_run(self, config: forge_pb2.RunConfig) -> RunSummary:
        return RunSummary.from_proto(self._call("start a run", self._stub.StartRun,
                                                forge_pb2.StartRunRequest(config=config)))

    def cancel_run(self, run_id: str) -> RunSummary:
        return RunSummary.from_proto(self._call(f"cancel run {run_id}", self._stub.CancelRun,
                                                forge_pb2.CancelRunRequest(run_id=run_id)))

    def export_cast(self, run_id: str) -> bytes:
        """The run's .cast file, reassembled from its chunks."""
        try:
            chunks = self._stub.ExportCast(forge_pb2.ExportCastRequest(run_id=run_id), timeout=EXPORT_TIMEOUT_S,
                                           metadata=self._metadata)
            data = bytearray()
            total = 0
            for chunk in chunks:
                if chunk.offset != len(data):
                    raise ForgeError(f"the .cast of run {run_id} arrived out of order (offset {chunk.offset})")
                data += chunk.data
                total = chunk.total_size
        except grpc.RpcError as exc:
            raise _forge_error(self.address, f"export the .cast of run {run_id}", exc) from exc
        if len(data) != total:
            raise ForgeError(f"the .cast of run {run_id} arrived incomplete ({len(data)} of {total} bytes)")
        return bytes(data)


_END = object()


def _until_quiet(call: Iterator[T], idle_s: float) -> Iterator[T]:
    """The stream's messages until it ends or none arrives for ``idle_s``; then it is cancelled.

    The stream is read on a thread of its own because a blocking gRPC stream offers no read with
    a timeout. A deadline that cuts a followed stream short ends it as quietly as its own end.
    """
    arrived: queue.Queue[object] = queue.Queue()

    def pump() -> None:
        try:
            for message in call:
                arrived.put(message)
        except grpc.RpcError as exc:
            arrived.put(exc)
        arrived.put(_END)

    threading.Thread(target=pump, name="forge-stream", daemon=True).start()
    while True:
        try:
            item = arrived.get(timeout=idle_s)
        except queue.Empty:
            call.cancel()  # type: ignore[attr-defined]
            return
        if item is _END:
            return
        if isinstance(item, grpc.RpcError):
            if isinstance(item, grpc.Call) and item.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return
            raise item
        yield item  # type: ignore[misc]


def _forge_error(address: str, what: str, exc: grpc.RpcError) -> ForgeError:
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (exc.details() if isinstance(exc, grpc.Call) else "") or str(exc)
    if code == grpc.StatusCode.UNAVAILABLE:
        return ForgeError(f"the forge service at {address} is not reachable ({details})", code)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ForgeError(f"the forge service at {address} did not answer in time to {what}", code)
    return ForgeError(f"could not {what}: {code.name}: {details}", code)
