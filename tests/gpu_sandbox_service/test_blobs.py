from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpu_sandbox_service.blobs import BlobStore
from servicekit.errors import InvalidArgument, NotFound


async def chunks(data: bytes, size: int = 3) -> AsyncIterator[bytes]:
    for offset in range(0, len(data), size):
        yield data[offset:offset + size]


def test_streamed_blob_is_stored_under_its_digest(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    data = b"reference tensors"
    digest = hashlib.sha256(data).hexdigest()
    assert store.missing([digest, digest]) == [digest]
    assert asyncio.run(store.put_stream(digest, chunks(data))) == len(data)
    assert store.has(digest) and store.path(digest).read_bytes() == data and store.missing([digest]) == []
    assert asyncio.run(store.put_stream(digest, chunks(data))) == len(data)  # cached, still checked


def test_bytes_that_do_not_match_the_digest_are_refused(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    digest = hashlib.sha256(b"expected").hexdigest()
    with pytest.raises(InvalidArgument, match="hash to"):
        asyncio.run(store.put_stream(digest, chunks(b"something else")))
    assert not store.has(digest) and not list(tmp_path.iterdir())


def test_bad_digests_and_missing_blobs_are_named(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    with pytest.raises(InvalidArgument, match="not a sha256"):
        store.has("../../etc/passwd")
    with pytest.raises(NotFound, match="not uploaded"):
        store.path("a" * 64)


def test_a_capture_directory_blob_folder_is_a_store(tmp_path: Path) -> None:
    data = b"safetensors bytes"
    digest = hashlib.sha256(data).hexdigest()
    (tmp_path / f"{digest}.safetensors").write_bytes(data)
    assert BlobStore(tmp_path).path(digest).read_bytes() == data


def test_oversized_blob_is_refused(tmp_path: Path) -> None:
    store = BlobStore(tmp_path, max_blob_bytes=4)
    data = b"too large"
    with pytest.raises(InvalidArgument, match="exceeds"):
        asyncio.run(store.put_stream(hashlib.sha256(data).hexdigest(), chunks(data)))
