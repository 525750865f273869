"""The packaging phase's steps as run events, so a run shows its end-to-end check as it works.

Packaging runs in a worker thread and measures the model in child processes, for minutes on a
large model. The run's lifecycle sets a sink for its own context, which ``asyncio.to_thread``
carries into that thread; each step announced there becomes one of the run's ``log`` events,
which ``kforge optimize`` prints with or without ``-v`` and the dashboard's feed lists. Without a
sink (packaging called directly) a step is logged instead.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from contextvars import ContextVar

Sink = Callable[[str], None]

_SINK: ContextVar[Sink | None] = ContextVar("kforge_phase_sink", default=None)


def announce(message: str, logger: logging.Logger) -> None:
    """``message`` as a run event where a run listens, else as ``logger``'s info record."""
    sink = _SINK.get()
    if sink is None:
        logger.info("%s", message)
    else:
        sink(message)


@contextlib.contextmanager
def phase_events(sink: Sink) -> Iterator[None]:
    """While the block runs, steps announced in this context (and threads started from it) go to ``sink``."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)
