"""A private CA with server and client certificates, and a token, for tests and first deployments.

    python -m servicekit.devcerts certs/ --host sandbox.lab --ip 192.0.2.10

writes ``ca.pem``/``ca.key``, ``server.pem``/``server.key`` (valid for the hosts and IPs given
plus localhost, and usable as a client certificate by services that call other services),
``client.pem``/``client.key`` (for users' clients under mutual TLS) and ``token``. Keys and the
token are mode 600. Production deployments may use their own PKI instead; see
docs/deployment.md. Needs the ``cryptography`` package (in the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DevCertificates:
    """Paths of the files :func:`make_certificates` wrote."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    token_file: Path


def _crypto() -> Any:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("making certificates needs the 'cryptography' package: pip install cryptography") from exc
    return argparse.Namespace(
        x509=x509, hashes=hashes, serialization=serialization, ec=ec, eku=ExtendedKeyUsageOID, name_oid=NameOID
    )


def _write(path: Path, data: bytes, private: bool) -> None:
    """Write ``data``; private files are created mode 600, never readable by others even briefly."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _pem_key(c: Any, key: Any) -> bytes:
    return key.private_bytes(  # type: ignore[no-any-return]
        c.serialization.Encoding.PEM, c.serialization.PrivateFormat.PKCS8, c.serialization.NoEncryption()
    )


def make_certificates(
    directory: Path,
    hosts: Sequence[str] = (),
    ips: Sequence[str] = (),
    client_name: str = "kforge-client",
    valid_days: int = 365,
) -> DevCertificates:
    """Write a new CA, a server certificate for ``hosts``/``ips`` (+ localhost) and a client certificate."""
    c = _crypto()
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=valid_days)

    def name(common_name: str) -> Any:
        return c.x509.Name([c.x509.NameAttribute(c.name_oid.COMMON_NAME, common_name)])

    def builder(subject: str, issuer: Any, public_key: Any) -> Any:
        return (
            c.x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(c.x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
        )

    ca_key = c.ec.generate_private_key(c.ec.SECP256R1())
    ca_cert = (
        builder("Kernel Forge private CA", name("Kernel Forge private CA"), ca_key.public_key())
        .add_extension(c.x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            c.x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, c.hashes.SHA256())
    )

    def leaf(common_name: str, usages: list[Any], sans: list[Any]) -> tuple[Any, Any]:
        key = c.ec.generate_private_key(c.ec.SECP256R1())
        cert = (
            builder(common_name, ca_cert.subject, key.public_key())
            .add_extension(c.x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(c.x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(c.x509.SubjectAlternativeName(sans), critical=False)
            .sign(ca_key, c.hashes.SHA256())
        )
        return cert, key

    server_sans = [c.x509.DNSName(h) for h in ["localhost", *hosts]]
    server_sans += [c.x509.IPAddress(ipaddress.ip_address(ip)) for ip in ["127.0.0.1", "::1", *ips]]
    # Services that call others (the forge dials the sandbox) present the same certificate as clients.
    both_roles = [c.eku.SERVER_AUTH, c.eku.CLIENT_AUTH]
    server_cert, server_key = leaf(hosts[0] if hosts else "localhost", both_roles, server_sans)
    client_cert, client_key = leaf(client_name, [c.eku.CLIENT_AUTH], [c.x509.DNSName(client_name)])

    out = DevCertificates(
        directory,
        directory / "ca.pem",
        directory / "ca.key",
        directory / "server.pem",
        directory / "server.key",
        directory / "client.pem",
        directory / "client.key",
        directory / "token",
    )
    pem = c.serialization.Encoding.PEM
    _write(out.ca_cert, ca_cert.public_bytes(pem), private=False)
    _write(out.ca_key, _pem_key(c, ca_key), private=True)
    _write(out.server_cert, server_cert.public_bytes(pem), private=False)
    _write(out.server_key, _pem_key(c, server_key), private=True)
    _write(out.client_cert, client_cert.public_bytes(pem), private=False)
    _write(out.client_key, _pem_key(c, client_key), private=True)
    _write(out.token_file, (secrets.token_urlsafe(32) + "\n").encode(), private=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servicekit.devcerts", description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="where to write the files (created if missing)")
    parser.add_argument("--host", action="append", default=[], help="DNS name of the server (repeatable)")
    parser.add_argument("--ip", action="append", default=[], help="IP address of the server (repeatable)")
    parser.add_argument("--client-name", default="kforge-client", help="common name of the client certificate")
    parser.add_argument("--days", type=int, default=365, help="validity in days")
    args = parser.parse_args(argv)
    for ip in args.ip:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            parser.error(f"--ip {ip!r} is not an IP address")
    if args.days < 1:
        parser.error("--days must be at least 1")
    if (args.directory / "ca.key").exists():
        print(f"{args.directory} already holds a CA; choose an empty directory", file=sys.stderr)
        return 1
    out = make_certificates(args.directory, args.host, args.ip, args.client_name, args.days)
    print(f"wrote CA, server and client certificates and a token to {out.directory}{os.sep}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
