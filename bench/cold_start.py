"""The same eager calls timed after each cpu cold start: the operands evicted, or twice the
last-level cache written, interleaved call by call. Prints a table; writes JSON.

    python bench/cold_start.py OUT.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

from kforge_torch.caches import last_level_cache_bytes
from kforge_torch.eviction import machine_evictor
from kforge_torch.timing import Timer

OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": lambda x: torch.softmax(x, -1), "add": lambda x: x + 1.0, "sum": lambda x: x.sum(-1)}
SIZES_MB = (1, 4, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    evictor = machine_evictor()
    if evictor is None:
        raise SystemExit("no eviction helper here (no C compiler?)")
    llc = last_level_cache_bytes(torch.device("cpu"))
    evicting, flushing = Timer("cpu", llc, evictor=evictor), Timer("cpu", llc)
    torch.manual_seed(0)
    rows = []
    print(f"{'op':8} {'MB':>4} {'evicted us':>11} {'flushed us':>11} {'ratio':>6}")
    for name, op in OPS.items():
        for mb in SIZES_MB:
            x = torch.randn(mb * 2**20 // 4 // 1024, 1024)
            for _ in range(3):
                op(x)
            evicted, flushed = [], []
            for _ in range(args.calls):
                evicted.append(evicting.time_us(lambda x=x, op=op: op(x), [x]))  # type: ignore[misc]
                flushed.append(flushing.time_us(lambda x=x, op=op: op(x), [x]))  # type: ignore[misc]
            row = {"op": name, "mb": mb, "evicted_us": statistics.median(evicted),
                   "flushed_us": statistics.median(flushed)}
            row["ratio"] = row["evicted_us"] / row["flushed_us"]
            rows.append(row)
            print(f"{name:8} {mb:>4} {row['evicted_us']:>11.1f} {row['flushed_us']:>11.1f} {row['ratio']:>6.3f}")
    args.out.write_text(json.dumps({"machine": platform.machine(), "cpu_count": torch.get_num_threads(),
                                    "llc_bytes": llc, "calls": args.calls, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
