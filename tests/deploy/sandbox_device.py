"""Ask a sandbox service which device it is, with the same security options as ``kforge``.

    python -m tests.deploy.sandbox_device 192.0.2.1:50054 --tls-ca ca.pem --token-file token

prints its ``GetDeviceInfo`` answer as JSON (the ``sandbox_id`` names that one process), so a
test on another host can tell which sandbox a run's results came from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from google.protobuf import json_format

from kernel_forge.sandbox.v1 import messages_pb2 as sandbox_pb2
from kernel_forge.sandbox.v1 import service_pb2_grpc as sandbox_grpc
from servicekit.cli_options import add_security_arguments, security_from_args
from servicekit.client import channel


async def device_info(args: argparse.Namespace) -> dict:
    chan = channel(args.address, security_from_args(args))
    try:
        stub = sandbox_grpc.SandboxServiceStub(chan)
        info = await stub.GetDeviceInfo(sandbox_pb2.GetDeviceInfoRequest(), timeout=args.timeout)
    finally:
        await chan.close()
    return json_format.MessageToDict(info, preserving_proto_field_name=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("address", help="HOST:PORT of the sandbox service")
    parser.add_argument("--timeout", type=float, default=30.0, help="deadline of the call in seconds")
    add_security_arguments(parser)
    print(json.dumps(asyncio.run(device_info(parser.parse_args(argv)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
