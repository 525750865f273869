"""A servicekit server with one slow RPC, run as a real process by test_server.py.

Prints ``{"port": N}`` once listening and, after a signal, ``{"stopped_by": ..., "finished": ...}``.
"""

import asyncio
import json

import grpc

from servicekit.server import ServiceBinding, create_server, serve_until_signal

finished = 0


async def slow(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    global finished
    await asyncio.sleep(float(request))
    finished += 1
    return b"done"


async def main() -> None:
    methods = {"Slow": grpc.unary_unary_rpc_method_handler(slow)}
    handler = grpc.method_handlers_generic_handler("kforge.test.Slow", methods)
    binding = ServiceBinding(None, lambda _s, server: server.add_generic_rpc_handlers((handler,)), "kforge.test.Slow")
    bound = await create_server([binding], "127.0.0.1:0")
    print(json.dumps({"port": bound.port}), flush=True)
    received = await serve_until_signal(bound, grace_s=5.0)
    print(json.dumps({"stopped_by": received.name if received else None, "finished": finished}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
