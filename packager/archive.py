"""The integrity layer of a .cast: a ZIP whose ``index.json`` lists every other file's sha256.

``index.json`` holds the format version, ``files`` (name -> sha256), ``files_sha256`` (the
sha256 of the canonical JSON of ``files``) and an optional HMAC-SHA256 ``signature`` over the
same bytes. Reading verifies all of it before any file is handed out, so nothing downstream
ever parses bytes that were not checked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packager.errors import (
    CastCorruptError,
    CastIntegrityError,
    CastSignatureError,
    CastVersionError,
)

FORMAT_VERSION = 1
INDEX_FILE = "index.json"
SIGNATURE_ALGORITHM = "hmac-sha256"
# ZIP members get a fixed timestamp so equal contents give equal archives.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _listing_bytes(files: Mapping[str, str]) -> bytes:
    return json.dumps(dict(files), sort_keys=True, separators=(",", ":")).encode()


def _signature(files: Mapping[str, str], key: bytes) -> str:
    return hmac.new(key, _listing_bytes(files), hashlib.sha256).hexdigest()


def write_archive(path: Path, files: Mapping[str, bytes], *, signing_key: bytes | None = None) -> None:
    """Write ``files`` plus their index to ``path`` atomically (an existing file survives a failure)."""
    if INDEX_FILE in files:
        raise ValueError(f"{INDEX_FILE} is reserved for the checksum index")
    if signing_key is not None and not signing_key:
        raise ValueError("the signing key is empty")
    listing = {name: sha256_hex(data) for name, data in sorted(files.items())}
    index = {
        "format_version": FORMAT_VERSION,
        "files": listing,
        "files_sha256": sha256_hex(_listing_bytes(listing)),
        "signature": (
            None if signing_key is None
            else {"algorithm": SIGNATURE_ALGORITHM, "value": _signature(listing, signing_key)}
        ),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(zipfile.ZipInfo(INDEX_FILE, _ZIP_EPOCH), json.dumps(index, indent=1, sort_keys=True))
            for name, data in sorted(files.items()):
                archive.writestr(zipfile.ZipInfo(name, _ZIP_EPOCH), data, compress_type=zipfile.ZIP_DEFLATED)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class VerifiedArchive:
    """The files of a .cast after every check passed."""

    files: dict[str, bytes]
    signed: bool
    signature_verified: bool


def _read_members(path: Path) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise CastIntegrityError(f"{path}: the archive holds {duplicates[0]!r} more than once")
            members: dict[str, bytes] = {}
            for name in names:
                try:
                    members[name] = archive.read(name)
                except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as exc:
                    raise CastIntegrityError(f"{path}: {name!r} is damaged: {exc}") from exc
            return members
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise CastCorruptError(f"{path}: not a readable .cast archive (damaged or truncated?): {exc}") from exc


def _parse_index(path: Path, raw: bytes) -> tuple[dict[str, str], str, object]:
    try:
        index = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CastCorruptError(f"{path}: {INDEX_FILE} is not valid JSON: {exc}") from exc
    if not isinstance(index, dict):
        raise CastCorruptError(f"{path}: {INDEX_FILE} is not a JSON object")
    version = index.get("format_version")
    if version != FORMAT_VERSION:
        raise CastVersionError(
            f"{path}: format version {version!r} is not supported (this runtime reads version {FORMAT_VERSION})"
        )
    files = index.get("files")
    digest = index.get("files_sha256")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise CastCorruptError(f"{path}: {INDEX_FILE} has no valid 'files' listing")
    if not isinstance(digest, str):
        raise CastCorruptError(f"{path}: {INDEX_FILE} has no 'files_sha256'")
    return files, digest, index.get("signature")


def _check_signature(path: Path, listing: dict[str, str], signature: object, key: bytes | None) -> tuple[bool, bool]:
    signed = signature is not None
    if key is None:
        return signed, False
    if not signed:
        raise CastSignatureError(f"{path}: a key was given but the cast is not signed")
    if not isinstance(signature, dict) or signature.get("algorithm") != SIGNATURE_ALGORITHM:
        raise CastSignatureError(f"{path}: unsupported signature (expected {SIGNATURE_ALGORITHM})")
    value = signature.get("value")
    if not isinstance(value, str) or not hmac.compare_digest(value, _signature(listing, key)):
        raise CastSignatureError(f"{path}: the signature does not verify with the given key")
    return True, True


def read_archive(path: Path | str, *, key: bytes | None = None) -> VerifiedArchive:
    """Read a .cast and verify format version, checksum list, signature (when ``key`` is given) and every file.

    Raises a :class:`~packager.errors.CastError` subclass naming the first problem found.
    """
    path = Path(path)
    if not path.is_file():
        raise CastCorruptError(f"{path}: no such file")
    members = _read_members(path)
    raw_index = members.pop(INDEX_FILE, None)
    if raw_index is None:
        raise CastCorruptError(f"{path}: {INDEX_FILE} is missing; this is not a .cast archive")
    listing, digest, signature = _parse_index(path, raw_index)
    if not hmac.compare_digest(sha256_hex(_listing_bytes(listing)), digest):
        raise CastIntegrityError(f"{path}: the checksum list does not match its own sha256 (files_sha256)")
    signed, verified = _check_signature(path, listing, signature, key)
    for name in sorted(members):
        if name not in listing:
            raise CastIntegrityError(f"{path}: {name!r} is in the archive but not in the checksum list")
    for name, expected in sorted(listing.items()):
        if name not in members:
            raise CastIntegrityError(f"{path}: {name!r} is listed but missing from the archive")
        if not hmac.compare_digest(sha256_hex(members[name]), expected):
            raise CastIntegrityError(f"{path}: {name!r} does not match its sha256 (modified or damaged)")
    return VerifiedArchive(files=members, signed=signed, signature_verified=verified)
