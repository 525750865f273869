"""The dashboard tests' forge services, each in a process of its own (``tests/service_process.py``
says why): ``python -m tests.ui.forge_process KIND RUNS_DIR`` serves one of the compositions below."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from forge_service.embedded import embedded_services
from tests.service_process import serve_until_stdin_closes, service_process

# Nothing listens here: a forge needs the other services only to start new runs.
NO_SERVICE = "127.0.0.1:9"
# The services given by address (so not started) in each composition; the rest run embedded.
KINDS: dict[str, dict[str, Any]] = {
    "embedded": {},  # every service, as `kforge ui` starts them
    "forge-only": {"capture": NO_SERVICE, "agent": NO_SERVICE, "sandboxes": [NO_SERVICE]},  # serves stored runs
    "forge-with-capture": {"agent": NO_SERVICE},  # for runs that never finish capture
}


@contextlib.asynccontextmanager
async def forge(kind: str, runs_dir: Path) -> AsyncIterator[str]:
    """The forge address of composition ``kind`` over ``runs_dir``, on the cpu backend."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    async with embedded_services(runs_dir, backend="cpu", **KINDS[kind]) as services:
        yield services.forge_address


def forge_process(kind: str, runs_dir: Path) -> contextlib.AbstractContextManager[str]:
    """Serves ``kind`` over ``runs_dir`` in a child process; gives its forge's address."""
    return service_process("tests.ui.forge_process", kind, str(runs_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("runs_dir", type=Path)
    args = parser.parse_args()
    serve_until_stdin_closes(forge(args.kind, args.runs_dir))


if __name__ == "__main__":
    main()
