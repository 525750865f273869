"""Where the dashboard finds the forge service, and the blocking channel it talks over.

``kforge ui`` runs Streamlit as a child process, so the forge's address and the TLS options
cross over as environment variables. Streamlit reruns scripts in threads; a blocking gRPC
channel is thread-safe and simpler there than an asyncio one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

from servicekit import client as servicekit_client
from servicekit.auth import AUTHORIZATION_KEY, BEARER_PREFIX
from servicekit.cli_options import TOKEN_ENV_VAR
from servicekit.security import Security

FORGE_ENV_VAR = "KFORGE_UI_FORGE"
TLS_CA_ENV_VAR = "KFORGE_UI_TLS_CA"
TLS_CERT_ENV_VAR = "KFORGE_UI_TLS_CERT"
TLS_KEY_ENV_VAR = "KFORGE_UI_TLS_KEY"
TLS_SERVER_NAME_ENV_VAR = "KFORGE_UI_TLS_SERVER_NAME"
INSECURE_ENV_VAR = "KFORGE_UI_INSECURE"
DEFAULT_FORGE_ADDRESS = "127.0.0.1:50050"


@dataclass(frozen=True)
class ForgeTarget:
    """A forge service address and how to secure the connection to it."""

    address: str
    security: Security

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ForgeTarget:
        """The target ``kforge ui`` handed down (``KFORGE_UI_*``, ``KFORGE_TOKEN``)."""
        env = os.environ if environ is None else environ

        def path(name: str) -> Path | None:
            value = env.get(name, "")
            return Path(value) if value else None

        token = env.get(TOKEN_ENV_VAR, "").strip()
        return cls(
            address=env.get(FORGE_ENV_VAR, "") or DEFAULT_FORGE_ADDRESS,
            security=Security(
                tls_ca=path(TLS_CA_ENV_VAR), tls_cert=path(TLS_CERT_ENV_VAR), tls_key=path(TLS_KEY_ENV_VAR),
                tls_server_name=env.get(TLS_SERVER_NAME_ENV_VAR) or None, token=token or None,
                insecure=env.get(INSECURE_ENV_VAR, "") == "1",
            ),
        )

    def to_environ(self) -> dict[str, str]:
        """The environment variables that make :meth:`from_environ` give this target back."""
        sec = self.security
        env = {FORGE_ENV_VAR: self.address, INSECURE_ENV_VAR: "1" if sec.insecure else ""}
        for name, value in ((TLS_CA_ENV_VAR, sec.tls_ca), (TLS_CERT_ENV_VAR, sec.tls_cert),
                            (TLS_KEY_ENV_VAR, sec.tls_key)):
            env[name] = str(value) if value is not None else ""
        env[TLS_SERVER_NAME_ENV_VAR] = sec.tls_server_name or ""
        if sec.token:
            env[TOKEN_ENV_VAR] = sec.token
        return env


def blocking_channel(target: ForgeTarget) -> grpc.Channel:
    """A blocking channel to the forge, secured as :func:`servicekit.client.channel` secures an
    asyncio one; the bearer token rides as per-call metadata (see :class:`ui.client.ForgeClient`)."""
    return servicekit_client.blocking_channel(target.address, target.security)


def call_metadata(target: ForgeTarget) -> tuple[tuple[str, str], ...]:
    """Metadata every call carries: the bearer token, if there is one."""
    token = target.security.token
    if token is None:
        return ()
    return ((AUTHORIZATION_KEY, BEARER_PREFIX + token),)
