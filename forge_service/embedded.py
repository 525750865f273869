"""The embedded default: every service on 127.0.0.1 with ephemeral ports, in this process.

The same gRPC code path serves a laptop and a cluster; only the addresses differ. Model code
and candidate kernels still run in child processes of the capture and sandbox services.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_service import server as forge_server
from servicekit.security import Security


@dataclass
class EmbeddedServices:
    forge: forge_server.ForgeServer
    others: list[Any]

    @property
    def forge_address(self) -> str:
        return self.forge.address


@contextlib.asynccontextmanager
async def embedded_services(
    runs_dir: Path,
    *,
    backend: str = "auto",
    capture: str | None = None,
    agent: str | None = None,
    sandboxes: list[str] | None = None,
    client_security: Security | None = None,
) -> AsyncIterator[EmbeddedServices]:
    """Start the services not given by address, then the forge service over all of them.

    ``client_security`` (TLS, token) is how the forge reaches the services given by address;
    the ones started here listen on loopback in plain text and are reached without it.
    """
    from agent_service import server as agent_server
    from capture_service import server as capture_server
    from gpu_sandbox_service import server as sandbox_server

    runs_dir = Path(runs_dir).resolve()
    started: list[Any] = []
    local_capture_dir = None
    try:
        if capture is None:
            local_capture_dir = runs_dir / ".capture"
            started.append(await capture_server.start(work_dir=local_capture_dir))
            capture = started[-1].address
        if agent is None:
            started.append(await agent_server.start())
            agent = started[-1].address
        if not sandboxes:
            started.append(await sandbox_server.start(backend=backend, work_dir=runs_dir / ".sandbox"))
            sandboxes = [started[-1].address]
        forge = await forge_server.start(
            runs_dir=runs_dir, capture=capture, agent=agent, sandboxes=sandboxes, client_security=client_security,
            embedded=frozenset(bound.address for bound in started), local_capture_dir=local_capture_dir,
        )
        try:
            yield EmbeddedServices(forge, started)
        finally:
            await forge.stop()
    finally:
        for bound in reversed(started):
            await bound.stop()
