"""SandboxService over gRPC: converts messages and delegates to the evaluator and blob store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator

import grpc

from gpu_sandbox_service.blobs import BlobStore, check_sha256
from gpu_sandbox_service.evaluator import Evaluator
from kernel_forge.common.v1 import types_pb2
from kernel_forge.sandbox.v1 import messages_pb2, service_pb2_grpc
from servicekit.auth import client_identity
from servicekit.convert import candidate_result_to_proto, device_to_proto, evaluate_request_from_proto
from servicekit.errors import InvalidArgument
from servicekit.limits import ClientLimiter


class SandboxServicer(service_pb2_grpc.SandboxServiceServicer):
    """Thin: every decision is the evaluator's."""

    def __init__(self, evaluator: Evaluator, blobs: BlobStore, limiter: ClientLimiter | None = None) -> None:
        self.evaluator = evaluator
        self.blobs = blobs
        self.limiter = limiter or ClientLimiter(max_concurrent=8, max_queue=256, name="sandbox_evaluations")

    async def GetDeviceInfo(self, request: messages_pb2.GetDeviceInfoRequest,
                            context: grpc.aio.ServicerContext) -> types_pb2.DeviceInfo:
        return device_to_proto(await self.evaluator.device_info())

    async def UploadBlob(self, request_iterator: AsyncIterable[types_pb2.BlobChunk],
                         context: grpc.aio.ServicerContext) -> messages_pb2.UploadBlobResponse:
        chunks = aiter(request_iterator)
        first = await anext(chunks, None)
        if first is None:
            raise InvalidArgument("UploadBlob received no chunks")
        sha256 = check_sha256(first.sha256)

        async def data() -> AsyncIterator[bytes]:
            expected = 0
            chunk: types_pb2.BlobChunk | None = first
            while chunk is not None:
                if chunk.sha256 not in ("", sha256):
                    raise InvalidArgument(f"chunk of blob {chunk.sha256} inside the upload of {sha256}")
                if chunk.offset != expected:
                    raise InvalidArgument(f"chunk at offset {chunk.offset}, expected {expected}")
                expected += len(chunk.data)
                yield chunk.data
                chunk = await anext(chunks, None)
            if first.total_size and expected != first.total_size:
                raise InvalidArgument(f"blob {sha256}: received {expected} bytes of {first.total_size}")

        size = await self.blobs.put_stream(sha256, data())
        return messages_pb2.UploadBlobResponse(sha256=sha256, size=size)

    async def HasBlobs(self, request: messages_pb2.HasBlobsRequest,
                       context: grpc.aio.ServicerContext) -> messages_pb2.HasBlobsResponse:
        for digest in request.sha256:
            check_sha256(digest)
        return messages_pb2.HasBlobsResponse(missing=self.blobs.missing(list(request.sha256)))

    async def Evaluate(self, request: messages_pb2.EvaluateRequest,
                       context: grpc.aio.ServicerContext) -> types_pb2.CandidateResult:
        domain_request = evaluate_request_from_proto(request)
        async with self.limiter(client_identity(context)):
            result = await self.evaluator.evaluate(domain_request)
        return candidate_result_to_proto(result)

    async def EvaluateStream(self, request_iterator: AsyncIterable[messages_pb2.EvaluateRequest],
                             context: grpc.aio.ServicerContext) -> AsyncIterator[types_pb2.CandidateResult]:
        """Evaluates requests as they arrive, concurrently; results come back as they finish."""
        client = client_identity(context)
        finished: asyncio.Queue[types_pb2.CandidateResult | BaseException | None] = asyncio.Queue()
        running: list[asyncio.Task[None]] = []

        async def one(message: messages_pb2.EvaluateRequest) -> None:
            try:
                domain_request = evaluate_request_from_proto(message)
                async with self.limiter(client):
                    await finished.put(candidate_result_to_proto(await self.evaluator.evaluate(domain_request)))
            except Exception as exc:
                await finished.put(exc)

        async def feed() -> None:
            try:
                async for message in request_iterator:
                    running.append(asyncio.ensure_future(one(message)))
                await asyncio.gather(*running)
            except Exception as exc:
                await finished.put(exc)
            await finished.put(None)

        feeder = asyncio.ensure_future(feed())
        try:
            while (item := await finished.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            for task in [feeder, *running]:
                task.cancel()
