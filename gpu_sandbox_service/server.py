"""Serving the sandbox: ``start()`` for tests and embedding, ``kforge serve sandbox`` for hosts."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.device import describe_device, resolve_backend
from gpu_sandbox_service.evaluator import Evaluator
from gpu_sandbox_service.kernel_isolation import isolation_statement, require_isolation, served_profiles
from gpu_sandbox_service.models import Limits
from gpu_sandbox_service.pool import candidate_slots, select_gpus, slot_gpus, visible_gpus
from gpu_sandbox_service.servicer import SandboxServicer
from kernel_forge.sandbox.v1 import service_pb2, service_pb2_grpc
from servicekit.cli_options import add_security_arguments, security_from_args
from servicekit.errors import InvalidArgument
from servicekit.security import Security
from servicekit.server import BoundServer, ServiceBinding, create_server

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["SandboxService"].full_name
log = logging.getLogger(__name__)


async def start(address: str = "127.0.0.1:0", *, backend: str = "auto", work_dir: Path | None = None,
                workers: int | None = None, gpus: str | None = None, limits: Limits | None = None,
                security: Security | None = None, require_isolation: bool = False,
                say: Callable[[str], None] = log.info) -> BoundServer:
    """Start a SandboxService on ``address``; ``work_dir`` keeps blobs and the compile cache.

    ``gpus`` (``all`` or ids such as ``0,2``; cuda only, not with ``workers``) serves those GPUs,
    one run slot each. Before listening it states through ``say`` the run slots (and their GPUs)
    and which isolation compiles and candidates get (a cuda sandbox runs its canary for that), and
    with ``require_isolation`` refuses to start, naming what is missing, when that is weaker than
    ``isolation.REQUIRED_ISOLATION``.
    """
    if gpus is not None:
        backend = await serve_gpus(gpus, backend, workers)
    root = Path(work_dir).resolve() if work_dir is not None else Path(tempfile.mkdtemp(prefix="kforge-sandbox-"))
    blobs = BlobStore(root / "blobs")
    evaluator = Evaluator(root, backend, blobs, limits, workers=workers)
    await state_slots(evaluator, say)
    await state_isolation(evaluator, require_isolation, say)
    servicer = SandboxServicer(evaluator, blobs)
    binding = ServiceBinding(servicer, service_pb2_grpc.add_SandboxServiceServicer_to_server, SERVICE_NAME)
    bound = await create_server([binding], address, security=security)
    bound.on_stop.append(evaluator.close)
    return bound


async def serve_gpus(spec: str, backend: str, workers: int | None) -> str:
    """Narrow this process's ``CUDA_VISIBLE_DEVICES`` to the GPUs ``spec`` names; returns the backend.

    The ids are checked against the visible GPUs (``CUDA_VISIBLE_DEVICES`` if set, else every
    device the probe counts); the pool then pins one run slot to each. Raises
    :class:`InvalidArgument` for a cpu backend, for ``workers`` given too, or for an unknown id.
    """
    if workers is not None:
        raise InvalidArgument("give --gpus or --workers, not both: --gpus serves one run slot per listed GPU")
    backend = resolve_backend(backend)
    if backend != "cuda":
        raise InvalidArgument(f"--gpus needs the cuda backend (this sandbox runs on {backend}); "
                              "use --workers for cpu run slots")
    device = await asyncio.to_thread(describe_device, backend)
    try:
        chosen = select_gpus(spec, visible_gpus(device.device_count))
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from exc
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(chosen)
    return backend


async def state_slots(evaluator: Evaluator, say: Callable[[str], None]) -> None:
    if evaluator.backend == "cuda":
        gpus = slot_gpus(await evaluator.device_count(), evaluator.workers)
        run_slots = len(gpus)
        say(f"sandbox run slots: {run_slots}, one per GPU ({', '.join(gpus)})")
    else:  # no device probe at start for the cpu: the workers are the slots
        run_slots = max(1, evaluator.workers or 1)
        say(f"sandbox run slots: {run_slots} ({evaluator.backend})")
    slots = candidate_slots(evaluator.backend, max(1, run_slots))  # the pool keeps one slot without GPUs
    say(f"sandbox takes {slots} candidate{'s' if slots != 1 else ''} at once"
        + (" (the next ones build while one runs)" if slots > 1 and evaluator.backend == "cuda" else ""))


async def state_isolation(evaluator: Evaluator, required: bool, say: Callable[[str], None]) -> None:
    if evaluator.backend == "cuda":
        await evaluator.device_info()  # its canary picks the profile cuda candidates run under
    served = served_profiles(evaluator.backend, evaluator.scratch, evaluator.isolation)
    for line in isolation_statement(served, evaluator.scratch):
        say(f"sandbox isolation: {line}")
    if required:
        require_isolation(served)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kforge serve sandbox``."""
    parser.add_argument("--address", default="127.0.0.1:50053", help="host:port to listen on")
    parser.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--work-dir", type=Path, help="blobs and compile cache (default: a temporary dir)")
    parser.add_argument("--gpus", metavar="all|ID,...",
                        help="cuda: serve these GPUs (ids as CUDA_VISIBLE_DEVICES or nvidia-smi lists them), one "
                             "run slot pinned to each; not with --workers (default: every visible GPU)")
    parser.add_argument("--workers", type=int,
                        help="run slots (default: one per visible GPU; 1 for cpu); with cuda, the first N visible "
                             "GPUs")
    parser.add_argument("--compile-timeout", type=float, default=Limits().compile_timeout_s, metavar="S")
    parser.add_argument("--run-timeout", type=float, default=Limits().run_timeout_s, metavar="S")
    parser.add_argument("--require-isolation", action="store_true",
                        help="refuse to start unless compiles and candidates get network, PID (own /proc), IPC "
                             "and UTS namespaces and the seccomp deny-list")
    add_security_arguments(parser)


async def start_from_args(args: argparse.Namespace) -> BoundServer:
    limits = Limits(compile_timeout_s=args.compile_timeout, run_timeout_s=args.run_timeout)
    return await start(args.address, backend=args.backend, work_dir=args.work_dir, workers=args.workers,
                       gpus=args.gpus, limits=limits, security=security_from_args(args),
                       require_isolation=args.require_isolation,
                       say=functools.partial(print, file=sys.stderr, flush=True))
