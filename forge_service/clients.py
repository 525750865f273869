"""Typed clients of the services the forge drives: capture, agent and the sandbox pool.

They speak gRPC, take the agent's and the sandbox's requests as domain objects
(:class:`~kforge_domain.propose_request.ProposeRequest`,
:class:`~kforge_domain.evaluate_request.EvaluateRequest`) and hand back domain objects (a card, a
:class:`~kforge_domain.device.DeviceInfo`, a :class:`Proposal`, a
:class:`~kforge_domain.result.CandidateResult`), converted here by ``servicekit.convert``, so the
search never builds a message; the controller builds only the capture's request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc

from kernel_forge.agent.v1 import messages_pb2 as agent_pb2
from kernel_forge.agent.v1 import service_pb2_grpc as agent_grpc
from kernel_forge.capture.v1 import messages_pb2 as capture_pb2
from kernel_forge.capture.v1 import service_pb2_grpc as capture_grpc
from kernel_forge.common.v1 import types_pb2
from kernel_forge.sandbox.v1 import messages_pb2 as sandbox_pb2
from kernel_forge.sandbox.v1 import service_pb2_grpc as sandbox_grpc
from kforge_domain.blobs import staged_file
from kforge_domain.card import OperatorCard
from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.device import DeviceInfo
from kforge_domain.evaluate_request import EvaluateRequest
from kforge_domain.propose_request import ProposeRequest
from kforge_domain.result import CandidateResult
from servicekit.client import channel
from servicekit.convert import (
    candidate_result_from_proto,
    card_from_proto,
    cost_from_proto,
    device_from_proto,
    evaluate_request_to_proto,
    exchange_from_proto,
    propose_request_to_proto,
)
from servicekit.errors import FailedPrecondition, Unavailable
from servicekit.security import Security

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
BLOB_FETCHES = 4
"""Blobs copied from a capture service at once."""
# Failures that mean "this sandbox is gone", not "this candidate is bad".
LOST_SANDBOX_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN}


class CaptureClient:
    """Runs a capture remotely and copies its cards and blobs into a local capture folder."""

    def __init__(self, address: str, security: Security | None = None) -> None:
        self.address = address
        self._channel = channel(address, security)
        self._stub = capture_grpc.CaptureServiceStub(self._channel)

    async def capture(
        self,
        request: capture_pb2.StartCaptureRequest,
        on_progress: Callable[[capture_pb2.CaptureProgress], Awaitable[None]],
    ) -> str:
        """Run the capture to its end; returns the capture id or raises with the service's error."""
        capture_id = ""
        async for progress in self._stub.StartCapture(request):
            capture_id = progress.capture_id or capture_id
            await on_progress(progress)
            if progress.stage == "failed" or progress.error:
                raise FailedPrecondition(f"capture failed: {progress.error or progress.message}")
        if not capture_id:
            raise FailedPrecondition("capture service returned no capture id")
        return capture_id

    async def cards(self, capture_id: str) -> tuple[list[OperatorCard], float]:
        response = await self._stub.ListCards(capture_pb2.ListCardsRequest(capture_id=capture_id))
        return [card_from_proto(c) for c in response.cards], response.total_eager_us

    async def fetch_blob(self, capture_id: str, sha256: str, dest: Path) -> None:
        """Copy one blob, checking its hash, into ``dest`` (atomically)."""
        digest = hashlib.sha256()

        def absorb(data: bytes) -> None:
            digest.update(data)
            out.write(data)

        # Failed, or stopped with the other fetches: no partial file stays.
        with staged_file(dest) as tmp:
            with tmp.open("wb") as out:
                request = capture_pb2.FetchBlobRequest(capture_id=capture_id, sha256=sha256)
                async for chunk in self._stub.FetchBlob(request):
                    await asyncio.to_thread(absorb, chunk.data)  # hashing and writing leave the loop free
            if digest.hexdigest() != sha256:
                raise FailedPrecondition(f"blob {sha256[:12]} arrived damaged")

    async def fetch_blobs(self, capture_id: str, targets: dict[str, Path]) -> None:
        """Copy each blob (sha256 -> destination), ``BLOB_FETCHES`` at a time: a large model's
        samples are gigabytes, and one stream at a time leaves the cores idle. The first failure
        stops the rest and is raised."""
        pending = iter(targets.items())

        async def worker() -> None:
            for sha256, dest in pending:
                await self.fetch_blob(capture_id, sha256, dest)

        workers = [asyncio.create_task(worker()) for _ in range(min(BLOB_FETCHES, len(targets)))]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def close(self) -> None:
        await self._channel.close()


@dataclass(frozen=True)
class Proposal:
    """The agent's answer for one candidate: a source, or why there is none, and what it cost."""

    source: str | None  # None: nothing proposed
    description: str  # the change, or why nothing was proposed
    knobs: dict[str, Any]
    cost: Cost
    exchanges: tuple[LlmExchange, ...] = ()


def proposal_from_proto(message: agent_pb2.ProposeResponse) -> Proposal:
    """The forge's view of a ``ProposeResponse``."""
    return Proposal(
        source=message.source if message.has_proposal else None,
        description=message.description if message.has_proposal else message.no_proposal_reason,
        knobs=json.loads(message.knobs_json or "{}"), cost=cost_from_proto(message.cost),
        exchanges=tuple(exchange_from_proto(x) for x in message.exchanges),
    )


class AgentClient:
    def __init__(self, address: str, security: Security | None = None) -> None:
        self.address = address
        self._channel = channel(address, security)
        self._stub = agent_grpc.AgentServiceStub(self._channel)

    async def propose(self, request: ProposeRequest) -> Proposal:
        return proposal_from_proto(await self._stub.Propose(propose_request_to_proto(request)))

    async def close(self) -> None:
        await self._channel.close()


class SandboxClient:
    """One sandbox service; remembers which blobs it already holds."""

    def __init__(self, address: str, security: Security | None = None) -> None:
        self.address = address
        self._channel = channel(address, security)
        self._stub = sandbox_grpc.SandboxServiceStub(self._channel)
        self._uploaded: set[str] = set()
        self._upload_lock = asyncio.Lock()

    async def device_info(self) -> DeviceInfo:
        return device_from_proto(await self._stub.GetDeviceInfo(sandbox_pb2.GetDeviceInfoRequest()))

    async def ensure_blobs(self, blobs: dict[str, Path]) -> None:
        """Upload the blobs (sha256 -> local file) the sandbox does not hold yet."""
        async with self._upload_lock:
            wanted = [s for s in blobs if s not in self._uploaded]
            if not wanted:
                return
            missing = (await self._stub.HasBlobs(sandbox_pb2.HasBlobsRequest(sha256=wanted))).missing
            for sha in missing:
                await self._stub.UploadBlob(_chunks(sha, blobs[sha]))
            self._uploaded.update(wanted)

    async def evaluate(self, request: EvaluateRequest) -> CandidateResult:
        return candidate_result_from_proto(await self._stub.Evaluate(evaluate_request_to_proto(request)))

    async def close(self) -> None:
        await self._channel.close()


async def _chunks(sha256: str, path: Path) -> AsyncIterator[types_pb2.BlobChunk]:
    data = await asyncio.to_thread(path.read_bytes)
    for offset in range(0, max(len(data), 1), CHUNK_BYTES):
        yield types_pb2.BlobChunk(sha256=sha256, offset=offset, total_size=len(data),
                                  data=data[offset:offset + CHUNK_BYTES])


class SandboxPool:
    """Evaluates candidates on whichever sandbox has a free place; a sandbox that dies is dropped
    and its in-flight candidates are retried on another one.

    Each sandbox starts with one place; :meth:`admit` gives it as many as it says it takes at once
    (``DeviceInfo.candidate_slots``), and :meth:`dismiss` takes it out of the pool. An address
    given twice is one sandbox (the first client for it is used): it says itself what it takes.
    """

    def __init__(self, clients: list[SandboxClient]) -> None:
        if not clients:
            raise Unavailable("no sandbox service configured")
        by_address: dict[str, SandboxClient] = {}
        for c in clients:
            by_address.setdefault(c.address, c)
        self.clients = list(by_address.values())
        self._idle: asyncio.Queue[SandboxClient] = asyncio.Queue()
        for c in self.clients:
            self._idle.put_nowait(c)
        self._alive = set(self.clients)
        self._places = dict.fromkeys(self.clients, 1)

    @property
    def size(self) -> int:
        """Candidates the live sandboxes take at once."""
        return sum(self._places[c] for c in self._alive)

    def admit(self, client: SandboxClient, candidate_slots: int) -> None:
        """Let ``client`` take ``candidate_slots`` candidates at once (at least one)."""
        wanted = max(1, candidate_slots)
        for _ in range(wanted - self._places[client]):
            self._idle.put_nowait(client)
        self._places[client] = max(wanted, self._places[client])

    def dismiss(self, client: SandboxClient) -> None:
        """Send ``client`` nothing more (it serves another backend)."""
        self._alive.discard(client)

    async def evaluate(
        self,
        request: EvaluateRequest,
        blobs: dict[str, Path],
        on_lost: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> CandidateResult:
        while self._alive:
            client = await self._idle.get()
            if client not in self._alive:
                continue
            try:
                await client.ensure_blobs(blobs)
                result = await client.evaluate(request)
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in LOST_SANDBOX_CODES:
                    self._idle.put_nowait(client)
                    raise
                self._alive.discard(client)
                log.warning("sandbox %s lost (%s); retrying elsewhere", client.address, exc.code().name)
                if on_lost is not None:
                    await on_lost(client.address, exc.details() or exc.code().name)
                continue
            self._idle.put_nowait(client)
            return replace(result, sandbox_id=result.sandbox_id or client.address)
        raise Unavailable("every sandbox service is unreachable")
