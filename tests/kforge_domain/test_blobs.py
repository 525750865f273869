"""Blobs are written under a temporary name and take theirs only once complete."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kforge_domain import blobs
from kforge_domain.blobs import file_digest, staged_file


def test_a_completed_block_renames_the_part_file_to_the_blob(tmp_path: Path) -> None:
    dest = tmp_path / "blob.safetensors"
    with staged_file(dest) as tmp:
        assert tmp == tmp_path / "blob.part" and not dest.exists()
        tmp.write_bytes(b"samples")
    assert dest.read_bytes() == b"samples" and not tmp.exists()


def test_a_failed_block_leaves_neither_a_part_file_nor_a_blob(tmp_path: Path) -> None:
    dest = tmp_path / "blob.safetensors"
    (tmp_path / "blob.part").write_bytes(b"left by a crash")  # a stale part file is not reused
    with pytest.raises(ValueError, match="damaged"), staged_file(dest) as tmp:
        assert not tmp.exists()
        tmp.write_bytes(b"half")
        raise ValueError("damaged")
    assert sorted(tmp_path.iterdir()) == []


def test_a_file_digest_is_the_sha256_of_all_its_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blobs, "HASH_CHUNK_BYTES", 7)  # several chunks and a short last one
    data = bytes(range(256)) * 3
    (tmp_path / "f").write_bytes(data)
    assert file_digest(tmp_path / "f") == hashlib.sha256(data).hexdigest()
