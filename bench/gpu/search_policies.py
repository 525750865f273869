"""MCTS against linear refinement of the best and beam search, on real cards at equal budget.

One ``kforge optimize`` run per policy (``--search-policy mcts|greedy|beam``) on the same model
(default ``bench/gpu/search_policy_model.py``: the paper models' top card kinds in bfloat16), with
the same offline proposer, seed and budget per card, ``--patience 0`` so every card spends its
whole budget, and no torch.compile baseline (the end-to-end check is not what is compared). For
each card and policy: the best kernel's latency (what the policy would ship), its speedup over the
sandbox's eager time, the evaluations spent, the failures, and the best latency after 10, 20, ...
evaluations, from the run store. Prints a table and writes ``search_policies.json`` under the
output folder.

    python bench/gpu/search_policies.py OUT_DIR [--model SPEC] [--budget N] [--max-cards K]
        [--policies mcts,greedy,beam] [--backend cuda]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from forge_service.store import RunStore  # noqa: E402
from kforge_domain.card import OperatorCard  # noqa: E402

CHECKPOINT = 10
"""Evaluations between two points of a card's best-so-far curve."""


def optimize(policy: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One run with ``policy``: each searched card's outcome, or why the run failed."""
    cmd = [sys.executable, "-m", "forge_service.cli", "optimize", args.model, "--backend", args.backend,
           "--budget", str(args.budget), "--max-cards", str(args.max_cards), "--search-policy", policy,
           "--patience", "0", "--seed", str(args.seed), "--samples", "1", "--no-compile-baseline", "--json",
           "--runs-dir", str(work / policy)]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        return {"policy": policy, "ok": False, "seconds": args.timeout, "error": f"timed out after {args.timeout:g} s"}
    seconds = round(time.perf_counter() - started, 1)
    (work / f"{policy}.log").write_text(proc.stderr)
    if proc.returncode != 0:
        return {"policy": policy, "ok": False, "seconds": seconds, "error": (proc.stderr or proc.stdout)[-2000:]}
    run_dir = Path(json.loads(proc.stdout)["run"]["run_dir"])
    return {"policy": policy, "ok": True, "seconds": seconds, "cards": cards_of(run_dir)}


def cards_of(run_dir: Path) -> list[dict[str, Any]]:
    """Every searched card of a run: its best latency over evaluations, in the order they were made."""
    store = RunStore(run_dir)
    try:
        out = []
        for row in store.cards():
            candidates = store.candidates(row.id)
            if not row.selected or not candidates:
                continue
            card = OperatorCard.from_json(row.card_json)
            results = store.results(row.id)
            done = [results[c.id] for c in candidates if c.id in results]
            best, curve, best_speedup = math.inf, [], None
            for n, result in enumerate(done, 1):
                if result.passed and result.latency_us is not None and result.latency_us < best:
                    best, best_speedup = result.latency_us, result.speedup
                if n % CHECKPOINT == 0 or n == len(done):
                    curve.append(None if math.isinf(best) else round(best, 3))
            out.append({"card": card.op, "card_id": card.id, "eager_us": card.eager_us, "evaluations": len(done),
                        "failures": sum(not r.passed for r in done), "best_us": None if math.isinf(best) else best,
                        "best_speedup": best_speedup, "best_so_far": curve})
        return out
    finally:
        store.close()


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"card | policy | best µs | speedup | evaluations | failed | best after each {CHECKPOINT}"]
    by_card: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for row in rows:
        if not row["ok"]:
            lines.append(f"— | {row['policy']} | failed: {row['error'][-200:]!r}")
            continue
        for card in row["cards"]:
            by_card.setdefault(card["card"], []).append((row["policy"], card))
    for name, entries in by_card.items():
        for policy, card in entries:
            best = "—" if card["best_us"] is None else f"{card['best_us']:.2f}"
            speedup = "—" if card["best_speedup"] is None else f"{card['best_speedup']:.2f}x"
            curve = " ".join("—" if v is None else f"{v:.1f}" for v in card["best_so_far"])
            lines.append(f"{name} | {policy} | {best} | {speedup} | {card['evaluations']} | {card['failures']} | "
                         f"{curve}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", default=str(ROOT / "bench" / "gpu" / "search_policy_model.py"))
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--max-cards", type=int, default=3)
    parser.add_argument("--policies", default="mcts,greedy,beam")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed to each run")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for policy in args.policies.split(","):
        rows.append(optimize(policy, args, args.out))
        print(table(rows[-1:]), flush=True)
        payload = {"script": "bench/gpu/search_policies.py", "date": time.strftime("%Y-%m-%d"), "model": args.model,
                   "budget": args.budget, "backend": args.backend, "rows": rows}
        (args.out / "search_policies.json").write_text(json.dumps(payload, indent=1))  # what finished, kept
    print(table(rows))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
