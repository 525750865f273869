"""``kforge ui``: the dashboard in the browser, against a given forge service or a local one."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from kforge_domain.backends import BACKEND_CHOICES
from kforge_domain.paths import DEFAULT_RUNS_DIR
from servicekit.cli_options import add_security_arguments, security_from_args
from servicekit.errors import ConfigurationError
from servicekit.security import Security, scrubbed_environ
from ui.connection import ForgeTarget, blocking_channel
from ui.local_forge import local_forge

APP_PATH = Path(__file__).with_name("app.py")
DEFAULT_PORT = 8501
STOP_TIMEOUT_S = 10.0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``kforge ui`` to the ``kforge`` parser."""
    p = subparsers.add_parser("ui", help="the dashboard: watch, inspect and debug runs in the browser")
    p.add_argument("--forge", metavar="ADDR", help="a running forge service (default: start one here)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port the dashboard listens on")
    p.add_argument("--host", default="127.0.0.1", help="interface the dashboard listens on")
    p.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR, help="run directories of the local forge")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default="auto", help="backend of the local sandbox")
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
    held = hold_port(args.host, args.port)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with forge_target(args) as target:
            blocking_channel(target).close()  # a target that cannot work is refused here, not in the browser
            held.close()
            print(f"dashboard on http://{args.host}:{args.port} (forge service {target.address})", flush=True)
            return run_streamlit(streamlit_command(args.port, args.host), {**scrubbed_environ(), **target.to_environ()})
    finally:
        held.close()
        signal.signal(signal.SIGTERM, previous)


def hold_port(host: str, port: int) -> socket.socket:
    """Bind the dashboard's port until Streamlit takes it over.

    The local forge's services listen on ports the system picks; holding this one keeps it from
    picking the dashboard's. A port already in use is refused before anything starts.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        held = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigurationError(f"the dashboard cannot listen on {host}:{port}: {exc}") from exc
    try:
        held.bind(address)  # without SO_REUSEADDR: no other socket may share the port while it is held
    except OSError as exc:
        held.close()
        raise ConfigurationError(f"the dashboard cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return held


def run_streamlit(command: list[str], env: dict[str, str]) -> int:
    """Run Streamlit until it exits; on an interrupt, stop it too before passing the interrupt on."""
    proc = subprocess.Popen(command, env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        # Streamlit may not have seen the signal (sent to this process alone).
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM ends ``kforge ui`` like Ctrl-C: Streamlit and the local forge are stopped."""
    raise KeyboardInterrupt
