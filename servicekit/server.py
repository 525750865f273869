"""Server construction: every service gets health, reflection and domain-error mapping.

``create_server`` is separate from serving so tests bind port 0 and learn the port.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from servicekit.errors import KforgeError
from servicekit.security import Security

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


class DomainErrorInterceptor(grpc.aio.ServerInterceptor):
    """Turns a raised :class:`KforgeError` into its status code and message."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if handler.unary_unary:
            return handler._replace(unary_unary=_wrap_unary(handler.unary_unary))
        if handler.stream_unary:
            return handler._replace(stream_unary=_wrap_unary(handler.stream_unary))
        if handler.unary_stream:
            return handler._replace(unary_stream=_wrap_stream(handler.unary_stream))
        if handler.stream_stream:
            return handler._replace(stream_stream=_wrap_stream(handler.stream_stream))
        return handler


def _wrap_unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await behavior(request, context)
        except KforgeError as exc:
            await context.abort(exc.code, str(exc))

    return wrapped


def _wrap_stream(behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            result = behavior(request, context)
            if inspect.isasyncgen(result):
                async for item in result:
                    yield item
            else:
                await result
        except KforgeError as exc:
            await context.abort(exc.code, str(exc))

    return wrapped


@dataclass(frozen=True)
class ServiceBinding:
    """One servicer and how to register it (``add_XServicer_to_server``, full service name)."""

    servicer: object
    register: Callable[[Any, grpc.aio.Server], None]
    full_name: str


@dataclass
class BoundServer:
    server: grpc.aio.Server
    port: int
    address: str
    health: health.aio.HealthServicer

    async def stop(self, grace_s: float = 2.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)


async def create_server(
    bindings: Sequence[ServiceBinding],
    address: str = "127.0.0.1:0",
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    credentials: grpc.ServerCredentials | None = None,
    security: Security | None = None,
) -> BoundServer:
    """Build and start a grpc.aio server with health checking and reflection on ``address``."""
    server = grpc.aio.server(
        interceptors=[*interceptors, DomainErrorInterceptor()], options=CHANNEL_OPTIONS
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for binding in bindings:
        binding.register(binding.servicer, server)
    names = [b.full_name for b in bindings]
    reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    if credentials is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, credentials)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    for name in [*names, ""]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    host = address.rsplit(":", 1)[0]
    log.info("serving %s on %s:%d", ", ".join(names), host, port)
    return BoundServer(server, port, f"{host}:{port}", health_servicer)
