"""Does a tuned MCTS beat refining the best on the simulated landscapes? Tuned on some, judged on others.

``search_quality.py`` compares the search policies at the tree's default settings. This sweeps the
settings that shape MCTS (UCT exploration, progressive widening ``k`` and ``α``, annealing ``α``,
the weight of a subtree's best reward against its mean) on training landscapes, picks the setting
with the lowest mean latency of the shipped kernel, and then compares it, the default and the
other policies on held-out landscapes the sweep never saw: a setting chosen and judged on the same
seeds would look better than it is. Each comparison with MCTS is paired (same landscape, same
proposer randomness) and reported as the mean difference in the shipped kernel's latency with a
bootstrap 95% interval, and as the share of landscapes MCTS strictly wins.

    .venv/bin/python bench/search_tuning.py [--train 120] [--held-out 300] [--budgets 50,96] [--out F.json]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import platform
import random
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from search_quality import Landscape, LandscapeSpec, Strategy, run_beam, run_best_first, run_linear, run_mcts  # noqa: E402

from search_core import SearchConfig  # noqa: E402

HELD_OUT_FIRST_SEED = 100_000
"""Held-out landscapes start here, far from any training seed."""

GRID = {
    "exploration": (0.0, 0.03, 0.1, 0.3),
    "widen_k": (1.0, 2.0, 4.0),
    "widen_alpha": (0.1, 0.3, 0.5),
    "max_weight": (0.5, 1.0),
    "widen_alpha_end": (None, 0.1),
}


def grid_configs() -> Iterator[dict[str, Any]]:
    """Every combination of :data:`GRID`; an annealed ``α`` anneals over the whole budget."""
    names = list(GRID)
    for values in itertools.product(*GRID.values()):
        yield dict(zip(names, values, strict=True))


def mcts_strategy(settings: dict[str, Any], budget: int) -> Callable[[int], Strategy]:
    """An MCTS run per landscape seed (the tree's tie-breaking seeded by the landscape)."""
    def for_seed(seed: int) -> Strategy:
        anneal = budget if settings.get("widen_alpha_end") is not None else 0
        return run_mcts(SearchConfig(**settings, seed=seed, widen_anneal_evaluations=anneal))
    return for_seed


def fixed(strategy: Strategy) -> Callable[[int], Strategy]:
    return lambda _seed: strategy


def finals(strategy_for_seed: Callable[[int], Strategy], seeds: list[int], budget: int,
           spec: LandscapeSpec) -> list[float]:
    """True latency / eager of the kernel each landscape's run would ship (its best measured)."""
    return [strategy_for_seed(seed)(Landscape(spec, seed), budget, random.Random(seed * 7919 + 1)).curve[-1]
            for seed in seeds]


def paired(mcts: list[float], other: list[float], rounds: int = 2000) -> dict[str, float]:
    """MCTS minus the other policy, per landscape: mean, bootstrap 95% interval, MCTS's win share."""
    diffs = [a - b for a, b in zip(mcts, other, strict=True)]
    rng = random.Random(0)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(rounds))
    return {"mean_diff": statistics.fmean(diffs), "ci_low": means[int(0.025 * rounds)],
            "ci_high": means[int(0.975 * rounds) - 1],
            "mcts_wins": sum(d < 0 for d in diffs) / len(diffs), "ties": sum(d == 0 for d in diffs) / len(diffs)}


def compare(budget: int, train: list[int], held_out: list[int], spec: LandscapeSpec) -> dict[str, Any]:
    sweep = sorted(((statistics.fmean(finals(mcts_strategy(settings, budget), train, budget, spec)), settings)
                    for settings in grid_configs()), key=lambda row: row[0])
    default = {k: v for k, v in asdict(SearchConfig()).items() if k in GRID}
    tuned = sweep[0][1]
    policies: dict[str, Callable[[int], Strategy]] = {
        "mcts (tuned)": mcts_strategy(tuned, budget),
        "mcts (default)": mcts_strategy(default, budget),
        "linear (best)": fixed(run_linear("best")),
        "greedy best-first": fixed(run_best_first(width=3)),
        "beam (4x2)": fixed(run_beam(width=4, branch=2)),
    }
    results = {name: finals(policy, held_out, budget, spec) for name, policy in policies.items()}
    summary = {name: {"mean": statistics.fmean(v), "median": statistics.median(v)} for name, v in results.items()}
    versus = {f"{mcts} vs {other}": paired(results[mcts], results[other])
              for mcts in ("mcts (tuned)", "mcts (default)") for other in results if not other.startswith("mcts")}
    sweep_top = [{"train_mean": mean, "settings": settings} for mean, settings in sweep[:10]]
    return {"budget": budget, "tuned": tuned, "default": default, "sweep_top": sweep_top,
            "held_out": summary, "paired": versus}


def print_budget(result: dict[str, Any], n_held_out: int) -> None:
    print(f"\nbudget {result['budget']}: tuned on training landscapes {result['tuned']}")
    print(f"held-out landscapes ({n_held_out}): latency of the shipped kernel / eager, lower is better")
    print(f"{'policy':<20}{'mean':>8}{'median':>8}")
    for name, row in result["held_out"].items():
        print(f"{name:<20}{row['mean']:>8.3f}{row['median']:>8.3f}")
    print(f"{'paired':<36}{'mean diff':>10}{'95% CI':>18}{'MCTS wins':>11}")
    for name, row in result["paired"].items():
        interval = f"{row['ci_low']:+.3f}..{row['ci_high']:+.3f}"
        print(f"{name:<36}{row['mean_diff']:>+10.3f}{interval:>18}{row['mcts_wins']:>11.0%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=120, help="training landscapes (seeds 0..N-1)")
    parser.add_argument("--held-out", type=int, default=300,
                        help=f"held-out landscapes (from seed {HELD_OUT_FIRST_SEED})")
    parser.add_argument("--budgets", default="50,96", help="evaluations per landscape, comma-separated")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = parser.parse_args(argv)
    spec = LandscapeSpec()
    train = list(range(args.train))
    held_out = list(range(HELD_OUT_FIRST_SEED, HELD_OUT_FIRST_SEED + args.held_out))
    results = [compare(int(b), train, held_out, spec) for b in args.budgets.split(",")]
    for result in results:
        print_budget(result, len(held_out))
    if args.out:
        record = {"script": "bench/search_tuning.py", "date": datetime.date.today().isoformat(),
                  "machine": f"{platform.machine()} cpu", "train_seeds": [train[0], train[-1]],
                  "held_out_seeds": [held_out[0], held_out[-1]], "landscape": asdict(spec), "grid": GRID,
                  "results": results}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
