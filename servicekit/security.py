"""How a server or client secures its channel: TLS material, bearer token, explicit insecurity."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from servicekit.errors import ConfigurationError

#: Environment variables that carry secrets. Servers drop them from their own environment once
#: read, and anything that starts child processes passes :func:`scrubbed_environ` instead.
SECRET_ENV_VARS = frozenset({"KFORGE_TOKEN"})


@dataclass(frozen=True)
class Security:
    """Transport and auth options shared by servers and clients.

    ``tls_cert``/``tls_key`` are this side's certificate and key; ``tls_ca`` is the CA that
    verifies the peer (for a server, giving it requires client certificates: mutual TLS).
    ``token`` is the bearer token every RPC must carry. ``insecure`` allows plain text on a
    non-loopback address. ``tls_server_name`` (clients only) is the name the server's
    certificate is checked against when it differs from the address dialled (e.g. an IP).
    """

    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    token: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None

    def __post_init__(self) -> None:
        for name in ("tls_cert", "tls_key", "tls_ca"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigurationError("--tls-cert and --tls-key must be given together")
        if self.token is not None:
            if not self.token or self.token != self.token.strip() or any(c.isspace() for c in self.token):
                raise ConfigurationError("the bearer token must be non-empty and contain no whitespace")
            if not self.token.isascii() or not self.token.isprintable():
                raise ConfigurationError("the bearer token must be printable ASCII")

    def __repr__(self) -> str:
        token = "<hidden>" if self.token is not None else None
        return (
            f"Security(tls_cert={self.tls_cert!r}, tls_key={self.tls_key!r}, tls_ca={self.tls_ca!r}, "
            f"token={token}, insecure={self.insecure!r}, tls_server_name={self.tls_server_name!r})"
        )

    __str__ = __repr__

    @property
    def uses_tls(self) -> bool:
        """True when the channel is encrypted (a server needs a cert; a client a CA or a cert)."""
        return self.tls_cert is not None or self.tls_ca is not None

    @property
    def token_fingerprint(self) -> str | None:
        """A short, non-reversible name for the token, safe to log and to key limits by."""
        return None if self.token is None else token_fingerprint(self.token)


def token_fingerprint(token: str) -> str:
    """The first 12 hex digits of the token's SHA-256: identifies a client without revealing it."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def scrubbed_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``environ`` (default: this process's) without secret variables, for children."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k not in SECRET_ENV_VARS}
