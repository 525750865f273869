"""Code that capture and the sandbox must run alike and that needs torch.

``kforge_domain`` is torch-free (the packager runtime and the gRPC layers import it), so what
both services do with torch lives here instead, once:

- :mod:`kforge_torch.timing`: how a call is timed (the cache flushed before each call, device
  work only) and how a series of timed calls is summarised (median and interquartile range).
- :mod:`kforge_torch.caches`: the size of the cache that timing flushes, per device.

It imports torch, the standard library and ``kforge_domain``, never grpc, protobuf, generated
``kernel_forge`` code or a service (``tests/test_layering.py``). This file imports nothing.
"""
