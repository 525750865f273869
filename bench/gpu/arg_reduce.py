"""argmax and argmin on the GPU: each mode and piece size checked and timed against eager.

The cases are the layouts models give these ops: a sampler's argmax over a vocabulary (1, 8 and
64 rows of 151936 logits), many short rows (a classifier's 4096 rows of 2048), a column reduction
and a whole-tensor argmin. Every mode the proposer offers, with each ``per_thread`` in split
mode, is checked bit for bit against eager and timed against it (:mod:`bench.gpu.knob_sweep`).
Prints a table and writes ``arg_reduce.json``.

    python bench/gpu/arg_reduce.py OUT_DIR
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

VOCABULARY = 151936


def cases(device: str = "cuda") -> list[Case]:
    """(name, op, args, kwargs) for argmax and argmin in the layouts models use."""
    aten, bf16 = torch.ops.aten, torch.bfloat16
    logits = torch.randn(64, VOCABULARY, device=device, dtype=bf16)
    return [
        ("argmax 1 x 151936 bf16", aten.argmax.default, [logits[:1], -1], {}),
        ("argmax 8 x 151936 bf16", aten.argmax.default, [logits[:8], -1], {}),
        ("argmax 64 x 151936 bf16", aten.argmax.default, [logits, -1], {}),
        ("argmax 8 x 151936 fp32", aten.argmax.default, [logits[:8].float(), -1], {}),
        ("argmax 4096 x 2048 bf16", aten.argmax.default, [torch.randn(4096, 2048, device=device, dtype=bf16), -1], {}),
        ("argmin 65536 x 4 fp32, dim 0", aten.argmin.default, [torch.randn(65536, 4, device=device), 0], {}),
        ("argmin of 4M int64", aten.argmin.default, [torch.randint(-10**9, 10**9, (1 << 22,), device=device)], {}),
    ]


def every_mode(plan: Any, device: DeviceInfo) -> list[Knobs]:
    """Each mode at its defaults, and split mode at each ``per_thread``."""
    choices = plan.knob_space("cuda", device).choices
    return [{"mode": mode, "per_thread": per_thread} for mode in choices["mode"]
            for per_thread in (choices["per_thread"] if mode == "split" else choices["per_thread"][:1])]


def run(out_dir: Path) -> list[dict[str, Any]]:
    """Every case swept; results under ``out_dir`` (the entry :mod:`bench.gpu_suite` calls)."""
    return sweep_cases(out_dir, "arg_reduce", cases(), every_mode)


if __name__ == "__main__":
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-arg-reduce"))
