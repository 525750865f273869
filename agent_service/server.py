"""The agent service's server: AgentService with the offline and LLM proposers."""

from __future__ import annotations

import argparse

from agent_service.llm.settings import LlmSettings
from agent_service.servicer import AgentServicer
from kernel_forge.agent.v1 import service_pb2_grpc as agent_grpc
from servicekit.cli_options import add_security_arguments, security_from_args
from servicekit.security import Security
from servicekit.server import BoundServer, ServiceBinding, create_server

SERVICE_NAME = "kernel_forge.agent.v1.AgentService"
DEFAULT_ADDRESS = "127.0.0.1:50052"


async def start(
    address: str = "127.0.0.1:0", *, settings: LlmSettings | None = None, security: Security | None = None
) -> BoundServer:
    """Serve AgentService on ``address`` (port 0: an ephemeral port, see ``BoundServer.port``)."""
    servicer = AgentServicer(settings=settings)
    binding = ServiceBinding(servicer, agent_grpc.add_AgentServiceServicer_to_server, SERVICE_NAME)
    return await create_server([binding], address, security=security)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=DEFAULT_ADDRESS, help="HOST:PORT to listen on")
    LlmSettings.add_arguments(parser)
    add_security_arguments(parser)


async def start_from_args(args: argparse.Namespace) -> BoundServer:
    return await start(args.address, settings=LlmSettings.from_args(args), security=security_from_args(args))
