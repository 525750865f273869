"""Where a harness process stands before its candidate: when its candidate-independent start
(CUDA, inputs, references) ended and when its checks of the candidate began.

A process prepared while its candidate still builds (a ``held`` job of the fork server) waits
between the two until the sandbox says go through the pipe named by ``KF_GO_FD``; it closes the
pipe before the candidate's library is loaded. The times are ``time.monotonic()``, the clock the
sandbox reads too, so it can tell how much of a start overlapped the build.
"""

from __future__ import annotations

import os
import time

GO_FD = "KF_GO_FD"
GO = b"g"

#: A cold process started before its turn on the device (``isolation.run_isolated(turn=...)``)
#: finds its two pipe ends here, ``"<go>,<ready>"``: it writes :data:`READY` once its imports are
#: done, then waits for :data:`GO`; anything else, or the pipe's end, means it is not to go on.
GATE_FDS = "KF_GATE_FDS"
READY = b"r"


def wait_for_turn() -> None:
    """Where a gated process waits for its turn: after its imports, before CUDA or the card."""
    fds = os.environ.pop(GATE_FDS, None)
    if fds is None:
        return
    go, ready = (int(fd) for fd in fds.split(","))
    os.write(ready, READY)
    os.close(ready)
    _wait_for_go(go)


def _wait_for_go(fd: int) -> None:
    """Blocks until the sandbox writes :data:`GO` to pipe ``fd``; anything else, or the pipe's end,
    ends the process without a word: nothing of the candidate ran, nothing to report."""
    with os.fdopen(fd, "rb") as pipe:
        if pipe.read(len(GO)) != GO:
            os._exit(0)


class Phases:
    """The two moments, recorded by :meth:`prepared`; None where the process never got there."""

    def __init__(self) -> None:
        self.prepared_at_s: float | None = None
        self.checks_at_s: float | None = None

    def prepared(self) -> None:
        """Called once all that does not need the candidate is done; a held process waits here for
        its library, and ends without a word when told not to go on (the pipe closes instead)."""
        self.prepared_at_s = time.monotonic()
        fd = os.environ.pop(GO_FD, None)
        if fd is not None:
            _wait_for_go(int(fd))
        self.checks_at_s = time.monotonic()
