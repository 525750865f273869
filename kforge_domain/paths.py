"""Default locations on disk shared by the CLIs."""

from __future__ import annotations

from pathlib import Path

#: Where ``kforge`` keeps run directories and ``packager build`` looks for them, unless told otherwise.
DEFAULT_RUNS_DIR = Path("kforge-runs")
