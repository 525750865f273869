"""The sort template's shared-memory network on the GPU: each block size checked and timed against eager.

Cases are the sorts models run through the network: an MoE block's sort of its tokens' expert ids
(one row of 4096 int64, stable), topk of 64 from such a row, and stable sorts of many rows of 1000.
Every ``threads_per_block`` is checked bit for bit against eager and timed against it
(:mod:`bench.gpu.knob_sweep`). Prints a table and writes ``sort_network.json``.

    python bench/gpu/sort_network.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # ahead of this folder, whose packager.py is not the packager package

import torch  # noqa: E402

from agent_service.offline.knobs import Knobs  # noqa: E402
from bench.gpu.knob_sweep import Case, sweep_cases  # noqa: E402
from kforge_domain.device import DeviceInfo  # noqa: E402


def cases(device: str = "cuda") -> list[Case]:
    """(name, op, args, kwargs): sorts and a topk served by the network."""
    aten = torch.ops.aten
    expert_ids = torch.randint(0, 256, (1, 4096), device=device)
    return [
        ("sort stable 1 x 4096 int64", aten.sort.stable, [expert_ids], {"stable": True}),
        ("topk 64 of 1 x 4096 int64", aten.topk.default, [expert_ids, 64], {}),
        ("sort stable 512 x 1000 fp32", aten.sort.stable, [torch.randn(512, 1000, device=device)], {"stable": True}),
    ]


def block_sizes(plan: Any, device: DeviceInfo) -> list[Knobs]:
    """The network at each block size the plan allows."""
    return [{"threads_per_block": t} for t in plan.knob_space("cuda", device).choices["threads_per_block"]]


def run(out_dir: Path) -> list[dict[str, Any]]:
    """Every case swept; results under ``out_dir`` (the entry :mod:`bench.gpu_suite` calls)."""
    return sweep_cases(out_dir, "sort_network", cases(), block_sizes)


if __name__ == "__main__":
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-sort-network"))
