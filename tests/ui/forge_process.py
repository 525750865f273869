"""The dashboard tests' forge services, each in a process of its own.

``python -m tests.ui.forge_process KIND RUNS_DIR`` serves one of the compositions below, prints the
forge's address on a line of its own, and serves until its standard input closes (so it also ends
when the test process dies). The tests reach it over loopback like the dashboard does.

Why a process and not a thread of the test process: gRPC's asyncio objects made by a loop in one
thread can be finalised by the cyclic collector in any other thread, and grpcio's native teardown
there can deadlock with its own threads while holding the interpreter lock, which freezes the
whole test run. Keeping each forge's loop alone in its process leaves the test process with only
blocking gRPC clients.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from capture_service import server as capture_server
from forge_service import server as forge_server
from gpu_sandbox_service import server as sandbox_server
from ui.local_forge import embedded_forge

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
# Nothing listens here: a forge needs the other services only to start new runs.
NO_SERVICE = "127.0.0.1:9"


@contextlib.asynccontextmanager
async def forge_only(runs_dir: Path) -> AsyncIterator[str]:
    """A forge that serves stored runs without capture, agent or sandbox services."""
    forge = await forge_server.start(runs_dir=runs_dir, capture=NO_SERVICE, agent=NO_SERVICE, sandboxes=[NO_SERVICE])
    try:
        yield forge.address
    finally:
        await forge.stop()


@contextlib.asynccontextmanager
async def forge_with_capture(runs_dir: Path) -> AsyncIterator[str]:
    """Real forge, capture and cpu sandbox services; no agent (runs that never finish capture)."""
    capture = await capture_server.start(work_dir=runs_dir / ".capture")
    sandbox = await sandbox_server.start(backend="cpu", work_dir=runs_dir / ".sandbox")
    forge = await forge_server.start(runs_dir=runs_dir, capture=capture.address, agent=NO_SERVICE,
                                     sandboxes=[sandbox.address])
    try:
        yield forge.address
    finally:
        await forge.stop()
        await sandbox.stop()
        await capture.stop()


def embedded_cpu(runs_dir: Path) -> AbstractAsyncContextManager[str]:
    """Every service embedded, as ``kforge ui`` starts them, on the cpu backend."""
    return embedded_forge(runs_dir, backend="cpu")


KINDS: dict[str, Callable[[Path], AbstractAsyncContextManager[str]]] = {
    "embedded": embedded_cpu,
    "forge-only": forge_only,
    "forge-with-capture": forge_with_capture,
}


async def _serve(kind: str, runs_dir: Path) -> None:
    runs_dir.mkdir(parents=True, exist_ok=True)
    async with KINDS[kind](runs_dir) as address:
        print(address, flush=True)
        await asyncio.to_thread(sys.stdin.read)


@contextlib.contextmanager
def forge_process(kind: str, runs_dir: Path) -> Iterator[str]:
    """Starts ``kind`` in a child process; yields its forge's address and stops it afterwards."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.ui.forge_process", kind, str(runs_dir)], cwd=REPO,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.stdin is not None and proc.stdout is not None
        try:
            ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
            address = proc.stdout.readline().strip() if ready else ""
            if not address:
                proc.kill()
                proc.wait()
                log.seek(0)
                raise RuntimeError(f"the {kind} forge did not start:\n{log.read().decode(errors='replace')[-3000:]}")
            yield address
        finally:
            proc.stdin.close()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("runs_dir", type=Path)
    args = parser.parse_args()
    asyncio.run(_serve(args.kind, args.runs_dir))


if __name__ == "__main__":
    main()
