"""Speed of the search tree: the Rust core (through Python) against the pure-Python reference.

For each size the tree is grown to that many nodes through the Rust core, copied into the
reference by snapshot, and both then run the same select + expand + report steps (``ask(1)``,
``add_child``, ``tell``) making identical choices. ``ask`` alone is timed too: selection is what
the forge loop waits on.

    .venv/bin/python bench/search_core_bench.py [--sizes 1000 10000 100000 1000000] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from search_core import SearchConfig, SearchTree
from search_core.reference import ReferenceTree

RESULTS_DATE = "2026-11-30"
MACHINE = "dev CPU, 2 cores"


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


def time_ask(tree: SearchTree, count: int) -> float:
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
    return {
        "nodes": size,
        "grow_us_per_step": grow_s / max(size - 1, 1) * 1e6,
        "rust_us_per_step": rust_s * 1e6,
        "python_us_per_step": python_s * 1e6,
        "speedup": python_s / rust_s,
        "ask_us": time_ask(tree, 2000) * 1e6,
        "depth_of_best": len(tree.ancestors(tree.best() or 0)),
        "root_children": len(tree.children(0)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--rust-steps", type=int, default=5000)
    parser.add_argument("--python-steps", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the results")
    args = parser.parse_args(argv)
    rows = [measure(size, args.rust_steps, args.python_steps) for size in args.sizes]
    print(f"{'nodes':>9} {'rust µs/step':>13} {'python µs/step':>15} {'speedup':>8} {'ask µs':>8} {'best depth':>11}")
    for row in rows:
        print(
            f"{row['nodes']:>9} {row['rust_us_per_step']:>13.2f} {row['python_us_per_step']:>15.1f}"
            f" {row['speedup']:>7.1f}x {row['ask_us']:>8.2f} {row['depth_of_best']:>11}"
        )
    if args.json:
        speedups = [row["speedup"] for row in rows]
        summary = {
            "speedup_vs_python": min(speedups),
            "date": RESULTS_DATE,
            "machine": MACHINE,
            "per_size": rows,
        }
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
