"""The forge service's server: a RunManager behind ForgeService."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from forge_service.runs import RunManager, ServiceAddresses
from forge_service.servicer import ForgeServicer
from kernel_forge.forge.v1 import service_pb2_grpc as forge_grpc
from kforge_domain.paths import DEFAULT_RUNS_DIR
from servicekit.cli_options import add_security_arguments, security_from_args
from servicekit.security import Security
from servicekit.server import BoundServer, ServiceBinding, create_server

SERVICE_NAME = "kernel_forge.forge.v1.ForgeService"


@dataclass
class ForgeServer:
    bound: BoundServer
    manager: RunManager

    @property
    def address(self) -> str:
        return self.bound.address

    async def stop(self, grace_s: float = 2.0) -> None:
        await self.manager.close()
        await self.bound.stop(grace_s)


async def start(
    address: str = "127.0.0.1:0",
    *,
    runs_dir: Path = DEFAULT_RUNS_DIR,
    capture: str,
    agent: str,
    sandboxes: list[str],
    security: Security | None = None,
    client_security: Security | None = None,
    embedded: frozenset[str] = frozenset(),
    local_capture_dir: Path | None = None,
) -> ForgeServer:
    """Serve ForgeService on ``address``, driving the given capture, agent and sandbox services.

    ``client_security`` secures the forge's calls to them, except to the ``embedded`` addresses:
    services started in this process on loopback, reached in plain text. ``local_capture_dir`` is
    the work folder of an embedded capture service, whose blobs are then linked, not streamed.
    """
    manager = RunManager(runs_dir, ServiceAddresses(capture, agent, sandboxes, client_security, embedded,
                                                    local_capture_dir))
    servicer = ForgeServicer(manager)
    bound = await create_server(
        [ServiceBinding(servicer, forge_grpc.add_ForgeServiceServicer_to_server, SERVICE_NAME)],
        address, security=security,
    )
    return ForgeServer(bound, manager)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default="127.0.0.1:50050", help="HOST:PORT to listen on")
    parser.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR)
    parser.add_argument("--capture", required=True, metavar="ADDR", help="capture service address")
    parser.add_argument("--agent", required=True, metavar="ADDR", help="agent service address")
    parser.add_argument("--sandbox", action="append", required=True, metavar="ADDR",
                        help="sandbox service address (repeat for a pool)")
    add_security_arguments(parser)


async def start_from_args(args: argparse.Namespace) -> ForgeServer:
    security = security_from_args(args)
    return await start(args.address, runs_dir=args.runs_dir, capture=args.capture, agent=args.agent,
                       sandboxes=args.sandbox, security=security, client_security=security)
