"""Test services served from child processes, reached over loopback like real deployments.

A module run as ``python -m MODULE ARGS`` calls :func:`serve_until_stdin_closes` with an async
context giving a service's address: the child prints that address on a line of its own and serves
until its standard input closes, so it also ends when the test process dies. :func:`service_process`
is the test side.

Why a process and not a thread of the test process: gRPC's asyncio objects made by a loop in one
thread can be finalised by the cyclic collector in any other thread, and grpcio's native teardown
there can deadlock with its own threads while holding the interpreter lock, which freezes the
whole test run. With each server's loop alone in its process, the test process keeps only
blocking gRPC clients and the loops of its own asyncio tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


def serve_until_stdin_closes(serve: AbstractAsyncContextManager[str]) -> None:
    """Child side: print the address ``serve`` opens, then serve until standard input closes."""

    async def main() -> None:
        async with serve as address:
            print(address, flush=True)
            await asyncio.to_thread(sys.stdin.read)

    asyncio.run(main())


@contextlib.contextmanager
def service_process(module: str, *args: str) -> Iterator[str]:
    """Test side: start ``python -m module args``; yield its address and stop it afterwards."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.stdin is not None and proc.stdout is not None
        try:
            ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
            address = proc.stdout.readline().strip() if ready else ""
            if not address:
                proc.kill()
                proc.wait()
                log.seek(0)
                raise RuntimeError(f"{module} did not start:\n{log.read().decode(errors='replace')[-3000:]}")
            yield address
        finally:
            proc.stdin.close()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
