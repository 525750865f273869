"""Exporting a finished run as a run bundle (:mod:`packager.bundle`), for ``packager build``.

The packager reads only the bundle, never the run store, so it runs where the forge is not
installed. A run's default bundle lies in its run directory, where ``packager build RUN`` finds it.
"""

from __future__ import annotations

from pathlib import Path

from forge_service.store import DB_FILE, package_inputs
from packager.bundle import RUN_BUNDLE_DIR, RunBundle, write_bundle


def export_bundle(run_dir: Path, out: Path | None = None) -> tuple[Path, RunBundle]:
    """Write the bundle of the run in ``run_dir`` to ``out`` (default ``run_dir/bundle``).

    Raises LookupError when ``run_dir`` holds no run.
    """
    run_dir = Path(run_dir)
    if not (run_dir / DB_FILE).is_file():
        raise LookupError(f"{run_dir} holds no run ({DB_FILE} is missing)")
    model, kernels, fallbacks = package_inputs(run_dir)
    bundle = RunBundle(model=model, kernels=tuple(kernels), fallbacks=tuple(fallbacks))
    path = run_dir / RUN_BUNDLE_DIR if out is None else Path(out)
    write_bundle(path, bundle)
    return path, bundle
