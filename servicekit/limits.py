"""Per-client admission control: a bounded number running and a bounded queue per client.

The sandbox runs untrusted, expensive work; one client flooding it must get a clear
``RESOURCE_EXHAUSTED`` (and back off) instead of growing an unbounded queue that starves others.

    limiter = ClientLimiter(max_concurrent=2, max_queue=8, name="sandbox_evaluations")
    async with limiter(client_identity(context)):
        ...  # at most 2 per client run here; up to 8 more wait; the next is refused
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

from servicekit import metrics
from servicekit.errors import ResourceExhausted


@dataclass
class _ClientState:
    running: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)


@dataclass(frozen=True)
class ClientUsage:
    """How much of its limits a client is using right now."""

    running: int
    queued: int


class ClientLimiter:
    """Admits at most ``max_concurrent`` holders per client, queues up to ``max_queue`` more (FIFO).

    Past both, entering raises :class:`servicekit.errors.ResourceExhausted` at once, which the
    server's error interceptor turns into ``RESOURCE_EXHAUSTED``. A waiter cancelled (e.g. its
    RPC's deadline passed) leaves the queue without taking a slot. One event loop only.
    """

    def __init__(self, max_concurrent: int, max_queue: int, name: str = "clients") -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
        if max_queue < 0:
            raise ValueError(f"max_queue must be at least 0, got {max_queue}")
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue
        self.name = name
        self._clients: dict[str, _ClientState] = {}

    def __repr__(self) -> str:
        return f"ClientLimiter(max_concurrent={self.max_concurrent}, max_queue={self.max_queue}, name={self.name!r})"

    def __call__(self, client: str) -> AbstractAsyncContextManager[None]:
        """An async context manager holding one of ``client``'s slots while inside it."""
        return self._slot(client)

    def usage(self, client: str) -> ClientUsage:
        state = self._clients.get(client)
        return ClientUsage(0, 0) if state is None else ClientUsage(state.running, len(state.waiters))

    @property
    def queued_total(self) -> int:
        return sum(len(s.waiters) for s in self._clients.values())

    @asynccontextmanager
    async def _slot(self, client: str) -> AsyncIterator[None]:
        state = self._clients.setdefault(client, _ClientState())
        if state.running < self.max_concurrent and not state.waiters:
            state.running += 1
        else:
            if len(state.waiters) >= self.max_queue:
                metrics.CLIENT_LIMIT_REJECTIONS.labels(limiter=self.name).inc()
                raise ResourceExhausted(
                    f"client {client} has {state.running} requests running and {len(state.waiters)} queued "
                    f"(limits: {self.max_concurrent} running, {self.max_queue} queued); retry later"
                )
            await self._wait_for_slot(client, state)
        try:
            yield
        finally:
            self._release(client)

    async def _wait_for_slot(self, client: str, state: _ClientState) -> None:
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.waiters.append(granted)
        self._publish_queue_length()
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(client)  # a slot was handed over just as we were cancelled
            else:
                if granted in state.waiters:  # a release may already have skipped past it
                    state.waiters.remove(granted)
                self._forget_if_idle(client, state)
            raise
        finally:
            self._publish_queue_length()

    def _release(self, client: str) -> None:
        state = self._clients[client]
        state.running -= 1
        while state.waiters:
            waiter = state.waiters.popleft()
            if not waiter.done():
                state.running += 1
                waiter.set_result(None)
                break
        self._forget_if_idle(client, state)
        self._publish_queue_length()

    def _forget_if_idle(self, client: str, state: _ClientState) -> None:
        if state.running == 0 and not state.waiters and self._clients.get(client) is state:
            del self._clients[client]

    def _publish_queue_length(self) -> None:
        metrics.QUEUE_LENGTH.labels(queue=self.name).set(self.queued_total)
