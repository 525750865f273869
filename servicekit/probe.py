"""Check a deployment's network path, TLS and token before (or besides) the real services.

    python -m servicekit.probe check sandbox.lab:50053 --tls-ca ca.pem --token-file token
    python -m servicekit.probe serve 0.0.0.0:50053 --tls-cert server.pem --tls-key server.key --token-file token

``check`` asks the server's health (open to anyone) and then lists its services through
reflection (which needs the token), printing one JSON object; it exits 0 only when both
succeed (``--health-only``: when the server reports SERVING, as container health checks need).
``serve`` runs a server with nothing but health and reflection, secured exactly as a service
would be, so the path from the forge host to the GPU host can be proven first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from servicekit.cli_options import add_security_arguments, security_from_args
from servicekit.client import channel
from servicekit.errors import KforgeError
from servicekit.security import Security
from servicekit.server import create_server, serve_until_signal


@dataclass
class ProbeResult:
    """What ``check`` found. ``code`` is the gRPC status name of the first failure, if any."""

    address: str
    ok: bool
    stage: str = ""
    code: str = ""
    message: str = ""
    health: str = ""
    services: list[str] = field(default_factory=list)


async def probe(address: str, security: Security, timeout_s: float = 5.0, health_only: bool = False) -> ProbeResult:
    """Health check, then (unless ``health_only``) an authenticated reflection listing, over one channel."""
    result = ProbeResult(address=address, ok=False)
    async with channel(address, security) as ch:
        try:
            result.stage = "health"
            reply = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
            result.health = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            if reply.status != health_pb2.HealthCheckResponse.SERVING:
                result.code, result.message = "UNAVAILABLE", f"health is {result.health}"
                return result
            if health_only:
                result.stage, result.ok = "", True
                return result
            result.stage = "reflection"
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            call = reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(iter([request]), timeout=timeout_s)
            async for response in call:
                result.services = sorted(s.name for s in response.list_services_response.service)
        except grpc.aio.AioRpcError as exc:
            result.code = exc.code().name
            result.message = exc.details() or ""
            return result
    result.stage, result.ok = "", True
    return result


async def _serve(address: str, security: Security) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    bound = await create_server([], address, security=security)
    print(json.dumps({"address": bound.address, "port": bound.port}), flush=True)
    await serve_until_signal(bound)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servicekit.probe", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="check that a server is reachable and accepts these credentials")
    check.add_argument("address", help="host:port of the server")
    check.add_argument("--timeout", type=float, default=5.0, help="seconds per RPC")
    check.add_argument(
        "--health-only", action="store_true", help="only the health check, which needs no token (container probes)"
    )
    serve = commands.add_parser("serve", help="run a health-and-reflection-only server")
    serve.add_argument("address", help="host:port to listen on (port 0: any free port)")
    for sub in (check, serve):
        add_security_arguments(sub)
    args = parser.parse_args(argv)
    try:
        security = security_from_args(args)
        if args.command == "serve":
            asyncio.run(_serve(args.address, security))
            return 0
        result = asyncio.run(probe(args.address, security, args.timeout, args.health_only))
    except KforgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(result)), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
