"""Guards shared by every test: gRPC's asyncio objects never outlive the event loop that made them."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def free_grpc_objects_of_finished_loops() -> Iterator[None]:
    """Collect reference cycles once each test ends.

    grpc.aio keeps one process-wide completion queue alive while any channel, server or call
    exists, and binds it to every event loop that made one. A call left in a reference cycle by a
    test whose loop has closed keeps that queue bound to the dead loop until the collector happens
    to free it, at an arbitrary moment inside a later test's loop; the later test then waits
    forever for an event that is never delivered. Collecting here frees such objects while no
    loop runs, so each test starts with the queue shut down.
    """
    yield
    gc.collect()
