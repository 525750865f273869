"""``capture_model``: capture a MODEL_SPEC in a child process and return its cards.

The user's model runs in ``python -m capture_service.worker``, so a model that crashes the
interpreter (a segfault, an abort in native code, CUDA poisoning) cannot take down the CLI or
a server. Errors come back by class name and are re-raised here.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import capture_service
from capture_service.errors import CaptureCancelled, CaptureCrashed, error_class
from capture_service.options import DEFAULT_BUDGET_BYTES, DEFAULT_SAMPLES, CaptureOptions
from capture_service.progress import CaptureProgress, ProgressFn, ignore_progress
from capture_service.spec import LoadedModel, load_model_spec
from capture_service.worker import request_json
from kforge_domain.card import CardSet

LOG_FILE = "capture.log"
LOG_TAIL_CHARS = 2000
_POLL_S = 0.2

__all__ = ["LOG_FILE", "LoadedModel", "capture_model", "load_model_spec"]


def capture_model(
    model_spec: str,
    device: str = "cpu",
    grad_mode: str = "inference",
    samples: int = DEFAULT_SAMPLES,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    out_dir: Path | str = "capture",
    progress: ProgressFn | None = None,
    *,
    cancel: threading.Event | None = None,
    allow_unsampled: bool = False,
    trace_compiled: bool = False,
) -> CardSet:
    """Capture ``model_spec`` into ``out_dir`` (``cards.json``, ``blobs/``, ``capture.log``).

    Raises the capture's :class:`~capture_service.errors.CaptureError`; where the capture got
    far enough, the cards captured before the failure are in ``out_dir`` all the same.
    """
    options = CaptureOptions(device, grad_mode, samples, budget_bytes, allow_unsampled, trace_compiled).validated()
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    report = progress or ignore_progress
    read_fd, write_fd = os.pipe()
    package_root = str(Path(capture_service.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "capture_service.worker", "--events-fd", str(write_fd)]
    with open(out / LOG_FILE, "wb") as log:
        try:
            process = subprocess.Popen(
                [*command, request_json(model_spec, options, out)],
                pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        finally:
            os.close(write_fd)
    events = _Events(read_fd)
    stage = "starting"
    outcome: dict[str, object] | None = None
    try:
        while outcome is None:
            if cancel is not None and cancel.is_set():
                process.kill()
                process.wait()
                raise CaptureCancelled(f"capture of {model_spec} cancelled during {stage}")
            lines = events.poll(_POLL_S)
            if lines is None:
                break
            for event in lines:
                if event.get("event") == "progress":
                    update = CaptureProgress.from_json(event)
                    stage = update.stage
                    report(update)
                else:
                    outcome = event
    finally:
        events.close()
    returncode = process.wait()
    if outcome is None:
        raise CaptureCrashed(_crash_message(model_spec, returncode, stage, out))
    if outcome.get("event") == "error":
        report(CaptureProgress("failed", str(outcome["message"]), 1.0))
        raise error_class(str(outcome["error"]))(str(outcome["message"]))
    card_set = CardSet.load(out)
    report(CaptureProgress("done", f"captured {len(card_set.cards)} cards", 1.0, len(card_set.cards)))
    return card_set


class _Events:
    """JSON lines from the worker's events pipe, read without blocking past a timeout."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def poll(self, timeout_s: float) -> list[dict[str, object]] | None:
        """Complete events read within ``timeout_s``; None once the worker closed the pipe."""
        ready, _, _ = select.select([self.fd], [], [], timeout_s)
        if not ready:
            return []
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            return None
        self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in complete if line.strip()]

    def close(self) -> None:
        os.close(self.fd)


def _crash_message(model_spec: str, returncode: int, stage: str, out: Path) -> str:
    if returncode < 0:
        try:
            how = f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"was killed by signal {-returncode}"
    else:
        how = f"exited with status {returncode}"
    tail = (out / LOG_FILE).read_text(errors="replace")[-LOG_TAIL_CHARS:].strip()
    last_output = f"; its last output:\n{tail}" if tail else ""
    return f"the process capturing {model_spec} {how} during {stage}{last_output}"
