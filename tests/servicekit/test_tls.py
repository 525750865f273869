"""TLS and mutual TLS against a real server on 127.0.0.1."""

import asyncio

import grpc
import pytest

from servicekit.client import channel, insecure_channel
from servicekit.errors import ConfigurationError
from servicekit.security import Security
from servicekit.tls import channel_credentials, read_pem, server_credentials


def test_read_pem_names_a_missing_file(tmp_path):
    with pytest.raises(ConfigurationError, match=r"TLS CA .*missing\.pem"):
        read_pem(tmp_path / "missing.pem", "TLS CA")


def test_read_pem_refuses_non_pem(tmp_path):
    path = tmp_path / "cert.pem"
    path.write_text("not a certificate")
    with pytest.raises(ConfigurationError, match="not a PEM file"):
        read_pem(path, "TLS certificate")


def test_server_ca_without_a_certificate_is_refused(certs):
    with pytest.raises(ConfigurationError, match="--tls-ca on a server"):
        server_credentials(Security(tls_ca=certs.ca_cert))


def test_plain_text_security_has_no_server_credentials():
    assert server_credentials(Security()) is None


def test_client_credentials_load(certs):
    assert channel_credentials(Security(tls_ca=certs.ca_cert)) is not None


def test_tls_round_trip_and_plain_text_client_refused(echo, serve, rpc, certs):
    async def scenario():
        async with serve(echo, Security(tls_cert=certs.server_cert, tls_key=certs.server_key)) as bound:
            async with channel(bound.address, Security(tls_ca=certs.ca_cert)) as ch:
                assert await rpc(ch, "Unary")(b"over tls", timeout=5) == b"over tls"
            async with insecure_channel(bound.address) as ch:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await rpc(ch, "Unary")(b"plain", timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    asyncio.run(scenario())


def test_client_trusting_another_ca_is_refused(echo, serve, rpc, certs, other_certs):
    async def scenario():
        async with serve(echo, Security(tls_cert=certs.server_cert, tls_key=certs.server_key)) as bound:
            async with channel(bound.address, Security(tls_ca=other_certs.ca_cert)) as ch:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await rpc(ch, "Unary")(b"x", timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    asyncio.run(scenario())


def test_server_name_override_checks_the_certificate_name(echo, serve, rpc, certs):
    async def scenario():
        async with serve(echo, Security(tls_cert=certs.server_cert, tls_key=certs.server_key)) as bound:
            right = Security(tls_ca=certs.ca_cert, tls_server_name="sandbox.test")
            async with channel(bound.address, right) as ch:
                assert await rpc(ch, "Unary")(b"named", timeout=5) == b"named"
            wrong = Security(tls_ca=certs.ca_cert, tls_server_name="elsewhere.test")
            async with channel(bound.address, wrong) as ch:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await rpc(ch, "Unary")(b"x", timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    asyncio.run(scenario())


def test_mutual_tls_requires_a_client_certificate_from_the_ca(echo, serve, rpc, certs, other_certs, token):
    async def scenario():
        async with serve(echo, Security(tls_cert=certs.server_cert, tls_key=certs.server_key, tls_ca=certs.ca_cert,
                                        token=token)) as bound:
            client = Security(tls_ca=certs.ca_cert, tls_cert=certs.client_cert, tls_key=certs.client_key, token=token)
            async with channel(bound.address, client) as ch:
                assert await rpc(ch, "Who")(b"", timeout=5) == b"cert:kforge-client"
            no_cert = Security(tls_ca=certs.ca_cert, token=token)
            foreign_cert = Security(
                tls_ca=certs.ca_cert, tls_cert=other_certs.client_cert, tls_key=other_certs.client_key, token=token
            )
            for refused_client in (no_cert, foreign_cert):
                async with channel(bound.address, refused_client) as ch:
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await rpc(ch, "Unary")(b"x", timeout=5)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    asyncio.run(scenario())
