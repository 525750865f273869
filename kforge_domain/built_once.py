"""A helper library built once per machine and kept: what the native runtime helpers and the cpu
timer's eviction helper share.

The build writes into a temporary folder beside the target and renames the result into place, so
processes building at once never load a half-written library, and a failed build leaves nothing.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path


class BuildFailed(RuntimeError):
    """The compiler could not be run, or it failed; the message holds why (its stderr)."""


def build_once(target: Path, command: Callable[[Path], Sequence[str]], timeout_s: float) -> Path:
    """``target``, built by running ``command(output)`` unless it is already there."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        partial = Path(work) / target.name
        try:
            done = subprocess.run(list(command(partial)), capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            raise BuildFailed(str(exc)) from exc
        if done.returncode != 0:
            raise BuildFailed(done.stderr.strip())
        os.replace(partial, target)
    return target
