"""A capture's blobs taken from an embedded capture service's own folder: linked, not streamed.

Started in this process (the embedded default), the capture service writes its blobs under a work
folder on the forge's own filesystem. Streaming gigabytes of samples through gRPC to the same disk
then costs tens of seconds (41 s for the SD3.5 VAE decoder's 16 GiB on an H100 host); a hard link
costs nothing, and a copy where no link can be made costs one pass. Each blob's sha256 is still
checked before it joins the run, as a streamed one is.
"""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kforge_domain.blobs import BLOBS_DIR, file_digest, is_blob_digest, staged_file
from servicekit.errors import FailedPrecondition

LINKERS = 4
"""Blobs taken at once (hashing releases the GIL)."""
_CAPTURE_ID = re.compile(r"[0-9a-f]{32}")


def take_local_blobs(work_dir: Path, capture_id: str, targets: dict[str, tuple[str, Path]]) -> None:
    """Link (or copy) each blob of capture ``capture_id`` under the capture service's ``work_dir``
    to its destination; ``targets`` maps sha256 to (file name in the capture, destination).
    Raises where a blob is missing or its bytes do not hash to its name."""
    if not _CAPTURE_ID.fullmatch(capture_id):
        raise FailedPrecondition(f"capture id must be 32 lowercase hex digits, got {capture_id!r}")
    blobs = Path(work_dir) / capture_id / BLOBS_DIR

    def take(item: tuple[str, tuple[str, Path]]) -> None:
        sha256, (name, dest) = item
        if not is_blob_digest(sha256) or not name.startswith(sha256) or Path(name).name != name:
            raise FailedPrecondition(f"not a blob of the capture: {name!r}")
        _take(blobs / name, sha256, dest)

    with ThreadPoolExecutor(max_workers=LINKERS) as pool:
        list(pool.map(take, targets.items()))


def _take(source: Path, sha256: str, dest: Path) -> None:
    if not source.is_file():
        raise FailedPrecondition(f"blob {sha256[:12]} is not in the capture's folder ({source})")
    with staged_file(dest) as tmp:
        try:
            os.link(source, tmp)
        except OSError:  # another filesystem, or links not allowed: one copy
            shutil.copyfile(source, tmp)
        if file_digest(tmp) != sha256:
            raise FailedPrecondition(f"blob {sha256[:12]} is damaged in the capture's folder")
