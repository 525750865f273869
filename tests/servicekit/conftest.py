"""Fixtures for servicekit tests: a small real gRPC service, certificates, and a server runner."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import grpc
import pytest

from servicekit.auth import client_identity
from servicekit.devcerts import DevCertificates, make_certificates
from servicekit.errors import NotFound
from servicekit.limits import ClientLimiter
from servicekit.security import Security
from servicekit.server import BoundServer, ServiceBinding, create_server

ECHO_SERVICE = "kforge.test.Echo"


class EchoServicer:
    """Byte-level test service covering all four RPC shapes, slow calls and a limited call."""

    def __init__(self) -> None:
        self.limiter = ClientLimiter(max_concurrent=1, max_queue=1, name="test_echo")
        self.cancelled = 0
        self.finished = 0

    async def unary(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def slow(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            await asyncio.sleep(float(request))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return b"done"

    async def limited(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        async with self.limiter(client_identity(context)):
            await asyncio.sleep(float(request))
        return b"ok"

    async def who(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return client_identity(context).encode()

    async def fail(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise NotFound(f"no such thing: {request.decode()}")

    async def server_stream(self, request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for _ in range(3):
            yield request

    async def client_stream(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
        return b"".join([r async for r in requests])

    async def bidi(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for r in requests:
            yield r

    def binding(self) -> ServiceBinding:
        handler = grpc.method_handlers_generic_handler(
            ECHO_SERVICE,
            {
                "Unary": grpc.unary_unary_rpc_method_handler(self.unary),
                "Slow": grpc.unary_unary_rpc_method_handler(self.slow),
                "Limited": grpc.unary_unary_rpc_method_handler(self.limited),
                "Who": grpc.unary_unary_rpc_method_handler(self.who),
                "Fail": grpc.unary_unary_rpc_method_handler(self.fail),
                "ServerStream": grpc.unary_stream_rpc_method_handler(self.server_stream),
                "ClientStream": grpc.stream_unary_rpc_method_handler(self.client_stream),
                "Bidi": grpc.stream_stream_rpc_method_handler(self.bidi),
            },
        )
        return ServiceBinding(self, lambda _s, server: server.add_generic_rpc_handlers((handler,)), ECHO_SERVICE)


def echo_method(channel: grpc.aio.Channel, name: str) -> Any:
    """A multi-callable for ``name`` on the echo service (bytes in, bytes out)."""
    path = f"/{ECHO_SERVICE}/{name}"
    if name == "ServerStream":
        return channel.unary_stream(path)
    if name == "ClientStream":
        return channel.stream_unary(path)
    if name == "Bidi":
        return channel.stream_stream(path)
    return channel.unary_unary(path)


@pytest.fixture
def echo() -> EchoServicer:
    return EchoServicer()


@pytest.fixture
def serve() -> Callable[..., AbstractAsyncContextManager[BoundServer]]:
    """``async with serve(servicer, security) as bound:`` runs a real server on 127.0.0.1:0."""

    @asynccontextmanager
    async def _serve(
        servicer: EchoServicer, security: Security | None = None, address: str = "127.0.0.1:0"
    ) -> AsyncIterator[BoundServer]:
        bound = await create_server([servicer.binding()], address, security=security)
        try:
            yield bound
        finally:
            await bound.stop(0)

    return _serve


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    return make_certificates(tmp_path_factory.mktemp("certs"), hosts=["sandbox.test"])


@pytest.fixture(scope="session")
def other_certs(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    """A second, unrelated CA and its certificates: what an attacker or a misconfiguration holds."""
    return make_certificates(tmp_path_factory.mktemp("other-certs"), client_name="intruder")


@pytest.fixture(scope="session")
def token(certs: DevCertificates) -> str:
    return certs.token_file.read_text().strip()


def server_security(certs: DevCertificates, token: str | None, mutual: bool = False) -> Security:
    return Security(
        tls_cert=certs.server_cert,
        tls_key=certs.server_key,
        tls_ca=certs.ca_cert if mutual else None,
        token=token,
    )


@pytest.fixture
def tls_server_security(certs: DevCertificates, token: str) -> Security:
    return server_security(certs, token)


@pytest.fixture
def mtls_server_security(certs: DevCertificates, token: str) -> Security:
    return server_security(certs, token, mutual=True)


@pytest.fixture
def rpc() -> Callable[[grpc.aio.Channel, str], Any]:
    """``rpc(channel, "Unary")(b"x")``: call an echo method by name."""
    return echo_method
