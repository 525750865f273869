"""``kforge ui``: the dashboard in the browser, against a given forge service or a local one."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from forge_service.config import BACKENDS
from forge_service.server import DEFAULT_RUNS_DIR
from servicekit.cli_options import add_security_arguments, security_from_args
from servicekit.errors import ConfigurationError
from servicekit.security import Security, scrubbed_environ
from ui.connection import ForgeTarget, blocking_channel
from ui.local_forge import local_forge

APP_PATH = Path(__file__).with_name("app.py")
DEFAULT_PORT = 8501


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``kforge ui`` to the ``kforge`` parser."""
    p = subparsers.add_parser("ui", help="the dashboard: watch, inspect and debug runs in the browser")
    p.add_argument("--forge", metavar="ADDR", help="a running forge service (default: start one here)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port the dashboard listens on")
    p.add_argument("--host", default="127.0.0.1", help="interface the dashboard listens on")
    p.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR, help="run directories of the local forge")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="backend of the local sandbox")
    add_security_arguments(p)
    p.set_defaults(func=cmd_ui)


def streamlit_command(port: int, host: str) -> list[str]:
    """The command that serves the app headless on ``host:port``."""
    return [
        sys.executable, "-m", "streamlit", "run", str(APP_PATH), "--server.port", str(port),
        "--server.address", host, "--server.headless", "true", "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", "minimal",
    ]


@contextlib.contextmanager
def forge_target(args: argparse.Namespace) -> Iterator[ForgeTarget]:
    """The forge given by --forge, or a local one for as long as the dashboard runs."""
    if args.forge:
        yield ForgeTarget(args.forge, security_from_args(args))
        return
    with local_forge(args.runs_dir, args.backend) as address:
        yield ForgeTarget(address, Security())


def cmd_ui(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise ConfigurationError(f"--port must be 1..65535, got {args.port}")
    if importlib.util.find_spec("streamlit") is None:
        raise ConfigurationError("the dashboard needs streamlit: pip install 'kernel-forge[ui]'")
    with forge_target(args) as target:
        blocking_channel(target).close()  # a target that cannot work is refused here, not in the browser
        print(f"dashboard on http://{args.host}:{args.port} (forge service {target.address})", flush=True)
        env = {**scrubbed_environ(), **target.to_environ()}
        proc = subprocess.Popen(streamlit_command(args.port, args.host), env=env)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            # Streamlit got the same SIGINT and is shutting down; give it a moment.
            try:
                return proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.terminate()
                return proc.wait()
