"""Client channels with the same message limits, TLS and token handling as the servers."""

from __future__ import annotations

import logging

import grpc

from servicekit.addresses import is_local_address
from servicekit.auth import bearer_token_interceptors
from servicekit.errors import ConfigurationError
from servicekit.security import Security
from servicekit.server import CHANNEL_OPTIONS, KEEPALIVE_CLIENT_OPTIONS
from servicekit.tls import channel_credentials

log = logging.getLogger(__name__)


def insecure_channel(address: str) -> grpc.aio.Channel:
    """An asyncio channel to ``address`` (loopback or a trusted network)."""
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


def channel(address: str, security: Security | None = None) -> grpc.aio.Channel:
    """An asyncio channel to ``address`` secured as ``security`` says.

    The token rides as ``authorization`` metadata added by an interceptor, over TLS (a CA or a
    client certificate) or over a plain-text channel, allowed to loopback or with ``insecure``.
    Plain text to another machine is refused unless ``insecure`` is set, so a token is never sent
    in the clear by accident. Not as call credentials: grpcio implements those with a Python
    plugin that gRPC's own threads call into, taking the interpreter lock; a channel or server
    torn down while its thread holds that lock can then wait on them forever (grpc/grpc#42247),
    which froze whole test runs here at the stop of a TLS server with a token.
    """
    security = security if security is not None else Security()
    options = channel_options(security)
    credentials = secured_credentials(address, security)
    interceptors = bearer_token_interceptors(security.token) if security.token is not None else None
    if credentials is not None:
        return grpc.aio.secure_channel(address, credentials, options=options, interceptors=interceptors)
    return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)


def blocking_channel(address: str, security: Security | None = None) -> grpc.Channel:
    """A blocking channel secured like :func:`channel`; the caller sends the token as per-call
    metadata (blocking channels take no asyncio interceptors)."""
    security = security if security is not None else Security()
    options = channel_options(security)
    credentials = secured_credentials(address, security)
    if credentials is not None:
        return grpc.secure_channel(address, credentials, options=options)
    return grpc.insecure_channel(address, options=options)


def channel_options(security: Security) -> list[tuple[str, str | int]]:
    """Message limits, keepalive and, when dialling an IP, the name to check the certificate for."""
    options: list[tuple[str, str | int]] = [*CHANNEL_OPTIONS, *KEEPALIVE_CLIENT_OPTIONS]
    if security.tls_server_name:
        options.append(("grpc.ssl_target_name_override", security.tls_server_name))
    return options


def secured_credentials(address: str, security: Security) -> grpc.ChannelCredentials | None:
    """TLS credentials, or None for an allowed plain-text channel; plain text to another machine
    without ``insecure`` is refused."""
    if security.uses_tls:
        return channel_credentials(security)
    if not is_local_address(address):
        if not security.insecure:
            raise ConfigurationError(
                f"refusing a plain-text connection to non-loopback address {address}: "
                "give --tls-ca (and --tls-cert/--tls-key for mutual TLS), or --insecure on a trusted network"
            )
        log.warning("connecting to %s in plain text because --insecure was given", address)
    return None
