"""Search quality on simulated kernel-optimisation landscapes: MCTS against the usual loops.

A landscape is a kernel with hidden design choices (tiling, vector width, unrolling, ...);
latency is eager time times ``exp`` of main effects, pairwise interactions and a deceptive
restructure: one choice costs time on its own but unlocks the largest gains, so loops that only
follow the fastest candidate stall on an early plateau. Evaluations fail to compile at a base
rate, more often for aggressive options, always for some incompatible pairs, and measured
latencies carry noise. The proposer revises a parent by changing one or two choices at random.

Every strategy gets the same evaluation budget on the same landscapes; what counts is the true
(noise-free) latency of the candidate each strategy would ship, its best *measured* one.

    .venv/bin/python bench/search_quality.py [--seeds 200] [--budget 96] [--out bench/results]
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import json
import math
import os
import platform
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from search_core import SearchConfig, SearchTree

Choices = tuple[int, ...]
Candidate = tuple[Choices, tuple[int, ...]]
"""A kernel's choices and the choices its revision changed."""



@dataclass(frozen=True)
class LandscapeSpec:
    """Shape of the simulated landscapes (the same for every seed)."""

    n_choices: int = 8
    n_options: int = 4
    naive_penalty: float = 0.25
    """Log-latency of the first, naive kernel relative to eager."""
    restructure_cost: float = 0.25
    """What the restructure costs on its own (log-latency)."""
    unlock_gain: float = 0.30
    """What each of the unlocked choices gains once restructured."""
    n_unlocked: int = 3
    n_interactions: int = 8
    n_incompatible: int = 3
    base_failure: float = 0.12
    aggressive_failure: float = 0.10
    noise: float = 0.03
    follow_up: float = 0.5
    """Chance that a revision tunes a choice related to the parent's own last change."""


class Landscape:
    """One kernel: a hidden latency function of its choices, drawn from ``seed``."""

    def __init__(self, spec: LandscapeSpec, seed: int) -> None:
        rng = random.Random(seed)
        self.spec = spec
        d, m = spec.n_choices, spec.n_options
        self.main = [[0.0] + [rng.gauss(-0.06, 0.07) for _ in range(m - 1)] for _ in range(d)]
        self.interactions: dict[tuple[int, int], list[list[float]]] = {}
        while len(self.interactions) < spec.n_interactions:
            i, j = sorted(rng.sample(range(1, d), 2))
            self.interactions[(i, j)] = [[rng.gauss(0.0, 0.08) if a and b else 0.0 for b in range(m)] for a in range(m)]
        self.incompatible: set[tuple[int, int, int, int]] = set()
        while len(self.incompatible) < spec.n_incompatible:
            i, j = sorted(rng.sample(range(d), 2))
            self.incompatible.add((i, rng.randrange(1, m), j, rng.randrange(1, m)))
        self.restructure_options = {1, 2}
        self.unlocked = {i: rng.randrange(1, m) for i in range(1, 1 + spec.n_unlocked)}
        self.related: dict[int, list[int]] = {i: [] for i in range(d)}
        self.related[0] = list(self.unlocked)
        for i, j in self.interactions:
            self.related[i].append(j)
            self.related[j].append(i)

    def log_latency(self, x: Choices) -> float:
        spec = self.spec
        total = spec.naive_penalty + sum(self.main[i][o] for i, o in enumerate(x))
        for (i, j), table in self.interactions.items():
            total += table[x[i]][x[j]]
        if x[0] in self.restructure_options:
            total += spec.restructure_cost
            total -= spec.unlock_gain * sum(1 for i, o in self.unlocked.items() if x[i] == o)
        return total

    def true_latency(self, x: Choices) -> float:
        return math.exp(self.log_latency(x))

    def evaluate(self, x: Choices, rng: random.Random) -> float | None:
        """A measured latency (eager = 1.0), or None when the candidate fails."""
        if any(x[i] == a and x[j] == b for i, a, j, b in self.incompatible):
            return None
        aggressive = sum(1 for o in x if o == self.spec.n_options - 1)
        if rng.random() < self.spec.base_failure + self.spec.aggressive_failure * aggressive:
            return None
        return self.true_latency(x) * math.exp(rng.gauss(0.0, self.spec.noise))

    def start(self) -> Candidate:
        """The first, naive kernel's choices (all defaults), changed by nothing yet."""
        return (0,) * self.spec.n_choices, ()

    def revise(self, parent: Candidate, rng: random.Random) -> Candidate:
        """The proposer: change one choice (70%) or two (30%) to another option; with chance
        ``follow_up`` the first is one related to the parent's last change, as a model tunes
        what it has just introduced."""
        x, last = parent
        related = [i for j in last for i in self.related[j]]
        first = rng.choice(related) if related and rng.random() < self.spec.follow_up else rng.randrange(len(x))
        changed = [first]
        if rng.random() >= 0.7:
            changed.append(rng.choice([i for i in range(len(x)) if i != first]))
        y = list(x)
        for i in changed:
            y[i] = rng.choice([o for o in range(self.spec.n_options) if o != x[i]])
        return tuple(y), tuple(changed)


@dataclass
class Trace:
    """Best true latency of the shipped candidate after each evaluation."""

    curve: list[float] = field(default_factory=list)
    best_measured: float = math.inf
    best_true: float = 1.0

    def record(self, measured: float | None, x: Choices, landscape: Landscape) -> None:
        if measured is not None and measured < self.best_measured:
            self.best_measured = measured
            self.best_true = landscape.true_latency(x)
        # eager (1.0) ships when no candidate beats it
        self.curve.append(min(self.best_true, 1.0) if self.best_measured < 1.0 else 1.0)


Strategy = Callable[[Landscape, int, random.Random], Trace]


def run_mcts(config: SearchConfig) -> Strategy:
    def run(landscape: Landscape, budget: int, rng: random.Random) -> Trace:
        tree = SearchTree(config, reference_latency_us=1.0)
        candidates: dict[int, Candidate] = {0: landscape.start()}
        trace = Trace()
        for _ in range(budget):
            (parent,) = tree.ask(1)
            child = tree.add_child(parent)
            candidates[child] = candidate = landscape.revise(candidates[parent], rng)
            measured = landscape.evaluate(candidate[0], rng)
            tree.tell(child, measured is not None, measured)
            trace.record(measured, candidate[0], landscape)
        return trace

    return run


def run_linear(follow: str) -> Strategy:
    """Iterative refinement: revise the latest passing candidate, or the best one so far."""

    def run(landscape: Landscape, budget: int, rng: random.Random) -> Trace:
        current = landscape.start()
        current_latency = math.inf
        trace = Trace()
        for _ in range(budget):
            candidate = landscape.revise(current, rng)
            measured = landscape.evaluate(candidate[0], rng)
            trace.record(measured, candidate[0], landscape)
            if measured is not None and (follow == "latest" or measured < current_latency):
                current, current_latency = candidate, measured
        return trace

    return run


def run_best_first(width: int) -> Strategy:
    """Greedy best-first: expand the fastest unexpanded candidate with ``width`` revisions."""

    def run(landscape: Landscape, budget: int, rng: random.Random) -> Trace:
        open_list: list[tuple[float, int, Candidate]] = [(math.inf, 0, landscape.start())]
        trace, counter, spent = Trace(), 1, 0
        while spent < budget:
            parent = heapq.heappop(open_list)[2] if open_list else landscape.start()
            for _ in range(min(width, budget - spent)):
                candidate = landscape.revise(parent, rng)
                measured = landscape.evaluate(candidate[0], rng)
                trace.record(measured, candidate[0], landscape)
                spent += 1
                if measured is not None:
                    heapq.heappush(open_list, (measured, counter, candidate))
                    counter += 1
        return trace

    return run


def run_beam(width: int, branch: int) -> Strategy:
    """Beam search: each round revises every beam member ``branch`` times and keeps the fastest
    ``width`` children (topped up with the old beam when too few pass)."""

    def run(landscape: Landscape, budget: int, rng: random.Random) -> Trace:
        beam: list[tuple[float, Candidate]] = [(math.inf, landscape.start())]
        trace, spent = Trace(), 0
        while spent < budget:
            children: list[tuple[float, Candidate]] = []
            for _, parent in beam:
                for _ in range(branch):
                    if spent == budget:
                        break
                    candidate = landscape.revise(parent, rng)
                    measured = landscape.evaluate(candidate[0], rng)
                    trace.record(measured, candidate[0], landscape)
                    spent += 1
                    if measured is not None:
                        children.append((measured, candidate))
            children.sort(key=lambda c: c[0])
            beam = (children + beam)[:width] if len(children) < width else children[:width]
        return trace

    return run


def strategies(config: SearchConfig) -> dict[str, Strategy]:
    return {
        "mcts": run_mcts(config),
        "linear (latest)": run_linear("latest"),
        "linear (best)": run_linear("best"),
        "greedy best-first": run_best_first(width=3),
        "beam (4x2)": run_beam(width=4, branch=2),
    }


def evaluate_strategies(
    seeds: list[int], budget: int, spec: LandscapeSpec, config: SearchConfig
) -> dict[str, list[list[float]]]:
    """Curves (true latency of the shipped candidate per evaluation), per strategy and seed."""
    curves: dict[str, list[list[float]]] = {}
    for name, strategy in strategies(config).items():
        curves[name] = []
        for seed in seeds:
            landscape = Landscape(spec, seed)
            mcts_config = SearchConfig(**{**asdict(config), "seed": seed})
            run = run_mcts(mcts_config) if name == "mcts" else strategy
            curves[name].append(run(landscape, budget, random.Random(seed * 7919 + 1)).curve)
    return curves


def summarise(curves: dict[str, list[list[float]]], checkpoints: list[int]) -> dict[str, dict[str, float]]:
    rows = {}
    for name, runs in curves.items():
        final = [run[-1] for run in runs]
        row = {f"median@{c}": statistics.median(run[c - 1] for run in runs) for c in checkpoints}
        row["mean_final"] = statistics.fmean(final)
        row["p25_final"], _, row["p75_final"] = statistics.quantiles(final, n=4)
        rows[name] = row
    return rows


def win_rates(curves: dict[str, list[list[float]]]) -> dict[str, float]:
    """Share of seeds where MCTS ships a strictly faster kernel than each other strategy."""
    mcts = [run[-1] for run in curves["mcts"]]
    return {
        name: sum(a < b for a, b in zip(mcts, (run[-1] for run in runs), strict=True)) / len(mcts)
        for name, runs in curves.items()
        if name != "mcts"
    }


def plot(curves: dict[str, list[list[float]]], path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, runs in curves.items():
        budget = len(runs[0])
        xs = range(1, budget + 1)
        median = [statistics.median(run[i] for run in runs) for i in range(budget)]
        quartiles = [statistics.quantiles([run[i] for run in runs], n=4) for i in range(budget)]
        (line,) = ax.plot(xs, median, label=name, linewidth=2 if name == "mcts" else 1.2)
        ax.fill_between(xs, [q[0] for q in quartiles], [q[2] for q in quartiles], color=line.get_color(), alpha=0.08)
    ax.set_xlabel("evaluations")
    ax.set_ylabel("latency of the best kernel / eager (median, IQR)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="number of landscapes")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=96, help="evaluations per strategy and landscape")
    parser.add_argument("--out", type=Path, default=None, help="write JSON and PNG here")
    args = parser.parse_args(argv)
    spec = LandscapeSpec()
    config = SearchConfig()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    curves = evaluate_strategies(seeds, args.budget, spec, config)
    checkpoints = sorted({c for c in (args.budget // 4, args.budget // 2, args.budget) if c > 0})
    table = summarise(curves, checkpoints)
    wins = win_rates(curves)
    header = f"{'strategy':<20}" + "".join(f"{k:>12}" for k in next(iter(table.values())))
    print(f"{len(seeds)} landscapes, budget {args.budget}; latency of the shipped kernel / eager (lower is better)")
    print(header)
    for name, row in table.items():
        print(f"{name:<20}" + "".join(f"{v:>12.3f}" for v in row.values()))
    print("MCTS strictly faster than: " + ", ".join(f"{k} {v:.0%}" for k, v in wins.items()))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        today, machine = datetime.date.today().isoformat(), f"{platform.machine()} cpu, {os.cpu_count()} cores"
        stem = args.out / f"search_quality_{today}"
        record = {
            "date": today,
            "machine": machine,
            "seeds": seeds,
            "budget": args.budget,
            "landscape": asdict(spec),
            "mcts_config": asdict(config),
            "summary": table,
            "mcts_win_rate": wins,
            "final_latency_per_seed": {name: [run[-1] for run in runs] for name, runs in curves.items()},
        }
        stem.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
        title = f"{len(seeds)} simulated landscapes, seeds {seeds[0]}..{seeds[-1]}, {machine}, {today}"
        if plot(curves, stem.with_suffix(".png"), title):
            print(f"wrote {stem}.json and {stem}.png")
        else:
            print(f"wrote {stem}.json (matplotlib not installed: no plot)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
