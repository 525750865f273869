"""A real cpu SandboxService with the tests' limits, in a process of its own
(``tests/service_process.py`` says why): ``python -m tests.gpu_sandbox_service.sandbox_process WORK_DIR``."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from gpu_sandbox_service import server as sandbox_server
from tests.gpu_sandbox_service.conftest import TEST_LIMITS
from tests.service_process import serve_until_stdin_closes, service_process


@contextlib.asynccontextmanager
async def cpu_sandbox(work_dir: Path) -> AsyncIterator[str]:
    bound = await sandbox_server.start(backend="cpu", work_dir=work_dir, limits=TEST_LIMITS)
    try:
        yield bound.address
    finally:
        await bound.stop(0.5)


def sandbox_process(work_dir: Path) -> contextlib.AbstractContextManager[str]:
    """Serves a cpu sandbox over ``work_dir`` in a child process; gives its address."""
    return service_process("tests.gpu_sandbox_service.sandbox_process", str(work_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("work_dir", type=Path)
    serve_until_stdin_closes(cpu_sandbox(parser.parse_args().work_dir))


if __name__ == "__main__":
    main()
