"""Serving the sandbox: ``start()`` for tests and embedding, ``kforge serve sandbox`` for hosts."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.evaluator import Evaluator
from gpu_sandbox_service.models import Limits
from gpu_sandbox_service.servicer import SandboxServicer
from kernel_forge.sandbox.v1 import service_pb2, service_pb2_grpc
from servicekit.cli_options import add_security_arguments, security_from_args
from servicekit.security import Security
from servicekit.server import BoundServer, ServiceBinding, create_server

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["SandboxService"].full_name


async def start(address: str = "127.0.0.1:0", *, backend: str = "auto", work_dir: Path | None = None,
                workers: int | None = None, limits: Limits | None = None,
                security: Security | None = None) -> BoundServer:
    """Start a SandboxService on ``address``; ``work_dir`` keeps blobs and the compile cache."""
    root = Path(work_dir).resolve() if work_dir is not None else Path(tempfile.mkdtemp(prefix="kforge-sandbox-"))
    blobs = BlobStore(root / "blobs")
    evaluator = Evaluator(root, backend, blobs, limits, workers=workers)
    servicer = SandboxServicer(evaluator, blobs)
    binding = ServiceBinding(servicer, service_pb2_grpc.add_SandboxServiceServicer_to_server, SERVICE_NAME)
    return await create_server([binding], address, security=security)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kforge serve sandbox``."""
    parser.add_argument("--address", default="127.0.0.1:50053", help="host:port to listen on")
    parser.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--work-dir", type=Path, help="blobs and compile cache (default: a temporary dir)")
    parser.add_argument("--workers", type=int, help="run slots (default: one per visible GPU; 1 for cpu)")
    parser.add_argument("--compile-timeout", type=float, default=Limits().compile_timeout_s, metavar="S")
    parser.add_argument("--run-timeout", type=float, default=Limits().run_timeout_s, metavar="S")
    add_security_arguments(parser)


async def start_from_args(args: argparse.Namespace) -> BoundServer:
    limits = Limits(compile_timeout_s=args.compile_timeout, run_timeout_s=args.run_timeout)
    return await start(args.address, backend=args.backend, work_dir=args.work_dir, workers=args.workers,
                       limits=limits, security=security_from_args(args))
