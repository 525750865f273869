"""create_server's listen policy, error mapping, limits, deadlines and graceful stop."""

import asyncio
import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from servicekit.client import channel, insecure_channel
from servicekit.errors import ConfigurationError
from servicekit.security import Security
from servicekit.server import MAX_MESSAGE_BYTES, check_listen_policy, create_server

SLOW_SERVER = Path(__file__).with_name("slow_server_script.py")


@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0", "192.0.2.10:50054", "sandbox.lab:50054"])
def test_non_loopback_needs_tls_and_token(address, certs, token):
    tls_only = Security(tls_cert=certs.server_cert, tls_key=certs.server_key)
    with pytest.raises(ConfigurationError, match="without TLS and a bearer token"):
        check_listen_policy(address, Security(), tls=False)
    with pytest.raises(ConfigurationError, match="without a bearer token"):
        check_listen_policy(address, tls_only, tls=True)
    with pytest.raises(ConfigurationError, match="without TLS:"):
        check_listen_policy(address, Security(token=token), tls=False)
    check_listen_policy(address, Security(tls_cert=certs.server_cert, tls_key=certs.server_key, token=token), tls=True)


def test_create_server_refuses_before_listening(echo):
    async def scenario():
        await create_server([echo.binding()], "0.0.0.0:0", security=Security())

    with pytest.raises(ConfigurationError, match=r"refusing to listen on non-loopback address 0\.0\.0\.0:0"):
        asyncio.run(scenario())


def test_insecure_allows_non_loopback_with_a_warning(echo, caplog):
    async def scenario():
        bound = await create_server([echo.binding()], "0.0.0.0:0", security=Security(insecure=True))
        await bound.stop(0)
        return bound.port

    with caplog.at_level(logging.WARNING, logger="servicekit.server"):
        assert asyncio.run(scenario()) > 0
    assert "without TLS and a bearer token because --insecure was given" in caplog.text


def test_tls_and_token_listen_on_all_interfaces(echo, serve, rpc, certs, token):
    security = Security(tls_cert=certs.server_cert, tls_key=certs.server_key, token=token)

    async def scenario():
        async with serve(echo, security, address="0.0.0.0:0") as bound:
            client = Security(tls_ca=certs.ca_cert, token=token)
            async with channel(f"127.0.0.1:{bound.port}", client) as ch:
                return await rpc(ch, "Unary")(b"hello", timeout=5)

    assert asyncio.run(scenario()) == b"hello"


def test_domain_errors_keep_their_status(echo, serve, rpc):
    async def scenario():
        async with serve(echo) as bound, insecure_channel(bound.address) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await rpc(ch, "Fail")(b"card-7", timeout=5)
            return failed.value

    error = asyncio.run(scenario())
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == "no such thing: card-7"


def test_messages_above_grpc_default_limit_pass(echo, serve, rpc):
    payload = bytes(range(256)) * (40 * 1024 * 1024 // 256)  # 40 MiB, ten times gRPC's default limit
    assert len(payload) < MAX_MESSAGE_BYTES

    async def scenario():
        async with serve(echo) as bound, channel(bound.address) as ch:
            return await rpc(ch, "Unary")(payload, timeout=30)

    assert asyncio.run(scenario()) == payload


def test_deadline_cancels_the_handler(echo, serve, rpc):
    async def scenario():
        async with serve(echo) as bound, channel(bound.address) as ch:
            await rpc(ch, "Unary")(b"connect first", timeout=10)
            with pytest.raises(grpc.aio.AioRpcError) as late:
                await rpc(ch, "Slow")(b"30", timeout=0.5)
            for _ in range(50):
                if echo.cancelled:
                    break
                await asyncio.sleep(0.05)
            return late.value.code()

    assert asyncio.run(scenario()) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert echo.cancelled == 1 and echo.finished == 0


def test_client_limits_return_resource_exhausted(echo, serve, rpc):
    async def scenario():
        async with (
            serve(echo) as bound,
            channel(bound.address, Security(token="client-a")) as busy,
            channel(bound.address) as other,
        ):
            calls = [asyncio.ensure_future(rpc(busy, "Limited")(b"0.5", timeout=10)) for _ in range(3)]
            await asyncio.sleep(0.1)
            # Another client (no token: identified by its peer) is not held back by the first one.
            other_answer = await rpc(other, "Limited")(b"0", timeout=5)
            return await asyncio.gather(*calls, return_exceptions=True), other_answer

    outcomes, other_answer = asyncio.run(scenario())
    assert outcomes.count(b"ok") == 2  # one running, one queued
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(refused) == 1
    assert refused[0].code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "retry later" in refused[0].details()
    assert other_answer == b"ok"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_gracefully_letting_in_flight_calls_finish(sig):
    process = subprocess.Popen(
        [sys.executable, str(SLOW_SERVER)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = json.loads(process.stdout.readline())["port"]

        async def scenario():
            async with insecure_channel(f"127.0.0.1:{port}") as ch:
                slow = ch.unary_unary("/kforge.test.Slow/Slow")
                assert await slow(b"0", timeout=20) == b"done"  # connected before the signal
                in_flight = asyncio.ensure_future(slow(b"1.5", timeout=20))
                await asyncio.sleep(0.5)
                process.send_signal(sig)
                await asyncio.sleep(0.3)
                async with insecure_channel(f"127.0.0.1:{port}") as late_ch:
                    with pytest.raises(grpc.aio.AioRpcError) as late:
                        await late_ch.unary_unary("/kforge.test.Slow/Slow")(b"0", timeout=3)
                return await in_flight, late.value.code()

        answer, late_code = asyncio.run(scenario())
        stdout, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
    assert answer == b"done"
    assert late_code == grpc.StatusCode.UNAVAILABLE
    assert process.returncode == 0, stderr
    assert json.loads(stdout) == {"stopped_by": sig.name, "finished": 2}
