"""Whether a listen or dial address stays on this machine.

Plain text and an unauthenticated server are only acceptable where nobody else can connect:
loopback addresses, ``localhost`` and Unix sockets.
"""

from __future__ import annotations

import ipaddress


def split_host(address: str) -> str:
    """The host part of ``host:port``, ``[v6]:port`` or a gRPC target such as ``dns:///h:p``."""
    if address.startswith(("unix:", "unix-abstract:")):
        return address
    if "://" in address:
        address = address.split("://", 1)[1].lstrip("/")
        if "/" in address:  # dns://authority/host:port
            address = address.rsplit("/", 1)[1]
    elif address.startswith(("dns:", "ipv4:", "ipv6:")):
        address = address.split(":", 1)[1]
    if address.startswith("["):
        return address[1 : address.find("]")] if "]" in address else address
    if address.count(":") == 1:
        return address.rsplit(":", 1)[0]
    return address


def is_local_address(address: str) -> bool:
    """True for loopback IPs, ``localhost`` and Unix sockets; False for anything reachable from elsewhere."""
    host = split_host(address)
    if host.startswith(("unix:", "unix-abstract:")):
        return True
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
