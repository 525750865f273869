"""scatter_reduce on the GPU: the in-order column walk against one thread per source, and eager.

The cases are the layouts graph networks give these ops (``torch_geometric``'s ``scatter``):
messages of 64 or 128 features on 200k-1M edges pooled into 10k-50k nodes by max, min, an integer
sum and a mean, an index expanded over the features, and one scatter of a single value (a one-hot
mask). Each walk the proposer offers is checked bit for bit against eager (max, min, integers and
one value are the same whatever order the sources land in) and timed against it
(:mod:`bench.gpu.knob_sweep`). Prints a table and writes ``scatter_walks.json``.

    python bench/gpu/scatter_walks.py OUT_DIR
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
    """(name, op, args, kwargs) for scatter reductions as message passing runs them."""
    aten = torch.ops.aten

    def pool(nodes: int, edges: int, features: int, reduce: str, dtype: torch.dtype) -> Case:
        index = torch.randint(0, nodes, (edges, 1), device=device).expand(edges, features)
        messages = (torch.randn(edges, features, device=device) * 100).to(dtype)
        return (f"scatter_reduce {reduce} {edges} edges x {features} -> {nodes} nodes {str(dtype)[6:]}",
                aten.scatter_reduce.two, [torch.zeros(nodes, features, device=device, dtype=dtype), 0, index,
                                          messages, reduce], {"include_self": False})

    rows = torch.randint(0, 1000, (65536, 1), device=device)
    return [
        pool(10_000, 200_000, 64, "amax", torch.float32),
        pool(50_000, 1_000_000, 64, "amax", torch.float32),
        pool(10_000, 200_000, 128, "amin", torch.bfloat16),
        pool(10_000, 200_000, 64, "sum", torch.int64),
        pool(10_000, 200_000, 64, "mean", torch.int32),
        ("scatter one value: a 65536 x 1000 one-hot mask", aten.scatter.value,
         [torch.zeros(65536, 1000, device=device), 1, rows, 1.0], {}),
    ]


def every_walk(plan: Any, device: DeviceInfo) -> list[Knobs]:
    """Each walk at the template's first choices of the other knobs."""
    return [{"walk": walk} for walk in plan.knob_space("cuda", device).choices["walk"]]


def run(out_dir: Path) -> list[dict[str, Any]]:
    """Every case swept; results under ``out_dir``."""
    return sweep_cases(out_dir, "scatter_walks", cases(), every_walk)


if __name__ == "__main__":
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-scatter-walks"))
