"""The row template's knobs on the norms, softmax and sums of the single-operator models, on the GPU.

Each case is a layout a memory-bound card shows at 256 MB (the single-operator models of
``examples/single_op.py``, the long softmax rows and the middle-dim sum named in the coverage
targets) or in a paper model (the VAE decoder's group norm). For each, every cuda mode the row
template offers is swept over its block size, vector width, statistics pass and row caching (the
split and resident modes also over their blocks per row and per SM), checked against eager within
the dtype's tolerance, and timed against eager (:mod:`bench.gpu.knob_sweep`). The table shows which
knob sets reach the bandwidth floor, so the template's first choices can follow the measurements.
Prints the table and writes ``row_norms.json``.

    python bench/gpu/row_norms.py OUT_DIR
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
from kforge_domain.device import DeviceInfo  # noqa: E402

#: The knobs swept in every mode, the others left at the mode's defaults.
SWEPT = ("threads_per_block", "vector", "stats", "cache_row")
#: The knobs swept, one at a time, only in the modes that read them.
MODE_KNOBS = {"split": ("blocks_per_row", "unroll"), "resident": ("resident_blocks_per_sm",)}


def cases(device: str = "cuda") -> list[Case]:
    """(name, op, args, kwargs): the single-operator models' layouts at 256 MB and the VAE's group norm."""
    aten, bf16 = torch.ops.aten, torch.bfloat16
    images = torch.randn(256, 64, 64, 64, device=device)
    rows = torch.randn(16384, 4096, device=device)
    weight, bias = torch.randn(64, device=device), torch.randn(64, device=device)
    vae = torch.randn(1, 512, 128, 128, device=device, dtype=bf16)

    def vae_norm(channels: int, side: int) -> Case:
        """The VAE decoder's group norm at one of its larger resolutions (rows larger than the chip)."""
        affine = [torch.randn(channels, device=device, dtype=bf16) for _ in range(2)]
        x = torch.randn(1, channels, side, side, device=device, dtype=bf16)
        return (f"group_norm 1x{channels}x{side}x{side} bf16, 32 groups", aten.group_norm.default,
                [x, 32, *affine, 1e-6], {})
    return [
        ("group_norm 256x64x64x64 fp32, 8 groups", aten.group_norm.default, [images, 8, weight, bias, 1e-5], {}),
        ("group_norm 256x64x64x64 bf16, 8 groups", aten.group_norm.default,
         [images.to(bf16), 8, weight.to(bf16), bias.to(bf16), 1e-5], {}),
        ("group_norm 1x512x128x128 bf16, 32 groups", aten.group_norm.default,
         [vae, 32, torch.randn(512, device=device, dtype=bf16), torch.randn(512, device=device, dtype=bf16), 1e-6],
         {}),
        ("layer_norm 16384x4096 fp32", aten.layer_norm.default,
         [rows, [4096], torch.randn(4096, device=device), torch.randn(4096, device=device), 1e-5], {}),
        ("softmax 16384x4096 fp32", aten._softmax.default, [rows, -1, False], {}),
        ("softmax 170x393216 fp32", aten._softmax.default, [torch.randn(170, 393216, device=device), -1, False], {}),
        ("sum 4x4096x4095 fp32, dim 1", aten.sum.dim_IntList, [torch.randn(4, 4096, 4095, device=device), [1]], {}),
        vae_norm(512, 256),
        vae_norm(256, 512),
        vae_norm(128, 1024),
        # Few long rows that fit on chip: resident mode's cards besides the VAE's group norm.
        ("softmax 32x65536 fp32", aten._softmax.default, [torch.randn(32, 65536, device=device), -1, False], {}),
        ("layer_norm 8x1048576 bf16", aten.layer_norm.default,
         [torch.randn(8, 1048576, device=device, dtype=bf16), [1048576],
          torch.randn(1048576, device=device, dtype=bf16), torch.randn(1048576, device=device, dtype=bf16), 1e-5],
         {}),
        # Leading dims at their own strides: an LSTM's batch-first output, the tokens after a class token.
        ("layer_norm of a batch-first LSTM output 64x2048x1024 bf16", aten.layer_norm.default,
         [torch.randn(2048, 64, 1024, device=device, dtype=bf16).transpose(0, 1), [1024],
          torch.randn(1024, device=device, dtype=bf16), torch.randn(1024, device=device, dtype=bf16), 1e-5], {}),
        ("softmax of x[:, 1:] 256x1025x1024 fp32", aten._softmax.default,
         [torch.randn(256, 1025, 1024, device=device)[:, 1:], -1, False], {}),
    ]


def knob_sets(plan: Any, device: DeviceInfo) -> list[Knobs]:
    """Every mode with each combination of :data:`SWEPT`, then each of the mode's own knobs' values."""
    space = plan.knob_space("cuda", device)
    choices = space.choices
    seen: dict[str, Knobs] = {}
    for mode in choices["mode"]:
        swept = [choices.get(name, (None,)) for name in SWEPT]
        for values in itertools.product(*swept):
            given = {n: v for n, v in zip(SWEPT, values, strict=True) if v is not None}
            knobs = space.normalise({"mode": mode, **given})
            seen.setdefault(repr(sorted(knobs.items())), knobs)
        for name in MODE_KNOBS.get(mode, ()):
            for value in choices.get(name, ()):
                knobs = space.normalise({"mode": mode, name: value})
                seen.setdefault(repr(sorted(knobs.items())), knobs)
    return list(seen.values())


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Within the dtype's tolerance of eager, NaN where eager has NaN."""
    tolerance = 2e-2 if want.dtype in (torch.bfloat16, torch.float16) else 1e-4
    return torch.allclose(got.float(), want.float(), rtol=tolerance, atol=tolerance, equal_nan=True)


def run(out_dir: Path, parts: Sequence[str] = ("",)) -> list[dict[str, Any]]:
    """The cases whose name holds one of ``parts``, swept; results under ``out_dir``."""
    return sweep_cases(out_dir, "row_norms", named(cases(), parts), knob_sets, close)


if __name__ == "__main__":
    # python bench/gpu/row_norms.py OUT [NAME_PART,...]: only the cases whose name holds one of the parts
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-row-norms"),
        sys.argv[2].split(",") if len(sys.argv) > 2 else ("",))
