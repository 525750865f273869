"""Single-operator models end to end: ``kforge optimize`` on ``examples/single_op.py`` per operator.

For each operator of KF_BENCH_OPS (comma-separated keys of ``examples.single_op.OPS``; default a
few), a run with inputs of KF_BENCH_MB MiB (default 256) on the cuda backend under a time limit
of KF_BENCH_TIME_LIMIT seconds (default 60), budget KF_BENCH_BUDGET per card (default 3): the
run's own end-to-end figures (eager, the .cast, torch.compile, cast.compile) and its top cards.
Prints a table and writes ``single_ops.json`` (and each run's log, ``<op>.log``) under the output folder.

    python bench/gpu/single_ops.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OPS = "swish,gelu_tanh_written_out,softmax,group_norm"


def optimize(op: str, work: Path) -> dict[str, Any]:
    """One run on one operator: its report's figures, or why it did not finish."""
    env = {**os.environ, "KF_EXAMPLE_VARIANT": op, "KF_EXAMPLE_MB": os.environ.get("KF_BENCH_MB", "256"),
           "PYTHONUNBUFFERED": "1"}
    limit = float(os.environ.get("KF_BENCH_TIME_LIMIT", "60"))
    cmd = [sys.executable, "-m", "forge_service.cli", "-v", "optimize", str(ROOT / "examples" / "single_op.py"),
           "--backend", os.environ.get("KF_BENCH_BACKEND", "cuda"), "--budget", os.environ.get("KF_BENCH_BUDGET", "3"),
           "--max-cards", "2", "--time-limit", f"{limit:g}", "--samples", "1", "--sample-budget-mb", "4096",
           "--json", "--runs-dir", str(work / op), "--out", str(work / f"{op}.cast")]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=limit + 240)
    except subprocess.TimeoutExpired:
        return {"op": op, "ok": False, "error": f"timed out after {limit + 240:g} s"}
    seconds = round(time.perf_counter() - started, 1)
    (work / f"{op}.log").write_text(proc.stderr)
    if proc.returncode != 0:
        return {"op": op, "ok": False, "seconds": seconds, "error": (proc.stderr or proc.stdout)[-2000:]}
    report = json.loads(proc.stdout)["report"]
    e2e = report["end_to_end"]
    cards = [{k: c.get(k) for k in ("op", "kind", "eager_us", "best_us", "speedup", "pct_of_floor", "status")}
             for c in report["cards"] if c.get("status") not in ("skipped",)]
    return {"op": op, "ok": True, "seconds": seconds, "cards": cards,
            **{k: e2e.get(k) for k in ("eager_ms", "cast_ms", "cast_speedup", "cast_speedup_interval", "compile_ms",
                                       "cast_compile_ms", "compile_speedup", "cast_compile_speedup", "parity_ok",
                                       "noisy", "error")}}


def table(rows: list[dict[str, Any]]) -> str:
    def fmt(value: Any, pattern: str = "{:.3f}") -> str:
        return "—" if value is None else pattern.format(value)

    lines = ["op | eager ms | .cast ms | speedup | compile ms | cast.compile ms | top card | card speedup | s"]
    for r in rows:
        top = (r.get("cards") or [{}])[0]
        lines.append(" | ".join([r["op"], fmt(r.get("eager_ms")), fmt(r.get("cast_ms")),
                                 fmt(r.get("cast_speedup"), "{:.2f}x"), fmt(r.get("compile_ms")),
                                 fmt(r.get("cast_compile_ms")), str(top.get("op", r.get("error", ""))[:60]),
                                 fmt(top.get("speedup"), "{:.2f}x"), fmt(r.get("seconds"), "{:.0f}")]))
    return "\n".join(lines)


def run(out_dir: Path) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    result = {"script": "single_ops", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "mb": os.environ.get("KF_BENCH_MB", "256"), "rows": rows}
    for op in [op for op in os.environ.get("KF_BENCH_OPS", DEFAULT_OPS).split(",") if op]:
        rows.append(optimize(op, out_dir))
        (out_dir / "single_ops.json").write_text(json.dumps(result, indent=1))  # each run kept as it ends
    print(table(rows))
    return result


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    run(Path(sys.argv[1]))
