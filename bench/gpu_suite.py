"""Run every GPU benchmark of bench/gpu/ in one process and collect their results.

Each module in bench/gpu/ exposes ``run(out_dir: Path) -> dict``. This script runs the ones
asked for (all by default), each guarded so one failure does not lose the others, and writes
``suite.json`` plus every module's own files under ``--out``.

    python bench/gpu_suite.py --out "$OUT" [--only sandbox,agent] [--skip paper_models]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GPU_DIR = Path(__file__).resolve().parent / "gpu"


def machine_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "date": time.strftime("%Y-%m-%d")}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(device=props.name, sm_count=props.multi_processor_count,
                    capability=f"sm_{props.major}{props.minor}", memory_gb=round(props.total_memory / 2**30, 1),
                    gpus=torch.cuda.device_count())
    for name in ("triton", "transformers", "diffusers"):
        try:
            info[name] = importlib.import_module(name).__version__
        except Exception:
            info[name] = None
    return info


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_gpu_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="", help="comma-separated module names")
    parser.add_argument("--skip", default="", help="comma-separated module names")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    only = {s for s in args.only.split(",") if s}
    skip = {s for s in args.skip.split(",") if s}
    args.out.mkdir(parents=True, exist_ok=True)
    suite: dict[str, Any] = {"machine": machine_info(), "modules": {}}
    for path in sorted(GPU_DIR.glob("*.py")):
        name = path.stem
        if name.startswith("_") or (only and name not in only) or name in skip:
            continue
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            module = load(path)
            if not callable(getattr(module, "run", None)):  # a helper the benchmarks share
                print(f"== {name}: no run(), skipped", flush=True)
                continue
            result = module.run(args.out / name)
            entry = {"ok": True, "result": result}
        except Exception as exc:
            traceback.print_exc()
            entry = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
        entry["seconds"] = round(time.perf_counter() - started, 1)
        suite["modules"][name] = entry
        (args.out / "suite.json").write_text(json.dumps(suite, indent=1, default=str))
        print(f"== {name}: {'ok' if entry['ok'] else 'FAILED'} in {entry['seconds']} s", flush=True)
    pack(args.out)
    return 0


def pack(out: Path) -> None:
    """Fold every module's files into one archive: only a few files come back from a GPU run."""
    import shutil
    import tarfile

    folders = [p for p in out.iterdir() if p.is_dir()]
    if not folders:
        return
    with tarfile.open(out / "modules.tar.gz", "w:gz") as tar:
        for folder in folders:
            tar.add(folder, arcname=folder.name)
    for folder in folders:
        shutil.rmtree(folder)


if __name__ == "__main__":
    raise SystemExit(main())
