"""A deterministic search driven by a seed, run in-process or as a child process to be killed.

As a script: ``python scripted_search.py LOG_PATH SEED SNAPSHOT_EVERY`` prints the number of
completed operations after each one, so a test knows how far the search got before it died.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable

from search_core import SearchConfig, SearchTree


def run_script(tree: SearchTree, seed: int, operations: int, after_each: Callable[[int], None]) -> None:
    """Applies ``operations`` seeded operations (ask, release, add_child, tell, cancel) to ``tree``."""
    rng = random.Random(seed)
    picks: list[int] = []
    pending: list[int] = []
    done = 0
    while done < operations:
        roll = rng.random()
        if not picks or roll < 0.15:
            picks.extend(tree.ask(rng.randint(1, 3)))
        elif roll < 0.2:
            tree.release(picks.pop(rng.randrange(len(picks))))
        elif roll < 0.55 or not pending:
            pending.append(tree.add_child(picks.pop(0)))
        else:
            child = pending.pop(rng.randrange(len(pending)))
            outcome = rng.random()
            if outcome < 0.2:
                tree.tell(child, passed=False, latency_us=None)
            elif outcome < 0.25:
                tree.cancel(child)
            else:
                tree.tell(child, passed=True, latency_us=rng.uniform(20.0, 200.0), spread_us=rng.uniform(0.0, 2.0))
        done += 1
        after_each(done)


def config_for(seed: int) -> SearchConfig:
    return SearchConfig(seed=seed, exploration=0.3)


def main() -> None:
    log_path, seed, snapshot_every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tree = SearchTree(config_for(seed), 100.0, log_path, snapshot_every=snapshot_every)

    def report(done: int) -> None:
        sys.stdout.write(f"{done}\n")
        sys.stdout.flush()

    run_script(tree, seed, 10**7, report)


if __name__ == "__main__":
    main()
