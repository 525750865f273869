"""Fixtures: real cards built from real calls, the hostile corpus, and a real sandbox server in a child process."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import torch

from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.cardkit import card_from_call
from gpu_sandbox_service.models import Limits
from kernel_forge.common.v1 import types_pb2
from kernel_forge.sandbox.v1 import service_pb2_grpc
from kforge_domain.card import OperatorCard

CORPUS = Path(__file__).parent / "corpus"
# Small enough to keep each evaluation about the cost of starting the harness.
TEST_LIMITS = Limits(compile_timeout_s=30, run_timeout_s=25, run_address_space_bytes=6 * 1024**3,
                     compile_address_space_bytes=2 * 1024**3)


@dataclass(frozen=True)
class CorpusEntry:
    """One corpus kernel: its source (prelude included) and the verdict it must get."""

    name: str
    source: str
    expected: str


def load_corpus(kind: str) -> list[CorpusEntry]:
    folder = CORPUS / kind
    prelude = (CORPUS / ("cuda" if kind == "cuda" else "cpu") / "_prelude.inc").read_text()
    entries = []
    for path in sorted(folder.glob("*.c*")):
        text = path.read_text()
        match = re.search(r"expect: ([A-Z_]+)", text)
        assert match, f"{path} lacks an 'expect:' line"
        entries.append(CorpusEntry(path.stem, prelude + "\n" + text, match.group(1)))
    return entries


def softmax_card(store: BlobStore, rows: int = 64, cols: int = 256) -> OperatorCard:
    torch.manual_seed(0)
    return card_from_call("aten::_softmax.default", [torch.randn(rows, cols) * 3, -1, False], {}, store)


@pytest.fixture
def blob_store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs")


class SandboxClient:
    """A blocking client of a real SandboxService on loopback."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.channel = grpc.insecure_channel(address)
        self.stub = service_pb2_grpc.SandboxServiceStub(self.channel)

    def upload(self, data: bytes, chunk: int = 1 << 14) -> str:
        digest = hashlib.sha256(data).hexdigest()
        chunks = [types_pb2.BlobChunk(sha256=digest, offset=o, total_size=len(data), data=data[o:o + chunk])
                  for o in range(0, len(data), chunk)]
        self.stub.UploadBlob(iter(chunks))
        return digest


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxClient]:
    """A cpu sandbox served from a child process (``tests/service_process.py`` says why)."""
    from tests.gpu_sandbox_service.sandbox_process import sandbox_process

    with sandbox_process(tmp_path_factory.mktemp("sandbox")) as address:
        client = SandboxClient(address)
        yield client
        client.channel.close()
