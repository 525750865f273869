"""Client channels with the same message limits as the servers."""

from __future__ import annotations

import grpc

from servicekit.server import CHANNEL_OPTIONS


def insecure_channel(address: str) -> grpc.aio.Channel:
    """An asyncio channel to ``address`` (loopback or a trusted network)."""
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
