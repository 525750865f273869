"""Bearer-token authentication: one server interceptor, and the client side that sends the token.

Every RPC must carry ``authorization: Bearer <token>``. Health checks (``grpc.health.v1``) stay
open so load balancers and Kubernetes gRPC probes, which cannot send a token, can see whether a
server is up; they reveal nothing else. Reflection and every service RPC require the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from servicekit import metrics
from servicekit.security import token_fingerprint

log = logging.getLogger(__name__)

AUTHORIZATION_KEY = "authorization"
BEARER_PREFIX = "Bearer "
#: Method-name prefixes that answer without a token.
OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


def presented_token(metadata: Any) -> str | None:
    """The bearer token in an RPC's invocation metadata, or None."""
    for key, value in metadata or ():
        if key == AUTHORIZATION_KEY:
            text = value.decode() if isinstance(value, bytes) else str(value)
            return text[len(BEARER_PREFIX) :] if text.startswith(BEARER_PREFIX) else None
    return None


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Rejects every RPC outside :data:`OPEN_METHOD_PREFIXES` without the right bearer token.

    Comparison is on SHA-256 digests with :func:`hmac.compare_digest`, so it takes the same time
    whatever the presented token and leaks neither its content nor its length.
    """

    def __init__(self, token: str) -> None:
        self._expected = _digest(token)

    def __repr__(self) -> str:
        return "TokenAuthInterceptor(token=<hidden>)"

    def accepts(self, token: str | None) -> bool:
        """Whether ``token`` is the configured one (constant time)."""
        return token is not None and hmac.compare_digest(_digest(token), self._expected)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_METHOD_PREFIXES):
            return handler
        token = presented_token(handler_call_details.invocation_metadata)
        if self.accepts(token):
            return handler
        reason = "missing" if token is None else "invalid"
        metrics.AUTH_FAILURES.labels(reason=reason).inc()
        log.warning("refused %s: %s bearer token", method, reason)
        return _refusing(handler, f"{reason} bearer token")


def _refusing(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that aborts with UNAUTHENTICATED."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        # Streaming responses are refused from an async generator, as grpc.aio expects of them.
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # never reached

    async def refuse_after_requests(request: Any, context: grpc.aio.ServicerContext) -> None:
        await _briefly_drain(request)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def refuse_stream_after_requests(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await _briefly_drain(request)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # never reached

    for kind, behavior in (("unary_unary", refuse), ("stream_unary", refuse_after_requests),
                           ("unary_stream", refuse_stream), ("stream_stream", refuse_stream_after_requests)):
        if getattr(handler, kind):
            return handler._replace(**{kind: behavior})  # type: ignore[attr-defined]
    return handler


async def _briefly_drain(requests: AsyncIterator[Any], max_messages: int = 16, max_s: float = 1.0) -> None:
    """Read what a refused client already sent (bounded): aborting a call whose request stream
    is still being written can reach the client as INTERNAL instead of UNAUTHENTICATED."""

    async def drain() -> None:
        count = 0
        async for _ in requests:
            count += 1
            if count >= max_messages:
                return

    with contextlib.suppress(Exception):
        await asyncio.wait_for(drain(), max_s)


def client_identity(context: grpc.aio.ServicerContext) -> str:
    """Who is calling, for per-client limits and logs — never the secret itself.

    The client certificate's common name under mutual TLS, else the token's fingerprint, else
    the peer's host.
    """
    auth = context.auth_context()
    names = auth.get("x509_common_name") or []
    if names:
        name = names[0]
        return "cert:" + (name.decode() if isinstance(name, bytes) else str(name))
    token = presented_token(context.invocation_metadata())
    if token is not None:
        return "token:" + token_fingerprint(token)
    peer = context.peer() or "unknown"
    host = peer.rsplit(":", 1)[0] if peer.startswith(("ipv4:", "ipv6:")) else peer
    return "peer:" + host


class _TokenMetadata:
    """Adds the bearer token to a call's metadata."""

    def __init__(self, token: str) -> None:
        self._header = (AUTHORIZATION_KEY, BEARER_PREFIX + token)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(token=<hidden>)"

    def _with_token(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(tuple(details.metadata) if details.metadata else ()))
        metadata.add(*self._header)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _UnaryUnaryToken(_TokenMetadata, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._with_token(client_call_details), request)


class _UnaryStreamToken(_TokenMetadata, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._with_token(client_call_details), request)


class _StreamUnaryToken(_TokenMetadata, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await continuation(self._with_token(client_call_details), request_iterator)


class _StreamStreamToken(_TokenMetadata, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await continuation(self._with_token(client_call_details), request_iterator)


def bearer_token_interceptors(token: str) -> list[grpc.aio.ClientInterceptor]:
    """Client interceptors that send the token as metadata on every call (over TLS or plain text;
    :func:`servicekit.client.channel` says why not as call credentials). One interceptor per RPC
    shape: a grpc.aio channel files each interceptor under one shape only.
    """
    return [_UnaryUnaryToken(token), _UnaryStreamToken(token), _StreamUnaryToken(token), _StreamStreamToken(token)]
