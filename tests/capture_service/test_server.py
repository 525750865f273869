import argparse
import asyncio

from grpc_health.v1 import health_pb2, health_pb2_grpc

from capture_service.server import DEFAULT_ADDRESS, add_serve_arguments, start, start_from_args
from servicekit.client import insecure_channel


def test_serve_arguments_and_health(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("KFORGE_TOKEN", raising=False)
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    defaults = parser.parse_args([])
    assert defaults.address == DEFAULT_ADDRESS
    args = parser.parse_args(["--address", "127.0.0.1:0", "--work-dir", str(tmp_path / "captures")])

    async def probe() -> int:
        bound = await start_from_args(args)
        channel = insecure_channel(bound.address)
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="kernel_forge.capture.v1.CaptureService")
            )
            return reply.status
        finally:
            await channel.close()
            await bound.stop(0)

    assert asyncio.run(probe()) == health_pb2.HealthCheckResponse.SERVING
    assert (tmp_path / "captures").is_dir()


def test_start_without_a_work_dir_uses_a_fresh_one() -> None:
    async def run() -> int:
        bound = await start()
        await bound.stop(0)
        return bound.port

    assert asyncio.run(run()) > 0
