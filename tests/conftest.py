"""Guards shared by every test: gRPC's asyncio objects never outlive the event loop that made them,
and a test that hangs ends the run with every thread's stack instead of waiting forever."""

from __future__ import annotations

import faulthandler
import gc
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import IO

import pytest

# pytest-timeout (300 s, see pyproject.toml) ends an ordinary hang with the stacks of every thread,
# but it needs the interpreter lock to do so. A hang inside native code that holds the lock (a
# deadlock in an extension) gets past it; faulthandler's watchdog is native and does not.
HANG_TIMEOUT_S = 420.0
# One file per process: pytest-xdist's workers (gw0, gw1, ...) each arm their own watchdog.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
HANG_DUMP = Path(os.environ.get("KFORGE_TEST_HANG_DUMP", f".pytest-hang{'-' + _WORKER if _WORKER else ''}.txt"))

_hang_dump: IO[str] | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _hang_dump
    _hang_dump = HANG_DUMP.open("w")


def pytest_sessionfinish(session: pytest.Session) -> None:
    global _hang_dump
    if _hang_dump is not None:
        faulthandler.cancel_dump_traceback_later()
        _hang_dump.close()
        _hang_dump = None
        HANG_DUMP.unlink(missing_ok=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """Arms the watchdog for one test; the dump file names the test before any stack is written.

    The file outlives a hung run (the watchdog exits the process), and ``make test-py`` prints it.
    """
    if _hang_dump is not None:
        _hang_dump.seek(0)
        _hang_dump.truncate()
        _hang_dump.write(f"hung test: {item.nodeid}\n")
        _hang_dump.flush()
        faulthandler.dump_traceback_later(HANG_TIMEOUT_S, exit=True, file=_hang_dump)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def free_grpc_objects_of_finished_loops() -> Iterator[None]:
    """Collect reference cycles once each test ends.

    grpc.aio keeps one process-wide completion queue alive while any channel, server or call
    exists, and binds it to every event loop that made one. A call left in a reference cycle by a
    test whose loop has closed keeps that queue bound to the dead loop until the collector happens
    to free it, at an arbitrary moment inside a later test's loop; the later test then waits
    forever for an event that is never delivered. Collecting here frees such objects while no
    loop runs, so each test starts with the queue shut down.
    """
    yield
    gc.collect()
