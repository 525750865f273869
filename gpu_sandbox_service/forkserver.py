"""A run slot's fork server, seen from the sandbox: start it isolated, hand it staged candidates,
read back how each child ended, and scrub its directory between candidates.

What it saves is the fixed cost of a candidate process (interpreter start, torch and harness
imports); what each candidate still gets is its own fresh process, forked from a zygote that never
ran candidate code, under the isolation profile, rlimits and environment a fresh process would get
(see :mod:`gpu_sandbox_service.harness.zygote`). The zygote's socket is bound before it starts and
unlinked once it connected, before any candidate exists, so no candidate can speak for it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import shutil
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from gpu_sandbox_service.isolation import RESULT_FD_LIMIT_BYTES, ProcessOutcome
from gpu_sandbox_service.pycommand import python_module_command

log = logging.getLogger(__name__)

ZYGOTE = python_module_command("gpu_sandbox_service.harness.zygote")
SOCKET_NAME = "zygote.sock"
START_TIMEOUT_S = 120.0
REPLY_GRACE_S = 15.0
STOP_GRACE_S = 5.0
LIFETIME_S = 7 * 24 * 3600.0
MAX_CANDIDATES = 500  # a fresh zygote now and then bounds what any slow leak could accumulate

Launch = Callable[[list[str], Path], Coroutine[Any, Any, ProcessOutcome]]


class ForkServer:
    """One zygote process in ``root``, its only writable directory; candidates run in subfolders."""

    def __init__(self, root: Path, private_dirs: list[str], owner: tuple[int, int] | None = None) -> None:
        self.root = root
        self.private_dirs = private_dirs
        self.owner = owner  # (uid, gid) the zygote runs as, when not the server's own
        self.candidates = 0
        self._process: asyncio.Task[ProcessOutcome] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def usable(self) -> bool:
        """Started in the running event loop, alive, and not due for replacement."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return (self._loop is loop and self._process is not None and not self._process.done()
                and self.candidates < MAX_CANDIDATES)

    async def start(self, launch: Launch) -> str | None:
        """Start the zygote through ``launch``; None when it is ready, else why it is not."""
        self._loop = asyncio.get_running_loop()
        self.root.mkdir(parents=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        folder = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:  # through the folder's descriptor: a socket path may not exceed 107 bytes
            listener.bind(f"/proc/self/fd/{folder}/{SOCKET_NAME}")
            if self.owner is not None:  # a zygote dropped to another user may connect to it, no one else
                os.chown(f"/proc/self/fd/{folder}/{SOCKET_NAME}", *self.owner)
        finally:
            os.close(folder)
        listener.listen(1)
        listener.setblocking(False)
        self._process = asyncio.create_task(launch([*ZYGOTE, SOCKET_NAME, *self.private_dirs], self.root))
        accept = asyncio.ensure_future(self._loop.sock_accept(listener))
        try:
            await asyncio.wait({accept, self._process}, timeout=START_TIMEOUT_S,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            listener.close()
            (self.root / SOCKET_NAME).unlink(missing_ok=True)
        if not accept.done():
            accept.cancel()
            return await self._failed("it did not connect")
        connection, _ = accept.result()
        self._reader, self._writer = await asyncio.open_unix_connection(sock=connection,
                                                                        limit=2 * RESULT_FD_LIMIT_BYTES)
        try:
            ready = await asyncio.wait_for(self._reader.readline(), START_TIMEOUT_S)
        except asyncio.TimeoutError:
            ready = b""
        if not ready:
            return await self._failed("it did not become ready")
        return None

    async def _failed(self, why: str) -> str:
        outcome = self._process.result() if self._process and self._process.done() else None
        await self.stop()
        tail = outcome.log_tail.strip()[-800:] if outcome else ""
        return f"{why}{': ' + tail if tail else ''}"

    async def run(self, job_dir: Path, timeout_s: float, output_cap_bytes: int, log_tail_bytes: int
                  ) -> ProcessOutcome | None:
        """Run the candidate staged in ``job_dir`` (a folder of ``root``) in a fresh child.

        None when the zygote was lost meanwhile (it is stopped then): the caller runs the
        candidate again in a fresh process rather than guess its verdict.
        """
        if not await self.submit(job_dir, timeout_s, output_cap_bytes, log_tail_bytes):
            return None
        return await self.outcome(timeout_s)

    async def submit(self, job_dir: Path, timeout_s: float, output_cap_bytes: int, log_tail_bytes: int,
                     held: bool = False) -> bool:
        """Fork ``job_dir``'s child; a ``held`` one stops once prepared (everything but the
        candidate) until :meth:`release` or :meth:`cancel`. Every job's :meth:`outcome` must be read
        before the next. False when the zygote was lost (it is stopped then)."""
        self.candidates += 1
        return await self._tell({"dir": job_dir.name, "timeout_s": timeout_s, "output_cap": output_cap_bytes,
                                 "log_tail": log_tail_bytes, "held": held})

    async def release(self) -> bool:
        """Let the held child go on to its candidate, whose library is now in its folder; its
        timeout starts now. False when the zygote was lost."""
        return await self._tell({"go": True})

    async def cancel(self) -> None:
        """Have the held child killed before its candidate ever ran, and wait until it is gone."""
        if await self._tell({"cancel": True}):
            await self.outcome(0.0)

    async def outcome(self, timeout_s: float) -> ProcessOutcome | None:
        """How the submitted child ended, at most ``timeout_s`` (and a grace) from now; None when the
        zygote was lost (it is stopped then)."""
        assert self._reader is not None
        try:
            line = await asyncio.wait_for(self._reader.readline(), timeout_s + REPLY_GRACE_S)
        except (asyncio.TimeoutError, ConnectionError, ValueError):
            line = b""
        try:
            reply = json.loads(line) if line else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            log.warning("the fork server in %s was lost during a candidate", self.root)
            await self.stop()
            return None
        if not reply.get("clean", False):
            await self.stop()
        return ProcessOutcome(returncode=int(reply["returncode"]), timed_out=bool(reply["timed_out"]),
                              output_overflow=bool(reply["output_overflow"]), log_tail=str(reply["log_tail"]),
                              result=base64.b64decode(reply["result"]), wall_s=float(reply["wall_s"]))

    async def _tell(self, message: dict[str, object]) -> bool:
        if self._writer is None:
            return False
        try:
            self._writer.write(json.dumps(message).encode() + b"\n")
            await self._writer.drain()
        except ConnectionError:
            log.warning("the fork server in %s was lost", self.root)
            await self.stop()
            return False
        return True

    def scrub(self) -> bool:
        """Empty ``root`` after a candidate (its processes are dead by then); True when empty."""
        if not self.root.is_dir():
            return True  # stopped, and removed with its zygote
        for entry in list(self.root.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                _make_removable(entry)
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        return not any(self.root.iterdir())

    async def stop(self) -> None:
        """Kill the zygote (with it every process of its namespace) and remove its directory."""
        if self._loop is not asyncio.get_running_loop():  # its loop, ending, cancelled and killed it
            self._writer, self._process = None, None
        if self._writer is not None:
            self._writer.close()  # a healthy zygote exits when its socket closes
            self._writer = None
        if self._process is not None and not self._process.done():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._process), STOP_GRACE_S)
        if self._process is not None and not self._process.done():
            self._process.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._process
        _make_removable(self.root)
        await asyncio.to_thread(shutil.rmtree, self.root, True)


def _make_removable(folder: Path) -> None:
    """Owner permissions back on every folder below ``folder``, which a candidate may have taken away."""
    with contextlib.suppress(OSError):
        os.chmod(folder, 0o700)
    for path, folders, _ in os.walk(folder):
        for name in folders:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(path, name), 0o700)
