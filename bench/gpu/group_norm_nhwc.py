"""The channels-last group norm template's knobs on the VAE decoder's compiled-only layouts, on the GPU.

Under torch.compile the SD3.5 VAE decoder's convolutions hand group norm channels-last inputs, and
cuda's eager writes the result contiguous: each card reads the input twice across pixel rows and
writes the output as a transpose. In the H100 run 98 the template's kernels reached about 30% of
the bandwidth floor there, against 55-65% for the same shapes laid out contiguous. Every knob set
of the template (block size, blocks per SM, loads ahead of use, pixels per store, how the blocks'
sums are merged) is checked against eager within the dtype's tolerance and timed against eager
(:mod:`bench.gpu.knob_sweep`), so the template's first choices can follow the measurements. The
knob sets with ``unroll=0``, ``store_vector=1`` and ``merge=thread`` render the kernel the template
had before those three knobs: the baseline, in the same table.
Prints the table and writes ``group_norm_nhwc.json``.

    python bench/gpu/group_norm_nhwc.py OUT_DIR [NAME_PART,...]
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # ahead of this folder, whose packager.py is not the packager package

import torch  # noqa: E402

from agent_service.offline.knobs import Knobs  # noqa: E402
from bench.gpu.knob_sweep import Case, named, sweep_cases  # noqa: E402
from bench.gpu.row_norms import close  # noqa: E402
from kforge_domain.device import DeviceInfo  # noqa: E402


def cases(device: str = "cuda") -> list[Case]:
    """(name, op, args, kwargs): the VAE decoder's group norms, channels-last, bf16, 32 groups."""
    bf16, cl = torch.bfloat16, torch.channels_last

    def vae_norm(channels: int, side: int) -> Case:
        affine = [torch.randn(channels, device=device, dtype=bf16) for _ in range(2)]
        x = torch.randn(1, channels, side, side, device=device, dtype=bf16).contiguous(memory_format=cl)
        return (f"group_norm channels_last 1x{channels}x{side}x{side} bf16", torch.ops.aten.group_norm.default,
                [x, 32, *affine, 1e-6], {})
    return [vae_norm(512, 128), vae_norm(512, 256), vae_norm(256, 512), vae_norm(512, 512)]


#: The knobs swept, with the values tried; the channel vector stays at the template's widest.
SWEPT = {"threads_per_block": (256, 512), "blocks_per_sm": (4, 8), "unroll": None, "store_vector": None,
         "merge": None}


def knob_sets(plan: Any, device: DeviceInfo) -> list[Knobs]:
    """Every combination of :data:`SWEPT` (None: all the template offers)."""
    space = plan.knob_space("cuda", device)
    values = [given or space.choices[name] for name, given in SWEPT.items()]
    return [space.normalise(dict(zip(SWEPT, chosen, strict=True))) for chosen in itertools.product(*values)]


def run(out_dir: Path, parts: Sequence[str] = ("",)) -> list[dict[str, Any]]:
    """The cases whose name holds one of ``parts``, swept; results under ``out_dir``."""
    return sweep_cases(out_dir, "group_norm_nhwc", named(cases(), parts), knob_sets, close)


if __name__ == "__main__":
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-group-norm-nhwc"),
        sys.argv[2].split(",") if len(sys.argv) > 2 else ("",))
