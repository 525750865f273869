"""The dashboard tests' forge services, each in a process of its own (``tests/service_process.py``
says why): ``python -m tests.ui.forge_process KIND RUNS_DIR`` serves one of the compositions below."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from capture_service import server as capture_server
from forge_service import server as forge_server
from gpu_sandbox_service import server as sandbox_server
from tests.service_process import serve_until_stdin_closes, service_process
from ui.local_forge import embedded_forge

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


def forge_process(kind: str, runs_dir: Path) -> contextlib.AbstractContextManager[str]:
    """Serves ``kind`` over ``runs_dir`` in a child process; gives its forge's address."""
    return service_process("tests.ui.forge_process", kind, str(runs_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("runs_dir", type=Path)
    args = parser.parse_args()
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    serve_until_stdin_closes(KINDS[args.kind](args.runs_dir))


if __name__ == "__main__":
    main()
