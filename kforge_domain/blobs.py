"""How content-addressed blobs are named: by the sha256 of their bytes.

Samples are safetensors blobs (an inputs blob with keys ``input.0 ... input.N``, an outputs blob
with ``output.0 ... output.M``); module programs are ``torch.export`` archives. A blob's file is
``<sha256><suffix>`` in a ``blobs/`` folder (a capture directory, a run directory) or in a
sandbox's store, so equal bytes are stored once and any reader can verify them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BLOBS_DIR = "blobs"
SAFETENSORS_SUFFIX = ".safetensors"
PROGRAM_SUFFIX = ".pt2"
BLOB_SUFFIXES = (SAFETENSORS_SUFFIX, PROGRAM_SUFFIX)
INPUT_PREFIX = "input"
OUTPUT_PREFIX = "output"

_SHA256 = re.compile(r"[0-9a-f]{64}")
HASH_CHUNK_BYTES = 8 << 20


def blob_digest(data: bytes) -> str:
    """The name of a blob holding ``data``: its sha256, 64 lowercase hex digits."""
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    """The sha256 of a file's bytes, read a chunk at a time (samples are gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as blob:
        while chunk := blob.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


@contextmanager
def staged_file(dest: Path) -> Iterator[Path]:
    """A ``.part`` path beside ``dest`` to write, renamed to ``dest`` when the block completes and
    removed when it raises or is cancelled: a reader never sees a partial or unchecked blob."""
    tmp = dest.with_suffix(".part")
    tmp.unlink(missing_ok=True)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(dest)


def is_blob_digest(text: str) -> bool:
    """Whether ``text`` can name a blob (64 lowercase hex digits, so it is a safe file name)."""
    return _SHA256.fullmatch(text) is not None


def blob_file_name(digest: str, suffix: str = "") -> str:
    """The file name of blob ``digest`` with ``suffix`` (``.safetensors``, ``.pt2`` or none)."""
    return f"{digest}{suffix}"


def sample_key(prefix: str, index: int) -> str:
    """The safetensors key of tensor ``index`` of a samples blob (``input.0``, ``output.2``)."""
    return f"{prefix}.{index}"
