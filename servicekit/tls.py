"""gRPC credentials built from a :class:`Security`'s certificate files.

Files are read once at start-up, with an error naming the file when one is missing or is not
PEM, so a misconfigured deployment fails before it listens rather than at the first handshake.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from servicekit.errors import ConfigurationError
from servicekit.security import Security


def read_pem(path: Path, what: str) -> bytes:
    """The bytes of a PEM file, or a :class:`ConfigurationError` naming ``what`` and ``path``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the {what} {path}: {exc.strerror or exc}") from exc
    if b"-----BEGIN " not in data:
        raise ConfigurationError(f"the {what} {path} is not a PEM file")
    return data


def server_credentials(security: Security) -> grpc.ServerCredentials | None:
    """TLS credentials for a server, or None for plain text.

    Giving ``tls_ca`` makes the server require and verify client certificates (mutual TLS).
    """
    if security.tls_cert is None or security.tls_key is None:
        if security.tls_ca is not None:
            raise ConfigurationError("--tls-ca on a server needs --tls-cert and --tls-key too")
        return None
    cert = read_pem(security.tls_cert, "TLS certificate")
    key = read_pem(security.tls_key, "TLS key")
    ca = read_pem(security.tls_ca, "TLS CA") if security.tls_ca is not None else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def channel_credentials(security: Security) -> grpc.ChannelCredentials:
    """TLS credentials for a client: the CA that verifies the server, plus a client cert for mTLS.

    Without ``tls_ca`` the system's trusted roots verify the server.
    """
    ca = read_pem(security.tls_ca, "TLS CA") if security.tls_ca is not None else None
    cert = read_pem(security.tls_cert, "TLS certificate") if security.tls_cert is not None else None
    key = read_pem(security.tls_key, "TLS key") if security.tls_key is not None else None
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
