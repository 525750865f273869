"""Capture ids and their directories under a service's work dir.

A capture id is 32 hex digits (a uuid4); its directory is ``WORK_DIR/<id>``. Directories
outlive the process, so a restarted service still serves earlier captures.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from capture_service.blobs import BlobStore
from capture_service.errors import CaptureNotFound, InvalidCaptureOptions
from kforge_domain.card import CARDS_FILE, CardSet
from servicekit.errors import FailedPrecondition

_CAPTURE_ID = re.compile(r"[0-9a-f]{32}")


class CaptureStillRunning(FailedPrecondition):
    """Cards were asked for before the capture wrote them."""


class CaptureWorkspace:
    """Allocates capture directories and finds their cards and blobs."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.running: set[str] = set()

    def new_capture(self) -> tuple[str, Path]:
        capture_id = uuid.uuid4().hex
        directory = self.work_dir / capture_id
        directory.mkdir()
        return capture_id, directory

    def directory(self, capture_id: str) -> Path:
        if not _CAPTURE_ID.fullmatch(capture_id):
            raise InvalidCaptureOptions(f"capture id must be 32 lowercase hex digits, got {capture_id!r}")
        directory = self.work_dir / capture_id
        if not directory.is_dir():
            raise CaptureNotFound(f"no capture {capture_id}")
        return directory

    def card_set(self, capture_id: str) -> CardSet:
        """The capture's cards (also those a failed capture kept)."""
        directory = self.directory(capture_id)
        if not (directory / CARDS_FILE).is_file():
            if capture_id in self.running:
                raise CaptureStillRunning(f"capture {capture_id} is still running")
            raise CaptureNotFound(f"capture {capture_id} wrote no cards (it failed before capturing any)")
        return CardSet.load(directory)

    def blob_path(self, capture_id: str, sha256: str) -> Path:
        return BlobStore(self.directory(capture_id)).path(sha256)
