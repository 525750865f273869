"""Blobs of an embedded capture service are linked into the run, each checked against its name."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from forge_service.local_blobs import take_local_blobs
from kforge_domain.blobs import BLOBS_DIR
from servicekit.errors import FailedPrecondition


def capture_folder(work_dir: Path, payloads: list[bytes]) -> tuple[str, dict[str, str]]:
    """A capture's folder as the capture service leaves it: its id and sha256 -> file name."""
    capture_id = uuid.uuid4().hex
    blobs = work_dir / capture_id / BLOBS_DIR
    blobs.mkdir(parents=True)
    names = {}
    for data in payloads:
        sha = hashlib.sha256(data).hexdigest()
        names[sha] = f"{sha}.safetensors"
        (blobs / names[sha]).write_bytes(data)
    return capture_id, names


def test_blobs_are_linked_into_the_run_and_keep_their_bytes(tmp_path: Path) -> None:
    capture_id, names = capture_folder(tmp_path / "captures", [bytes([i]) * (3 << 20) for i in range(6)])
    run = tmp_path / "run"
    run.mkdir()
    take_local_blobs(tmp_path / "captures", capture_id, {sha: (name, run / name) for sha, name in names.items()})
    for sha, name in names.items():
        taken = run / name
        assert hashlib.sha256(taken.read_bytes()).hexdigest() == sha
        source = tmp_path / "captures" / capture_id / BLOBS_DIR / name
        assert taken.stat().st_ino == source.stat().st_ino  # one filesystem: a link, no copy
    assert not list(run.glob("*.part"))


def test_a_damaged_or_missing_blob_fails_and_leaves_nothing_behind(tmp_path: Path) -> None:
    capture_id, names = capture_folder(tmp_path / "captures", [b"first", b"second"])
    (sha, name), (other, _) = names.items()
    (tmp_path / "captures" / capture_id / BLOBS_DIR / name).write_bytes(b"changed")
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(FailedPrecondition, match=f"blob {sha[:12]} is damaged"):
        take_local_blobs(tmp_path / "captures", capture_id, {sha: (name, run / name)})
    missing = hashlib.sha256(b"never written").hexdigest()
    with pytest.raises(FailedPrecondition, match=f"blob {missing[:12]} is not in the capture's folder"):
        take_local_blobs(tmp_path / "captures", capture_id, {missing: (f"{missing}.safetensors", run / "m")})
    with pytest.raises(FailedPrecondition, match="not a blob of the capture"):
        take_local_blobs(tmp_path / "captures", capture_id, {other: (f"{other}/../../x", run / "x")})
    with pytest.raises(FailedPrecondition, match="capture id must be 32 lowercase hex digits"):
        take_local_blobs(tmp_path / "captures", "../elsewhere", {})
    assert not list(run.iterdir())
