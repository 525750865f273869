"""What a .cast adds to each call of a compiled model on the host: dynamo's guard check, and the calls.

A model of N ``ScaledRelu`` blocks (one module card, served by a g++ kernel) is compiled with
torch.compile alone and with ``cast.compile``; per N it reports the median time of a call, dynamo's
cache lookup per call (the guard check, from the profiler's ``TorchDynamo Cache Lookup`` events)
and the number of guards ``torch._dynamo.explain`` lists. The cast's part of the lookup is what
tracing leaves in the guards; the rest of the difference is the kernels' calls.

    .venv/bin/python bench/compiled_guards.py [--blocks 1,8,32] [--out bench/results/compiled_guards.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from guard_overhead import SCALED_RELU, ScaledRelu, cpu_card, cpu_entry

from packager import load_cast
from packager.format import ModelIdentity, build_cast
from packager.manifest import KEPT, ModeVerdict
from packager.variant import STATE_KWARG, module_state, module_variant_key

REPO = Path(__file__).resolve().parents[1]
WIDTH = 256
CALLS = 2000


class Blocks(torch.nn.Module):
    """N ScaledRelu blocks in a row: one module card serves every block."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(ScaledRelu(WIDTH) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def per_call_us(fn: Callable[[], Any]) -> float:
    for _ in range(50):
        fn()
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def cache_lookup_us(fn: Callable[[], Any], calls: int = 300) -> float:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    events = [e for e in prof.key_averages() if "Cache Lookup" in e.key]
    return events[0].cpu_time_total / events[0].count if events else float("nan")


def measure(n: int, work: Path) -> dict[str, float]:
    model = Blocks(n).eval()
    x = torch.randn(64, WIDTH)
    block = model.blocks[0]
    key = module_variant_key(block, [x], {})
    with torch.inference_mode():
        card = cpu_card(key, [x], {STATE_KWARG: module_state(block)}, block(x), kind="module")
    build_cast(work / f"blocks{n}.cast", ModelIdentity("bench", "bench", "bench"),
               [cpu_entry(card, SCALED_RELU, work, kind="module")], [],
               verdicts={(str(card["id"]), "compiled"): ModeVerdict(KEPT, "bench")})
    row: dict[str, float] = {"blocks": n}
    with torch.inference_mode():
        torch._dynamo.reset()
        row["torch_compile_guards"] = len(torch._dynamo.explain(model)(x).out_guards)
        torch._dynamo.reset()
        compiled = torch.compile(model)
        row["torch_compile_us"] = per_call_us(lambda: compiled(x))
        row["torch_compile_lookup_us"] = cache_lookup_us(lambda: compiled(x))
        torch._dynamo.reset()
        cast = load_cast(work / f"blocks{n}.cast")
        with cast.applied_to(model):
            row["cast_compile_guards"] = len(torch._dynamo.explain(model)(x).out_guards)
        torch._dynamo.reset()
        cast_compiled = cast.compile(model)
        row["cast_compile_us"] = per_call_us(lambda: cast_compiled(x))
        row["cast_compile_lookup_us"] = cache_lookup_us(lambda: cast_compiled(x))
        row["kernel_hits"] = cast.stats()[str(card["id"])]["hits"]
        cast.remove()
        torch._dynamo.reset()
    return {k: round(v, 2) for k, v in row.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", default="1,8,32")
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/compiled_guards.json")
    args = parser.parse_args()
    torch.set_num_threads(1)  # shared machines: intra-op threads make timings swing
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(int(n), Path(tmp)) for n in args.blocks.split(",")]
    columns = [c for c in rows[0] if c != "kernel_hits"]
    print("".join(f"{c:>24}" for c in columns))
    for row in rows:
        print("".join(f"{row[c]:>24.2f}" for c in columns))
    result = {"host": platform.processor() or platform.machine(), "torch": torch.__version__, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
