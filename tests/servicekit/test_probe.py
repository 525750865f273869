import asyncio
import json

from servicekit.probe import main, probe
from servicekit.security import Security


def test_probe_reports_health_services_and_auth_failures(echo, serve, certs, token):
    server = Security(tls_cert=certs.server_cert, tls_key=certs.server_key, token=token)

    async def scenario():
        async with serve(echo, server) as bound:
            good = await probe(bound.address, Security(tls_ca=certs.ca_cert, token=token))
            no_token = await probe(bound.address, Security(tls_ca=certs.ca_cert))
            plain = await probe(bound.address, Security(token=token))
            health_only = await probe(bound.address, Security(tls_ca=certs.ca_cert), health_only=True)
            await bound.health.enter_graceful_shutdown()
            draining = await probe(bound.address, Security(tls_ca=certs.ca_cert), health_only=True)
            return good, no_token, plain, health_only, draining

    good, no_token, plain, health_only, draining = asyncio.run(scenario())
    assert health_only.ok and health_only.services == []
    assert (draining.ok, draining.health) == (False, "NOT_SERVING")
    assert good.ok and good.health == "SERVING"
    assert "kforge.test.Echo" in good.services and "grpc.health.v1.Health" in good.services
    assert (no_token.ok, no_token.stage, no_token.code) == (False, "reflection", "UNAUTHENTICATED")
    assert no_token.health == "SERVING"
    assert (plain.ok, plain.stage, plain.code) == (False, "health", "UNAVAILABLE")


def test_probe_cli_exit_codes(echo, serve, certs, token, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("KFORGE_TOKEN", raising=False)
    assert main(["check", "192.0.2.10:1"]) == 2
    assert "refusing a plain-text connection" in capsys.readouterr().err

    async def scenario():
        async with serve(echo, Security(token=token)) as bound:
            return await asyncio.to_thread(main, ["check", bound.address, "--token-file", str(certs.token_file)])

    assert asyncio.run(scenario()) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
