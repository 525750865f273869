"""CaptureService over gRPC: a thin layer over :func:`capture_model` and the workspace."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

import grpc

from capture_service.capture import capture_model
from capture_service.errors import CaptureError, InvalidModelSpec
from capture_service.options import DEFAULT_BUDGET_BYTES, DEFAULT_SAMPLES, CaptureOptions
from capture_service.progress import CaptureProgress
from capture_service.workspace import CaptureWorkspace
from kernel_forge.capture.v1 import messages_pb2 as capture_pb2
from kernel_forge.capture.v1 import service_pb2_grpc as capture_grpc
from kernel_forge.common.v1 import types_pb2
from kforge_domain.card import CardSet
from servicekit.convert import card_to_proto

CHUNK_BYTES = 1 << 20
_FINISHED = object()


def options_from_request(request: capture_pb2.StartCaptureRequest) -> CaptureOptions:
    """Unset proto fields (empty, 0) take the defaults: cpu, inference, 2 samples, 512 MiB."""
    return CaptureOptions(
        device=request.device or "cpu",
        grad_mode=request.grad_mode or "inference",
        samples=request.samples or DEFAULT_SAMPLES,
        budget_bytes=request.sample_budget_bytes or DEFAULT_BUDGET_BYTES,
        allow_unsampled=request.allow_unsampled,
        trace_compiled=request.trace_compiled,
    ).validated()


def card_message(card_set: CardSet) -> capture_pb2.ListCardsResponse:
    return capture_pb2.ListCardsResponse(
        cards=[card_to_proto(c) for c in card_set.cards],
        total_eager_us=card_set.total_eager_us,
    )


class CaptureServicer(capture_grpc.CaptureServiceServicer):
    """Each StartCapture runs in its own child process; its progress streams back as it comes."""

    def __init__(self, workspace: CaptureWorkspace) -> None:
        self.workspace = workspace

    async def StartCapture(
        self, request: capture_pb2.StartCaptureRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[capture_pb2.CaptureProgress]:
        if not request.model_spec:
            raise InvalidModelSpec("model_spec is empty")
        options = options_from_request(request)
        capture_id, out_dir = self.workspace.new_capture()
        loop = asyncio.get_running_loop()
        updates: asyncio.Queue[object] = asyncio.Queue()
        cancel = threading.Event()

        def on_progress(update: CaptureProgress) -> None:
            loop.call_soon_threadsafe(updates.put_nowait, update)

        def run() -> CardSet:
            try:
                return capture_model(
                    request.model_spec, options.device, options.grad_mode, options.samples, options.budget_bytes,
                    out_dir, on_progress, cancel=cancel, allow_unsampled=options.allow_unsampled,
                    trace_compiled=options.trace_compiled,
                )
            finally:
                loop.call_soon_threadsafe(updates.put_nowait, _FINISHED)

        self.workspace.running.add(capture_id)
        task = asyncio.ensure_future(asyncio.to_thread(run))
        try:
            yield capture_pb2.CaptureProgress(capture_id=capture_id, stage="loading", message="capture started")
            while (update := await updates.get()) is not _FINISHED:
                assert isinstance(update, CaptureProgress)
                if update.stage not in ("done", "failed"):
                    yield _progress_message(capture_id, update)
            try:
                card_set = await task
            except CaptureError as exc:
                yield capture_pb2.CaptureProgress(
                    capture_id=capture_id, stage="failed", message=str(exc), error=str(exc), done=True, fraction=1.0
                )
                raise
            yield capture_pb2.CaptureProgress(
                capture_id=capture_id, stage="done", message=f"captured {len(card_set.cards)} cards",
                fraction=1.0, done=True, n_cards=len(card_set.cards),
            )
        finally:
            cancel.set()
            with contextlib.suppress(BaseException):
                await task
            self.workspace.running.discard(capture_id)

    async def ListCards(
        self, request: capture_pb2.ListCardsRequest, context: grpc.aio.ServicerContext
    ) -> capture_pb2.ListCardsResponse:
        card_set = await asyncio.to_thread(self.workspace.card_set, request.capture_id)
        return card_message(card_set)

    async def FetchBlob(
        self, request: capture_pb2.FetchBlobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[types_pb2.BlobChunk]:
        path = self.workspace.blob_path(request.capture_id, request.sha256)
        total = path.stat().st_size
        with path.open("rb") as blob:
            offset = 0
            while True:
                data = await asyncio.to_thread(blob.read, CHUNK_BYTES)
                if data or offset == 0:
                    yield types_pb2.BlobChunk(sha256=request.sha256, offset=offset, total_size=total, data=data)
                offset += len(data)
                if len(data) < CHUNK_BYTES:
                    break

def _progress_message(capture_id: str, update: CaptureProgress) -> capture_pb2.CaptureProgress:
    return capture_pb2.CaptureProgress(
        capture_id=capture_id, stage=update.stage, message=update.message, fraction=update.fraction,
        n_cards=update.n_cards,
    )
