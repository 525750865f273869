"""The capture service's server: CaptureService over a work dir of capture directories."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from capture_service.servicer import CaptureServicer
from capture_service.workspace import CaptureWorkspace
from kernel_forge.capture.v1 import service_pb2_grpc as capture_grpc
from servicekit.cli_options import add_security_arguments, security_from_args
from servicekit.security import Security
from servicekit.server import BoundServer, ServiceBinding, create_server

SERVICE_NAME = "kernel_forge.capture.v1.CaptureService"
DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_WORK_DIR = Path("kforge-captures")


async def start(
    address: str = "127.0.0.1:0", *, work_dir: Path | None = None, security: Security | None = None
) -> BoundServer:
    """Serve CaptureService on ``address``; captures go under ``work_dir`` (a temporary dir if None)."""
    directory = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="kforge-captures-"))
    servicer = CaptureServicer(CaptureWorkspace(directory))
    binding = ServiceBinding(servicer, capture_grpc.add_CaptureServiceServicer_to_server, SERVICE_NAME)
    return await create_server([binding], address, security=security)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=DEFAULT_ADDRESS, help="HOST:PORT to listen on")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                        help="directory of capture directories (kept across restarts)")
    add_security_arguments(parser)


async def start_from_args(args: argparse.Namespace) -> BoundServer:
    return await start(args.address, work_dir=args.work_dir, security=security_from_args(args))
