import hashlib

import pytest
import torch

from capture_service.blobs import BlobStore, check_digest
from capture_service.errors import CaptureNotFound, InvalidCaptureOptions


def test_tensors_round_trip_under_their_content_digest(tmp_path) -> None:
    store = BlobStore(tmp_path)
    x, y = torch.randn(3, 4).t(), torch.arange(5)
    digest = store.put_tensors("input", [x, y, x])
    path = store.path(digest)
    assert path.name == f"{digest}.safetensors" and path.parent == tmp_path / "blobs"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    back = store.read_tensors(digest)
    assert len(back) == 3 and torch.equal(back[0], x) and torch.equal(back[1], y)
    assert store.put_tensors("input", [x.clone(), y, x]) == digest


def test_unknown_and_malformed_digests_are_rejected(tmp_path) -> None:
    store = BlobStore(tmp_path)
    with pytest.raises(CaptureNotFound):
        store.path("0" * 64)
    with pytest.raises(InvalidCaptureOptions):
        store.path("../../etc/passwd")
    assert check_digest("a" * 64) == "a" * 64
