"""The gather engine's store widths on the GPU: each width a card allows, checked and timed against eager.

For gather cards whose outputs are dense and aligned (comparisons into bool, masked_fill, where,
cat, an integer remainder, an int64-to-bf16 conversion, and embedding, row indexing, cat along
dim 0 and a VAE's nearest upsampling, whose runs are loaded whole too, and rows too few to fill the
device, which rows mode cuts in pieces), every ``store_bytes`` choice of ``rows`` mode, and ``flat`` mode, is
checked bit for bit against eager and timed against it (:mod:`bench.gpu.knob_sweep`). Prints a
table and writes ``gather_stores.json``.

    python bench/gpu/gather_stores.py OUT_DIR
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
    """(name, op, args, kwargs): gathers whose dense, aligned outputs allow wide stores."""
    aten, bf16 = torch.ops.aten, torch.bfloat16
    h = torch.randn(4096, 2048, device=device, dtype=bf16)
    ids = torch.randint(0, 64, (4096, 1024), device=device)
    return [
        ("gt bf16 -> bool", aten.gt.Scalar, [h, 1.0], {}),
        ("masked_fill bf16", aten.masked_fill.Scalar, [h, h > 1.0, 0.0], {}),
        ("where fp32", aten.where.self, [h < 0, h.float(), h.float() * 2], {}),
        ("cat bf16", aten.cat.default, [[h, h.flip(0)], -1], {}),
        ("remainder int64", aten.remainder.Scalar, [ids, 8], {}),
        ("int64 to bf16", aten._to_copy.default, [ids], {"dtype": bf16}),
        # rows that read runs of adjacent inputs: each run is one load as well as one store
        ("embedding bf16", aten.embedding.default, [torch.randn(32000, 2048, device=device, dtype=bf16),
                                                    torch.randint(0, 32000, (4096,), device=device)], {}),
        ("index rows bf16", aten.index.Tensor, [h, [torch.randint(0, 4096, (2048,), device=device)]], {}),
        ("cat dim 0 bf16", aten.cat.default, [[h, h[:1024]], 0], {}),
        ("upsample nearest x2 bf16", aten.upsample_nearest2d.vec,
         [torch.randn(1, 512, 128, 256, device=device, dtype=bf16), None, [2.0, 2.0]], {}),
        # rows fewer than a wave of blocks: each row cut in pieces (an MoE's expert ids, a sampler's logits)
        ("and int64 [4096]", aten.__and__.Scalar, [ids[0, :1024].repeat(4), 3], {}),
        ("gt bf16 [8, 151936] -> bool", aten.gt.Scalar,
         [torch.randn(8, 151936, device=device, dtype=bf16), 0.0], {}),
    ]


def store_widths(plan: Any, device: DeviceInfo) -> list[Knobs]:
    """rows mode at each store width the plan allows, then flat mode (an element per thread)."""
    widths = plan.knob_space("cuda", device).choices.get("store_bytes", ())
    return [*({"mode": "rows", "store_bytes": w} for w in widths), {"mode": "flat"}]


def run(out_dir: Path) -> list[dict[str, Any]]:
    """Every case swept; results under ``out_dir`` (the entry :mod:`bench.gpu_suite` calls)."""
    return sweep_cases(out_dir, "gather_stores", cases(), store_widths)


if __name__ == "__main__":
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-gather-stores"))
