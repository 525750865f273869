"""Speed of the search tree: the Rust core (through Python) against the pure-Python reference.

For each size the tree is grown to that many nodes through the Rust core, copied into the
reference by snapshot, and both then run the same select + expand + report steps (``ask(1)``,
``add_child``, ``tell``) making identical choices. Selection is what the forge loop waits on, so
``ask(1)`` is timed on its own twice: on an unchanged tree (each pick given back) and right
after a result changed the statistics along the path (``ask after tell``).

Each repeat runs in a fresh process. With ``--baseline DIR`` (a directory holding another build
of the ``search_core`` package, e.g. an older commit), repeats alternate between that build and
this one (ABBA order), so both are measured in the same machine state; medians are reported.

    .venv/bin/python bench/search_core_bench.py [--sizes 1000 10000 100000] [--repeats 5]
        [--baseline DIR] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from search_core import SearchConfig, SearchTree
from search_core.reference import ReferenceTree

ASK_BLOCKS = 7
"""Blocks of ``ask(1)`` timed per tree; the median block is reported, so a burst of load in one
block does not move the result."""


def latency_of(step: int) -> float | None:
    """A cheap deterministic result per step: mostly passing, sometimes failing."""
    mixed = (step * 2654435761) % 1000
    return None if mixed < 150 else 20.0 + mixed / 10.0


def steps(tree: SearchTree | ReferenceTree, first: int, count: int) -> float:
    """Seconds for ``count`` select + expand + report steps."""
    start = time.perf_counter()
    for step in range(first, first + count):
        (parent,) = tree.ask(1)
        child = tree.add_child(parent)
        latency = latency_of(step)
        tree.tell(child, latency is not None, latency)
    return time.perf_counter() - start


def ask_after_tell(tree: SearchTree, first: int, count: int) -> float:
    """Seconds per ``ask(1)`` in the step loop, where each selection follows a result."""
    asking = 0.0
    for step in range(first, first + count):
        start = time.perf_counter()
        (parent,) = tree.ask(1)
        asking += time.perf_counter() - start
        child = tree.add_child(parent)
        latency = latency_of(step)
        tree.tell(child, latency is not None, latency)
    return asking / count


def ask_unchanged(tree: SearchTree, count: int) -> float:
    """Seconds per ``ask(1)`` (each pick given back, so the tree does not change)."""
    start = time.perf_counter()
    for _ in range(count):
        (parent,) = tree.ask(1)
        tree.release(parent)
    return (time.perf_counter() - start) / count


def measure(size: int, rust_steps: int, python_steps: int) -> dict[str, float]:
    tree = SearchTree(SearchConfig(seed=size), 100.0)
    grow_start = time.perf_counter()
    steps(tree, 0, size - 1)
    grow_s = time.perf_counter() - grow_start
    reference = ReferenceTree.restore(tree.snapshot())
    python_s = steps(reference, size, python_steps) / python_steps
    rust_s = steps(tree, size, python_steps)  # the same steps: both trees must agree
    if reference.best() != tree.best() or len(reference) != len(tree):
        raise AssertionError(f"the reference and the core diverged at {size} nodes")
    rust_s = (rust_s + steps(tree, size + python_steps, rust_steps)) / (python_steps + rust_steps)
    next_step = size + python_steps + rust_steps
    after_tell = [ask_after_tell(tree, next_step + block * 300, 300) for block in range(ASK_BLOCKS)]
    unchanged = [ask_unchanged(tree, 1000) for _ in range(ASK_BLOCKS)]
    (selected,) = tree.ask(1)
    tree.release(selected)
    return {
        "nodes": size,
        "grow_us_per_step": grow_s / max(size - 1, 1) * 1e6,
        "rust_us_per_step": rust_s * 1e6,
        "python_us_per_step": python_s * 1e6,
        "speedup": python_s / rust_s,
        "ask_us": statistics.median(unchanged) * 1e6,
        "ask_after_tell_us": statistics.median(after_tell) * 1e6,
        "selection_depth": len(tree.ancestors(selected)),
        "depth_of_best": len(tree.ancestors(tree.best() or 0)),
        "root_children": len(tree.children(0)),
    }


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages (other work on the machine slows every number)."""
    try:
        return [float(field) for field in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def run_build(package_dir: Path | None, args: argparse.Namespace) -> list[dict[str, float]]:
    """One repeat in a fresh process, importing ``search_core`` from ``package_dir`` if given."""
    env = dict(os.environ)
    if package_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(package_dir), env.get("PYTHONPATH")]))
    command = [sys.executable, __file__, "--worker", "--rust-steps", str(args.rust_steps)]
    command += ["--python-steps", str(args.python_steps), "--sizes", *map(str, args.sizes)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the benchmark of {package_dir or 'this checkout'} failed:\n{done.stderr}")
    rows: list[dict[str, float]] = json.loads(done.stdout)
    return rows


def medians(repeats: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """Per size, the median of every metric over the repeats."""
    return [
        {key: statistics.median(run[index][key] for run in repeats) for key in repeats[0][index]}
        for index in range(len(repeats[0]))
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--rust-steps", type=int, default=5000)
    parser.add_argument("--python-steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per build; medians are reported")
    parser.add_argument("--baseline", type=Path, help="directory holding another build of the search_core package")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the results")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps([measure(size, args.rust_steps, args.python_steps) for size in args.sizes]))
        return 0
    if args.baseline is not None and not (args.baseline / "search_core" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no search_core package in that directory")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    builds: dict[str, Path | None] = {"current": None}
    if args.baseline is not None:
        builds = {"baseline": args.baseline.resolve(), **builds}
    load_before = load_average()
    samples: dict[str, list[list[dict[str, float]]]] = {label: [] for label in builds}
    for repeat in range(args.repeats):
        order = list(builds) if repeat % 2 == 0 else list(reversed(builds))
        for label in order:
            samples[label].append(run_build(builds[label], args))
    results = {label: medians(runs) for label, runs in samples.items()}
    load_after = load_average()

    print(f"{machine()}; load average {load_before} before, {load_after} after; medians of {args.repeats} run(s)")
    header = f"{'build':>9} {'nodes':>9} {'rust µs/step':>13} {'python µs/step':>15} {'speedup':>8}"
    print(header + f" {'ask µs':>8} {'ask after tell µs':>18} {'depth':>6}")
    for label, rows in results.items():
        for row in rows:
            print(
                f"{label:>9} {row['nodes']:>9.0f} {row['rust_us_per_step']:>13.2f} {row['python_us_per_step']:>15.1f}"
                f" {row['speedup']:>7.1f}x {row['ask_us']:>8.2f} {row['ask_after_tell_us']:>18.2f}"
                f" {row['selection_depth']:>6.0f}"
            )
    if args.json:
        current = results["current"]
        summary = {
            "speedup_vs_python": min(row["speedup"] for row in current),
            "date": datetime.date.today().isoformat(),
            "machine": machine(),
            "load_average_before": load_before,
            "load_average_after": load_after,
            "repeats": args.repeats,
            "per_size": current,
            "builds": results,
            "samples": samples,
        }
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
