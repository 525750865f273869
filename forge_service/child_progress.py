"""Progress from a measuring child process, passed on as it happens.

The end-to-end check runs in a child process for minutes on a large model (compiling it twice
per mode, pruning kernels one compilation at a time). Its result comes last on stdout; what it
is doing goes to stderr as lines marked with :data:`PREFIX`, which the parent hands to a
callback the moment each arrives, so a run shows where the time goes instead of falling silent.
Unmarked stderr is kept as the tail that explains a failure.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PREFIX = "kforge-progress: "
TAIL_LINES = 3


def report(message: str) -> None:
    """In the child: one progress line for the parent (:func:`run_reporting`)."""
    print(PREFIX + message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ChildOutcome:
    """How the child ended: its exit code (None: killed at the time limit), stdout, and the last
    unmarked stderr lines."""

    returncode: int | None
    stdout: str
    stderr_tail: list[str]

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_reporting(cmd: Sequence[str], timeout_s: float, on_progress: Callable[[str], None],
                  env: dict[str, str] | None = None) -> ChildOutcome:
    """Run ``cmd``, calling ``on_progress`` in this thread with each progress line as the child
    writes it (so a context this thread carries, such as a run's event sink, sees it); the child
    is killed after ``timeout_s``."""
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    watchdog = threading.Timer(timeout_s, kill)
    watchdog.start()
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    try:
        for line in proc.stderr:
            line = line.rstrip("\n")
            if line.startswith(PREFIX):
                on_progress(line[len(PREFIX):])
            elif line.strip():
                tail.append(line)
        proc.wait()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5.0)
    return ChildOutcome(None if killed.is_set() else proc.returncode, "".join(stdout), list(tail))

