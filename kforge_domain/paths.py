"""Default locations on disk shared by the CLIs."""

from __future__ import annotations

import os
from pathlib import Path

#: Where ``kforge`` keeps run directories and ``packager build`` looks for them, unless told otherwise.
DEFAULT_RUNS_DIR = Path("kforge-runs")


def user_cache_dir(env_var: str, leaf: str) -> Path:
    """``$env_var``, else ``$XDG_CACHE_HOME/kforge/<leaf>`` (``~/.cache/kforge/<leaf>``): where a
    helper built once per machine is kept."""
    configured = os.environ.get(env_var)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kforge" / leaf
