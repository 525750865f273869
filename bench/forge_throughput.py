"""Evaluated candidates per minute with 1, 2 and 4 sandbox services serving one run.

Each configuration starts its sandboxes as separate `kforge serve sandbox` processes and runs
`kforge optimize` over them (candidates in flight = sandboxes), by default on one card of a tiny
MLP; ``--model`` and ``--max-cards`` search several cards, where a card's start follows the
card before (forge_service.card_pipeline). The rate counts the search only: from the first
candidate's creation to the last result, read from the run store.

    python bench/forge_throughput.py [--sandboxes 1 2 4] [--budget 8] [--backend cpu] [--model F]
        [--max-cards N] [--repeat K] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "forge_service" / "models" / "tiny_mlp.py"


def start_sandbox(work: Path, backend: str, device: int | None) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ)
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device)
    proc = subprocess.Popen(
        [sys.executable, "-m", "forge_service.cli", "serve", "sandbox", "--address", "127.0.0.1:0", "--backend",
         backend, "--work-dir", str(work)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        if match := re.search(r"listening on (\S+:\d+)", line):
            return proc, match.group(1)
    raise RuntimeError("sandbox did not start")


def measure(n: int, budget: int, backend: str, gpus: int, model: Path = MODEL, max_cards: int = 1) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        sandboxes = [start_sandbox(Path(tmp) / f"s{i}", backend, i % gpus if gpus else None) for i in range(n)]
        try:
            cmd = [sys.executable, "-m", "forge_service.cli", "optimize", str(model), "--backend", backend,
                   "--budget", str(budget), "--max-cards", str(max_cards), "--no-compile-baseline", "--json",
                   "--runs-dir", f"{tmp}/runs"]
            for _, address in sandboxes:
                cmd += ["--sandbox", address]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr[-2000:])
            run_dir = Path(json.loads(proc.stdout)["run"]["run_dir"])
            con = sqlite3.connect(run_dir / "run.sqlite")
            first = con.execute("SELECT MIN(created_at) FROM candidates").fetchone()[0]
            last = con.execute("SELECT MAX(created_at) FROM results").fetchone()[0]
            evaluated = con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
            cards = con.execute("SELECT COUNT(DISTINCT c.card_id) FROM results r "
                                "JOIN candidates c ON c.id = r.candidate_id").fetchone()[0]
            con.close()
        finally:
            for sandbox, _ in sandboxes:
                os.killpg(sandbox.pid, signal.SIGKILL)
                sandbox.wait()
    seconds = last - first
    return {"sandboxes": n, "cards": cards, "evaluated": evaluated, "search_s": round(seconds, 1),
            "candidates_per_minute": round(60.0 * evaluated / seconds, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandboxes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--gpus", type=int, default=0, help="spread cuda sandboxes over this many GPUs")
    parser.add_argument("--model", type=Path, default=MODEL, help="the model to search (default: a tiny MLP)")
    parser.add_argument("--max-cards", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1, help="measure each configuration this many times")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    rows = [measure(n, args.budget, args.backend, args.gpus, args.model.resolve(), args.max_cards)
            for n in args.sandboxes for _ in range(args.repeat)]
    print(f"{'sandboxes':>9} {'cards':>5} {'evaluated':>9} {'search s':>9} {'cand/min':>9}")
    for r in rows:
        print(f"{r['sandboxes']:>9} {r['cards']:>5} {r['evaluated']:>9} {r['search_s']:>9} "
              f"{r['candidates_per_minute']:>9}")
    if args.json:
        loadavg = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
        args.json.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "backend": args.backend, "budget": args.budget, "model": str(args.model), "max_cards": args.max_cards,
            "loadavg_after": loadavg, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
