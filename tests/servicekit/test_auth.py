"""Bearer-token auth on every RPC shape, over TLS and loopback (metadata from the client's interceptors)."""

import asyncio
import logging

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from servicekit import metrics
from servicekit.auth import AUTHORIZATION_KEY, BEARER_PREFIX, TokenAuthInterceptor, presented_token
from servicekit.client import blocking_channel, channel
from servicekit.security import Security, token_fingerprint
from tests.servicekit.conftest import echo_method


async def _all_shapes(rpc, ch) -> list[bytes]:
    """Call one method of each RPC shape; return what came back."""

    async def requests():
        yield b"a"
        yield b"b"

    results = [await rpc(ch, "Unary")(b"u", timeout=5)]
    results.append(b"".join([r async for r in rpc(ch, "ServerStream")(b"s", timeout=5)]))
    results.append(await rpc(ch, "ClientStream")(requests(), timeout=5))
    results.append(b"".join([r async for r in rpc(ch, "Bidi")(requests(), timeout=5)]))
    return results


async def _refusals(rpc, ch) -> list[tuple[grpc.StatusCode, str]]:
    """Each RPC shape's failure status and details."""
    out = []
    for name in ("Unary", "ServerStream", "ClientStream", "Bidi"):

        async def requests():
            yield b"a"

        try:
            if name in ("Unary", "ServerStream"):
                call = rpc(ch, name)(b"x", timeout=5)
            else:
                call = rpc(ch, name)(requests(), timeout=5)
            if name in ("ServerStream", "Bidi"):
                async for _ in call:
                    pass
            else:
                await call
        except grpc.aio.AioRpcError as exc:
            out.append((exc.code(), exc.details()))
        else:
            out.append((grpc.StatusCode.OK, ""))
    return out


EXPECTED = [b"u", b"sss", b"ab", b"ab"]


@pytest.mark.parametrize("transport", ["tls", "loopback"])
def test_right_token_is_accepted_on_every_rpc_shape(echo, serve, rpc, certs, token, transport):
    tls = transport == "tls"
    server = Security(tls_cert=certs.server_cert, tls_key=certs.server_key, token=token) if tls else None
    server = server or Security(token=token)
    client = Security(tls_ca=certs.ca_cert, token=token) if tls else Security(token=token)

    async def scenario():
        async with serve(echo, server) as bound, channel(bound.address, client) as ch:
            assert await _all_shapes(rpc, ch) == EXPECTED

    asyncio.run(scenario())


@pytest.mark.parametrize("transport", ["tls", "loopback"])
@pytest.mark.parametrize("presented", [None, "wrong-token"])
def test_missing_or_wrong_token_is_unauthenticated(echo, serve, rpc, certs, token, transport, presented, caplog):
    tls = transport == "tls"
    server = Security(tls_cert=certs.server_cert, tls_key=certs.server_key, token=token) if tls else None
    server = server or Security(token=token)
    client = Security(tls_ca=certs.ca_cert, token=presented) if tls else Security(token=presented)
    reason = "missing" if presented is None else "invalid"
    before = metrics.AUTH_FAILURES.labels(reason=reason)._value.get()

    async def scenario():
        async with serve(echo, server) as bound, channel(bound.address, client) as ch:
            return await _refusals(rpc, ch)

    with caplog.at_level(logging.DEBUG):
        refusals = asyncio.run(scenario())
    assert refusals == [(grpc.StatusCode.UNAUTHENTICATED, f"{reason} bearer token")] * 4
    assert metrics.AUTH_FAILURES.labels(reason=reason)._value.get() == before + 4
    assert echo.finished == 0
    assert token not in caplog.text and "wrong-token" not in caplog.text


def test_health_stays_open_without_a_token(echo, serve, rpc, token):
    async def scenario():
        async with serve(echo, Security(token=token)) as bound, channel(bound.address) as ch:
            reply = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await rpc(ch, "Unary")(b"x", timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

    asyncio.run(scenario())


def test_server_without_token_accepts_clients_that_send_one(echo, serve, rpc, token):
    async def scenario():
        async with serve(echo, Security()) as bound, channel(bound.address, Security(token=token)) as ch:
            assert await rpc(ch, "Unary")(b"x", timeout=5) == b"x"

    asyncio.run(scenario())


def test_identity_is_the_token_fingerprint(echo, serve, rpc, token):
    async def scenario():
        async with serve(echo, Security(token=token)) as bound, channel(bound.address, Security(token=token)) as ch:
            return await rpc(ch, "Who")(b"", timeout=5)

    assert asyncio.run(scenario()).decode() == f"token:{token_fingerprint(token)}"


def test_identity_without_token_is_the_peer_host(echo, serve, rpc):
    async def scenario():
        async with serve(echo) as bound, channel(bound.address) as ch:
            return await rpc(ch, "Who")(b"", timeout=5)

    assert asyncio.run(scenario()) == b"peer:ipv4:127.0.0.1"


def test_interceptor_compares_tokens_and_hides_its_own():
    interceptor = TokenAuthInterceptor("right")
    assert interceptor.accepts("right")
    assert not interceptor.accepts("righ")
    assert not interceptor.accepts("right-and-more")
    assert not interceptor.accepts(None)
    assert "right" not in repr(interceptor)


def test_presented_token_needs_the_bearer_scheme():
    assert presented_token((("authorization", "Bearer abc"),)) == "abc"
    assert presented_token((("authorization", "Basic abc"),)) is None
    assert presented_token((("x-other", "Bearer abc"),)) is None
    assert presented_token(None) is None


def test_a_blocking_tls_channel_sends_the_token_as_per_call_metadata(echo, serve, certs, token):
    server = Security(tls_cert=certs.server_cert, tls_key=certs.server_key, token=token)
    client = Security(tls_ca=certs.ca_cert, token=token)

    def call(address: str, metadata: tuple[tuple[str, str], ...]) -> bytes | grpc.StatusCode:
        with blocking_channel(address, client) as ch:
            try:
                return echo_method(ch, "Unary")(b"b", timeout=5, metadata=metadata)
            except grpc.RpcError as exc:
                return exc.code()

    async def scenario():
        async with serve(echo, server) as bound:
            with_token = await asyncio.to_thread(call, bound.address, ((AUTHORIZATION_KEY, BEARER_PREFIX + token),))
            without = await asyncio.to_thread(call, bound.address, ())
        return with_token, without

    assert asyncio.run(scenario()) == (b"b", grpc.StatusCode.UNAUTHENTICATED)
