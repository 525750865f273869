"""The forge's sandbox pool against real sandbox services: each takes the candidates it says it takes."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import grpc
import pytest

from capture_service import server as capture_server
from forge_service.clients import CaptureClient, SandboxClient, SandboxPool
from forge_service.runs import _first_device
from gpu_sandbox_service import server
from kernel_forge.capture.v1 import messages_pb2 as capture_pb2
from servicekit.errors import FailedPrecondition


def test_a_sandbox_with_two_run_slots_gets_two_candidates_at_once(tmp_path: Path) -> None:
    async def admitted() -> tuple[int, int, str]:
        bound = await server.start(backend="cpu", work_dir=tmp_path, workers=2)
        client = SandboxClient(bound.address)
        try:
            pool = SandboxPool([client])
            before = pool.size
            info = await _first_device(pool, "cpu")
            return before, pool.size, info.backend
        finally:
            await client.close()
            await bound.stop()

    assert asyncio.run(admitted()) == (1, 2, "cpu")


def test_an_address_given_twice_is_one_sandbox_taking_what_it_says(tmp_path: Path) -> None:
    async def admitted() -> tuple[int, int]:
        bound = await server.start(backend="cpu", work_dir=tmp_path, workers=2)
        clients = [SandboxClient(bound.address), SandboxClient(bound.address)]
        try:
            pool = SandboxPool(clients)
            await _first_device(pool, "cpu")
            return len(pool.clients), pool.size
        finally:
            for client in clients:
                await client.close()
            await bound.stop()

    assert asyncio.run(admitted()) == (1, 2)


def test_a_run_for_a_backend_no_sandbox_serves_names_what_each_serves(tmp_path: Path) -> None:
    async def refused() -> None:
        bound = await server.start(backend="cpu", work_dir=tmp_path)
        client = SandboxClient(bound.address)
        try:
            await _first_device(SandboxPool([client]), "cuda")
        finally:
            await client.close()
            await bound.stop()

    with pytest.raises(FailedPrecondition, match=r"no sandbox serves backend 'cuda' \(127\.0\.0\.1:\d+: cpu\)"):
        asyncio.run(refused())


TWO_OPS_MODEL = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(torch.tanh(x) * 2.0)


def get_model():
    return Model()


def get_inputs():
    return torch.randn(600, 1024)
"""


def test_blobs_are_fetched_several_at_a_time_each_checked_and_a_missing_one_fails_the_fetch(tmp_path: Path) -> None:
    spec = tmp_path / "two_ops.py"
    spec.write_text(TWO_OPS_MODEL)

    async def fetched() -> tuple[dict[str, Path], str]:
        bound = await capture_server.start(work_dir=tmp_path / "captures")
        client = CaptureClient(bound.address)
        try:
            capture_id = await client.capture(capture_pb2.StartCaptureRequest(model_spec=str(spec)), _ignore)
            cards, _ = await client.cards(capture_id)
            shas = {blob for card in cards for s in card.samples for blob in (s.inputs_blob, s.outputs_blob)}
            targets = {sha: tmp_path / "blobs" / sha for sha in shas}
            (tmp_path / "blobs").mkdir()
            (tmp_path / "again").mkdir()
            await client.fetch_blobs(capture_id, targets)
            with pytest.raises(grpc.aio.AioRpcError):  # one blob the capture does not hold
                await client.fetch_blobs(capture_id, {"0" * 64: tmp_path / "missing", **{
                    sha: tmp_path / "again" / sha for sha in shas}})
            return targets, capture_id
        finally:
            await client.close()
            await bound.stop(0)

    targets, _ = asyncio.run(fetched())
    assert len(targets) >= 4  # inputs and outputs of at least tanh, mul and sigmoid: more than one at a time
    assert all(hashlib.sha256(path.read_bytes()).hexdigest() == sha for sha, path in targets.items())
    assert not list(tmp_path.glob("*/*.part")) and not (tmp_path / "missing").exists()


async def _ignore(progress: object) -> None:
    return None
