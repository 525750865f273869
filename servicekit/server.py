"""Server construction: every service gets health, reflection, auth, TLS and domain-error mapping.

``create_server`` is separate from serving so tests bind port 0 and learn the port;
``serve_until_signal`` is the serving half a ``kforge serve <svc>`` command runs.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from servicekit.addresses import is_local_address
from servicekit.auth import TokenAuthInterceptor
from servicekit.errors import ConfigurationError, KforgeError
from servicekit.security import Security
from servicekit.tls import server_credentials

log = logging.getLogger(__name__)

#: Large enough for a card's reference tensors in one message (a 4096x4096 fp32 pair is 128 MiB);
#: bigger payloads travel as streamed ``BlobChunk``s.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
#: Clients ping every 30 s during calls so long ``WatchRun`` streams survive idle-timeout proxies;
#: servers accept pings that often instead of closing the connection for "too many pings".
KEEPALIVE_CLIENT_OPTIONS = [("grpc.keepalive_time_ms", 30_000), ("grpc.keepalive_timeout_ms", 20_000)]
KEEPALIVE_SERVER_OPTIONS = [
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 20_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 20_000),
]
DEFAULT_GRACE_S = 10.0
#: How long past its grace period a stop may take before it is given up on (the process goes on).
STOP_MARGIN_S = 10.0


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
    security: Security = field(default_factory=Security)
    #: Released after the server stopped, in order: what its servicers hold beyond their RPCs
    #: (the sandbox's fork servers), which would otherwise outlive the event loop that owns them.
    on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def stop(self, grace_s: float = 2.0) -> None:
        """Report NOT_SERVING, refuse new RPCs, give in-flight ones ``grace_s`` to finish, then
        release what :attr:`on_stop` names."""
        await self.health.enter_graceful_shutdown()
        try:
            await asyncio.wait_for(self.server.stop(grace_s), timeout=grace_s + STOP_MARGIN_S)
        except asyncio.TimeoutError:
            log.warning("server on %s did not confirm its stop within %.0f s", self.address, grace_s + STOP_MARGIN_S)
        for release in self.on_stop:
            await release()


def check_listen_policy(address: str, security: Security, tls: bool) -> None:
    """Refuse to expose a server beyond this machine without TLS and a token (unless ``insecure``).

    The sandbox runs code written by a language model: reachable without both, it is remote
    code execution for anyone on the network.
    """
    if is_local_address(address):
        return
    missing = [what for what, ok in (("TLS", tls), ("a bearer token", security.token is not None)) if not ok]
    if not missing:
        return
    if not security.insecure:
        raise ConfigurationError(
            f"refusing to listen on non-loopback address {address} without {' and '.join(missing)}: "
            "give --tls-cert/--tls-key and --token-file (or KFORGE_TOKEN), or --insecure on a trusted network"
        )
    log.warning(
        "listening on %s without %s because --insecure was given: anyone who can reach it can use it",
        address,
        " and ".join(missing),
    )


async def create_server(
    bindings: Sequence[ServiceBinding],
    address: str = "127.0.0.1:0",
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    credentials: grpc.ServerCredentials | None = None,
    security: Security | None = None,
) -> BoundServer:
    """Build and start a grpc.aio server with health checking and reflection on ``address``.

    ``security`` adds TLS (mutual when it names a CA) and bearer-token auth on every RPC except
    health checks; ``credentials``, when given, overrides its TLS part. A non-loopback
    ``address`` needs both TLS and a token, or ``security.insecure``.
    """
    security = security if security is not None else Security()
    if credentials is None:
        credentials = server_credentials(security)
    check_listen_policy(address, security, tls=credentials is not None)
    auth = [TokenAuthInterceptor(security.token)] if security.token is not None else []
    server = grpc.aio.server(
        interceptors=[*auth, *interceptors, DomainErrorInterceptor()],
        options=[*CHANNEL_OPTIONS, *KEEPALIVE_SERVER_OPTIONS],
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
    mutual = security.tls_ca is not None and credentials is not None
    log.info(
        "serving %s on %s:%d (%s, %s)",
        ", ".join(names) or "health",
        host,
        port,
        "mutual TLS" if mutual else "TLS" if credentials is not None else "plain text",
        f"token {security.token_fingerprint}" if security.token is not None else "no token",
    )
    return BoundServer(server, port, f"{host}:{port}", health_servicer, security)


async def serve_until_signal(
    bound: BoundServer,
    grace_s: float = DEFAULT_GRACE_S,
    signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
) -> signal.Signals | None:
    """Serve until SIGTERM/SIGINT (or the server stops), then stop gracefully.

    Health turns NOT_SERVING first so balancers stop routing here, new RPCs are refused, and
    in-flight ones get ``grace_s`` seconds to finish. Returns the signal received, if any.
    """
    loop = asyncio.get_running_loop()
    received: asyncio.Future[signal.Signals] = loop.create_future()

    def on_signal(sig: signal.Signals) -> None:
        if not received.done():
            received.set_result(sig)

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    terminated = asyncio.ensure_future(bound.server.wait_for_termination())
    try:
        await asyncio.wait({received, terminated}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    sig_received = received.result() if received.done() else None
    if sig_received is not None:
        log.info("%s received: stopping, in-flight RPCs get %.1f s", sig_received.name, grace_s)
    await bound.stop(grace_s)
    terminated.cancel()
    return sig_received
