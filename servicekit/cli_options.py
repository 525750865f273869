"""Command-line options for securing a server or a client, the same for every ``kforge serve``.

    parser = argparse.ArgumentParser()
    add_security_arguments(parser)
    security = security_from_args(parser.parse_args())

The token comes from ``--token-file`` or the ``KFORGE_TOKEN`` environment variable, never from
a command-line value (which any user on the host could read in the process list).
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
from collections.abc import MutableMapping
from pathlib import Path

from servicekit.errors import ConfigurationError
from servicekit.metrics import MetricsServer, start_metrics_server
from servicekit.security import Security

log = logging.getLogger(__name__)

TOKEN_ENV_VAR = "KFORGE_TOKEN"


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --tls-cert, --tls-key, --tls-ca, --tls-server-name, --token-file and --insecure."""
    group = parser.add_argument_group("security")
    group.add_argument("--tls-cert", type=Path, metavar="PEM", help="this side's TLS certificate (chain)")
    group.add_argument("--tls-key", type=Path, metavar="PEM", help="the private key of --tls-cert")
    group.add_argument(
        "--tls-ca",
        type=Path,
        metavar="PEM",
        help="CA that verifies the peer; on a server it also requires client certificates (mutual TLS)",
    )
    group.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="client only: the name to check the server certificate against, when dialling an IP",
    )
    group.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help=f"file holding the bearer token every RPC must carry (or set {TOKEN_ENV_VAR})",
    )
    group.add_argument(
        "--insecure",
        action="store_true",
        help="allow plain text or no token on a non-loopback address (trusted networks only)",
    )


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --metrics-port and --metrics-address for the Prometheus endpoint."""
    group = parser.add_argument_group("metrics")
    group.add_argument("--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics on this port")
    group.add_argument(
        "--metrics-address", default="127.0.0.1", metavar="ADDR", help="address of the metrics endpoint"
    )


def read_token_file(path: Path) -> str:
    """The token in ``path`` (surrounding whitespace removed), with a clear error when unusable."""
    try:
        text = path.read_text(encoding="ascii")
        mode = path.stat().st_mode
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read the token file {path}: {exc}") from exc
    token = text.strip()
    if not token:
        raise ConfigurationError(f"the token file {path} is empty")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the token file %s is readable by other users; chmod 600 it", path)
    return token


def security_from_args(
    args: argparse.Namespace, environ: MutableMapping[str, str] | None = None
) -> Security:
    """The :class:`Security` the parsed options describe.

    ``KFORGE_TOKEN`` is removed from ``environ`` (default: this process's environment) once
    read, so child processes — candidate kernels above all — never inherit it.
    """
    env = os.environ if environ is None else environ
    token_file: Path | None = getattr(args, "token_file", None)
    env_token = env.pop(TOKEN_ENV_VAR, None)
    if token_file is not None and env_token:
        raise ConfigurationError(f"give either --token-file or {TOKEN_ENV_VAR}, not both")
    token = read_token_file(token_file) if token_file is not None else (env_token.strip() if env_token else None)
    return Security(
        tls_cert=getattr(args, "tls_cert", None),
        tls_key=getattr(args, "tls_key", None),
        tls_ca=getattr(args, "tls_ca", None),
        token=token or None,
        insecure=bool(getattr(args, "insecure", False)),
        tls_server_name=getattr(args, "tls_server_name", None),
    )


def start_metrics_from_args(args: argparse.Namespace) -> MetricsServer | None:
    """Start the metrics endpoint when ``--metrics-port`` was given."""
    port: int | None = getattr(args, "metrics_port", None)
    if port is None:
        return None
    if not 0 <= port <= 65535:
        raise ConfigurationError(f"--metrics-port must be 0..65535, got {port}")
    try:
        return start_metrics_server(port, getattr(args, "metrics_address", "127.0.0.1"))
    except OSError as exc:
        raise ConfigurationError(f"cannot serve metrics on port {port}: {exc.strerror or exc}") from exc
