"""A forge service for the dashboard when none is given: every service embedded, served from an
asyncio loop in a background thread of ``kforge ui`` while Streamlit runs as a child process."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from servicekit.errors import Unavailable

START_TIMEOUT_S = 120.0
ServeForge = Callable[[], AbstractAsyncContextManager[str]]


class BackgroundForge:
    """Keeps ``serve()`` (an async context giving the forge's address) open in a daemon thread."""

    def __init__(self, serve: ServeForge) -> None:
        self._serve_forge = serve
        self.address = ""
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="kforge-ui-forge", daemon=True)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start the services; returns the forge's address once it listens."""
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise Unavailable(f"the local forge service did not start within {timeout_s:.0f} s")
        if self._error is not None:
            raise Unavailable(f"the local forge service could not start: {self._error}") from self._error
        return self.address

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the services, also when asked while they are still starting."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start(); the thread must not die silently
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        async with self._serve_forge() as address:
            self.address = address
            self._ready.set()
            await asyncio.to_thread(self._stopping.wait)


@contextlib.asynccontextmanager
async def embedded_forge(runs_dir: Path, backend: str = "auto") -> AsyncIterator[str]:
    """Capture, agent, sandbox and forge services on 127.0.0.1; yields the forge's address."""
    from forge_service.embedded import embedded_services

    runs_dir.mkdir(parents=True, exist_ok=True)
    async with embedded_services(runs_dir, backend=backend) as services:
        yield services.forge_address


@contextlib.contextmanager
def background_forge(serve: ServeForge) -> Iterator[str]:
    """The address of the forge ``serve`` opens, for as long as the ``with`` block lasts."""
    forge = BackgroundForge(serve)
    try:
        yield forge.start()
    finally:
        forge.stop()


def local_forge(runs_dir: Path, backend: str = "auto") -> contextlib.AbstractContextManager[str]:
    """A local forge over ``runs_dir`` with its own capture, agent and sandbox services."""
    return background_forge(lambda: embedded_forge(runs_dir, backend))
