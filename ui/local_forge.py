"""A forge service for the dashboard when none is given: every service embedded, served from an
asyncio loop in a background thread of ``kforge ui`` while Streamlit runs as a child process."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from servicekit.errors import Unavailable

START_TIMEOUT_S = 120.0


class LocalForge:
    """The embedded capture, agent, sandbox and forge services on 127.0.0.1, in a daemon thread."""

    def __init__(self, runs_dir: Path, backend: str = "auto") -> None:
        self.runs_dir = runs_dir
        self.backend = backend
        self.address = ""
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
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
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to start(); the thread must not die silently
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        from forge_service.embedded import embedded_services

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        async with embedded_services(self.runs_dir, backend=self.backend) as services:
            self.address = services.forge_address
            self._ready.set()
            await self._stop.wait()


@contextlib.contextmanager
def local_forge(runs_dir: Path, backend: str = "auto") -> Iterator[str]:
    """The address of a local forge service that lives as long as the ``with`` block."""
    forge = LocalForge(runs_dir, backend)
    try:
        yield forge.start()
    finally:
        forge.stop()
