"""CaptureService over a real grpc.aio server on 127.0.0.1, capturing in real child processes."""

import asyncio
import hashlib
from pathlib import Path

import grpc
import pytest

from capture_service.server import start
from kernel_forge.capture.v1 import messages_pb2 as capture_pb2
from kernel_forge.capture.v1 import service_pb2_grpc as capture_grpc
from kforge_domain.card import OperatorCard
from servicekit.client import insecure_channel

BIG_INPUT_MODEL = """
import torch


class Scale(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x)


def get_model():
    return Scale()


def get_inputs():
    return torch.randn(600, 1024)
"""


async def _with_stub(work_dir: Path, body):
    bound = await start(work_dir=work_dir)
    channel = insecure_channel(bound.address)
    try:
        return await body(capture_grpc.CaptureServiceStub(channel))
    finally:
        await channel.close()
        await bound.stop(0)


def test_capture_list_and_fetch_blobs_in_chunks(write_spec, tmp_path) -> None:
    spec = write_spec(BIG_INPUT_MODEL, "big.py")

    async def body(stub):
        updates = [u async for u in stub.StartCapture(capture_pb2.StartCaptureRequest(model_spec=str(spec)))]
        capture_id = updates[0].capture_id
        listing = await stub.ListCards(capture_pb2.ListCardsRequest(capture_id=capture_id))
        card = next(OperatorCard.from_json(c.card_json) for c in listing.cards if c.op == "aten::tanh.default")
        sha = card.samples[0].inputs_blob
        chunks = [c async for c in stub.FetchBlob(capture_pb2.FetchBlobRequest(capture_id=capture_id, sha256=sha))]
        return updates, listing, card, sha, chunks

    updates, listing, card, sha, chunks = asyncio.run(_with_stub(tmp_path, body))
    assert {u.capture_id for u in updates} == {updates[0].capture_id}
    assert "capturing" in [u.stage for u in updates] and updates[-1].stage == "done" and updates[-1].done
    assert listing.total_eager_us > 0 and card.inputs[0].shape == [600, 1024]
    assert len(chunks) == 3 and all(len(c.data) == 1 << 20 for c in chunks[:-1])
    assert [c.offset for c in chunks] == [0, 1 << 20, 2 << 20]
    data = b"".join(c.data for c in chunks)
    assert len(data) == chunks[0].total_size and hashlib.sha256(data).hexdigest() == sha
    assert (tmp_path / updates[0].capture_id / "cards.json").is_file()


def test_failures_stream_a_failed_update_then_their_status(write_spec, tmp_path) -> None:
    spec = write_spec("import torch\ndef get_model():\n    return torch.nn.ReLU()\n"
                      "def get_inputs():\n    raise KeyError('tokens')\n", "bad_inputs.py")

    async def body(stub):
        seen = []
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            async for update in stub.StartCapture(capture_pb2.StartCaptureRequest(model_spec=str(spec))):
                seen.append(update)
        errors = []
        for call in (
            stub.ListCards(capture_pb2.ListCardsRequest(capture_id="0" * 32)),
            stub.ListCards(capture_pb2.ListCardsRequest(capture_id="../etc")),
            stub.ListCards(capture_pb2.ListCardsRequest(capture_id=seen[0].capture_id)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call
            errors.append(info.value.code())
        with pytest.raises(grpc.aio.AioRpcError) as bad_sha:
            async for _ in stub.FetchBlob(capture_pb2.FetchBlobRequest(capture_id=seen[0].capture_id, sha256="zz")):
                pass
        with pytest.raises(grpc.aio.AioRpcError) as bad_device:
            async for _ in stub.StartCapture(capture_pb2.StartCaptureRequest(model_spec="m.py", device="tpu")):
                pass
        return seen, failed.value, errors, bad_sha.value, bad_device.value

    seen, failed, errors, bad_sha, bad_device = asyncio.run(_with_stub(tmp_path, body))
    assert seen[-1].stage == "failed" and "get_inputs() raised KeyError: 'tokens'" in seen[-1].error
    assert failed.code() == grpc.StatusCode.INVALID_ARGUMENT and "KeyError" in failed.details()
    assert errors == [grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND]
    assert bad_sha.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_device.code() == grpc.StatusCode.INVALID_ARGUMENT and "device" in bad_device.details()
