"""Content-addressed blob store: reference tensors and module programs, named by sha256.

Uploads are stored as ``<sha256>``; a capture directory's ``blobs/`` folder (``<sha256>.safetensors``,
``<sha256>.pt2``) is a valid store as is, so the CLI and the server read the same layout. The
naming rule is :mod:`kforge_domain.blobs`'s.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import AsyncIterable
from pathlib import Path

from kforge_domain.blobs import blob_digest, blob_file_name, is_blob_digest
from servicekit.errors import InvalidArgument, NotFound


def check_sha256(sha256: str) -> str:
    """Return ``sha256`` if it is 64 lowercase hex digits, else raise :class:`InvalidArgument`."""
    if not is_blob_digest(sha256):
        raise InvalidArgument(f"not a sha256 digest: {sha256[:80]!r}")
    return sha256


class BlobStore:
    """Blobs under ``root``; a blob is stored only after its bytes hash to its name."""

    def __init__(self, root: Path, max_blob_bytes: int = 8 * 1024**3) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_blob_bytes = max_blob_bytes

    def _find(self, sha256: str) -> Path | None:
        check_sha256(sha256)
        plain = self.root / blob_file_name(sha256)
        if plain.is_file():
            return plain
        return next((p for p in self.root.glob(f"{sha256}.*") if p.is_file()), None)

    def has(self, sha256: str) -> bool:
        return self._find(sha256) is not None

    def missing(self, digests: list[str]) -> list[str]:
        """The digests of ``digests`` not stored yet, in order, without duplicates."""
        return [d for d in dict.fromkeys(digests) if not self.has(d)]

    def path(self, sha256: str) -> Path:
        """Where the blob lies; :class:`NotFound` if it was never uploaded."""
        found = self._find(sha256)
        if found is None:
            raise NotFound(f"blob {sha256} is not uploaded")
        return found

    def put_bytes(self, data: bytes) -> str:
        """Store ``data`` and return its sha256."""
        sha256 = blob_digest(data)
        if not self.has(sha256):
            with self._writer(sha256) as (handle, finish):
                handle.write(data)
                finish(blob_digest(data))
        return sha256

    async def put_stream(self, sha256: str, chunks: AsyncIterable[bytes]) -> int:
        """Store a blob arriving in chunks; its bytes must hash to ``sha256``. Returns its size.

        A blob already stored is not rewritten (the chunks are still consumed).
        """
        check_sha256(sha256)
        digest = hashlib.sha256()
        size = 0
        exists = self.has(sha256)
        with self._writer(sha256) as (handle, finish):
            async for chunk in chunks:
                size += len(chunk)
                if size > self.max_blob_bytes:
                    raise InvalidArgument(f"blob {sha256} exceeds {self.max_blob_bytes} bytes")
                digest.update(chunk)
                if not exists:
                    handle.write(chunk)
            if digest.hexdigest() != sha256:
                raise InvalidArgument(f"blob bytes hash to {digest.hexdigest()}, not {sha256}")
            if not exists:
                finish(sha256)
        return size

    def _writer(self, sha256: str) -> _AtomicWriter:
        return _AtomicWriter(self.root, sha256)


class _AtomicWriter:
    """A temporary file renamed to the blob's name only when ``finish`` confirms the digest."""

    def __init__(self, root: Path, sha256: str) -> None:
        self.root = root
        self.sha256 = sha256
        self.done = False

    def __enter__(self):  # type: ignore[no-untyped-def]
        fd, name = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        self.tmp = Path(name)
        self.handle = os.fdopen(fd, "wb")

        def finish(actual: str) -> None:
            if actual != self.sha256:
                raise InvalidArgument(f"blob bytes hash to {actual}, not {self.sha256}")
            self.done = True

        return self.handle, finish

    def __exit__(self, *exc: object) -> None:
        self.handle.close()
        if self.done:
            self.tmp.chmod(0o644)
            self.tmp.replace(self.root / blob_file_name(self.sha256))
        else:
            self.tmp.unlink(missing_ok=True)
