"""How a server or client secures its channel: TLS material, bearer token, explicit insecurity."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Security:
    """Transport and auth options shared by servers and clients.

    ``tls_cert``/``tls_key`` are this side's certificate and key; ``tls_ca`` is the CA that
    verifies the peer (for a server, giving it requires client certificates: mutual TLS).
    ``token`` is the bearer token every RPC must carry. ``insecure`` allows plain text on a
    non-loopback address.
    """

    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    token: str | None = None
    insecure: bool = False
