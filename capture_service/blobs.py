"""Content-addressed blobs of a capture directory: ``DIR/blobs/<sha256><suffix>``.

Reference samples are safetensors files (inputs blob keys ``input.0..N``, outputs blob keys
``output.0..M``); module programs are ``torch.export`` archives (``.pt2``). A blob's name is
the sha256 of its bytes (the rule is :mod:`kforge_domain.blobs`'s), so equal samples are stored
once and any reader can verify them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from capture_service.errors import CaptureNotFound, InvalidCaptureOptions
from kforge_domain.blobs import (
    BLOB_SUFFIXES,
    BLOBS_DIR,
    SAFETENSORS_SUFFIX,
    blob_digest,
    blob_file_name,
    is_blob_digest,
    sample_key,
)


def check_digest(sha256: str) -> str:
    """``sha256`` if it is 64 lowercase hex digits (it becomes a file name), else an error."""
    if not is_blob_digest(sha256):
        raise InvalidCaptureOptions(f"blob digest must be 64 lowercase hex digits, got {sha256!r}")
    return sha256


def tensors_bytes(prefix: str, tensors: Sequence[torch.Tensor]) -> bytes:
    """The safetensors encoding of ``tensors`` under keys ``prefix.0 ... prefix.N``."""
    payload = {sample_key(prefix, i): t.detach().to("cpu", copy=True).contiguous() for i, t in enumerate(tensors)}
    return save_safetensors(payload)


class BlobStore:
    """The blobs folder of one capture directory."""

    def __init__(self, capture_dir: Path) -> None:
        self.root = Path(capture_dir) / BLOBS_DIR

    def put(self, data: bytes, suffix: str) -> str:
        """Store ``data`` (idempotent) and return its sha256."""
        digest = blob_digest(data)
        path = self.root / blob_file_name(digest, suffix)
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{digest}.{os.getpid()}.{threading.get_ident()}.tmp")  # writers may race
            tmp.write_bytes(data)
            tmp.replace(path)
        return digest

    def put_tensors(self, prefix: str, tensors: Sequence[torch.Tensor]) -> str:
        return self.put(tensors_bytes(prefix, tensors), SAFETENSORS_SUFFIX)

    def path(self, sha256: str) -> Path:
        """The file holding blob ``sha256``."""
        check_digest(sha256)
        for suffix in BLOB_SUFFIXES:
            candidate = self.root / blob_file_name(sha256, suffix)
            if candidate.is_file():
                return candidate
        raise CaptureNotFound(f"no blob {sha256} in {self.root.parent}")

    def read_tensors(self, sha256: str) -> list[torch.Tensor]:
        """The tensors of a samples blob, in key order (``input.0``, ``input.1``, ...)."""
        loaded = load_safetensors(self.path(sha256).read_bytes())
        return [loaded[k] for k in sorted(loaded, key=lambda k: int(k.rsplit(".", 1)[1]))]
