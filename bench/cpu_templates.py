"""The offline proposer's cpu kernels against eager, card by card: prints a table and writes JSON.

For cards of the families whose math goes through the templates' own exp and erf (silu, sigmoid,
tanh, both gelus, softmax, log-softmax), an add, and the norms and reductions, the root kernel is
compiled with the sandbox's g++ flags and called as the ``.cast`` runtime calls it (descriptors
packed once, outputs allocated per call); kernel and eager alternate in batches, medians kept.

    .venv/bin/python bench/cpu_templates.py [--out bench/results/cpu_templates.json] [--calls N]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent_service.offline.proposer import propose_offline  # noqa: E402
from gpu_sandbox_service.compiler import detect_toolchain  # noqa: E402
from kforge_domain.device import DeviceInfo  # noqa: E402
from kforge_domain.propose_request import ProposeRequest  # noqa: E402
from packager.abi import KernelLibrary  # noqa: E402
from packager.guard_cost import median_us  # noqa: E402
from packager.launcher import CallDescriptors, KernelLauncher  # noqa: E402
from tests.agent_service.agent_cards import aten_card  # noqa: E402

aten = torch.ops.aten


def _cases() -> list[tuple[str, Any, list[Any], dict[str, Any]]]:
    g = torch.Generator().manual_seed(0)

    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    return [
        ("silu [2, 64, 32, 32] f32", aten.silu.default, [r(2, 64, 32, 32)], {}),
        ("silu [256, 4096] bf16", aten.silu.default, [r(256, 4096, dtype=torch.bfloat16)], {}),
        ("sigmoid [1024, 1024] f32", aten.sigmoid.default, [r(1024, 1024)], {}),
        ("tanh [1024, 1024] f32", aten.tanh.default, [r(1024, 1024)], {}),
        ("gelu [64, 3072] f32", aten.gelu.default, [r(64, 3072)], {}),
        ("gelu tanh [64, 3072] f32", aten.gelu.default, [r(64, 3072)], {"approximate": "tanh"}),
        ("softmax [64, 1024] f32", aten._softmax.default, [r(64, 1024), -1, False], {}),
        ("log_softmax [64, 1024] f32", aten._log_softmax.default, [r(64, 1024), -1, False], {}),
        ("add [1024, 1024] f32", aten.add.Tensor, [r(1024, 1024), r(1024, 1024)], {}),
        ("layer_norm [512, 768] f32", aten.native_layer_norm.default, [r(512, 768), [768], r(768), r(768), 1e-5],
         {}),
        ("rms_norm [512, 768] f32", aten.rms_norm.default, [r(512, 768), [768], r(768), 1e-6], {}),
        ("group_norm [8, 64, 32, 32] f32", aten.native_group_norm.default,
         [r(8, 64, 32, 32), r(64), r(64), 8, 64, 1024, 32, 1e-5], {}),
        ("sum rows [1024, 1024] f32", aten.sum.dim_IntList, [r(1024, 1024), [-1]], {}),
        ("amax rows [1024, 1024] f32", aten.amax.default, [r(1024, 1024), [-1]], {}),
        ("global avg pool [8, 512, 7, 7] f32", aten.mean.dim, [r(8, 512, 7, 7), [-1, -2], True], {}),
    ]


def _interleaved(kernel: Any, eager: Any, calls: int, rounds: int = 3) -> tuple[float, float]:
    """Median µs of the kernel and of eager, over rounds that alternate between them."""
    medians = [median_us(kernel if i % 2 == 0 else eager, number=calls) for i in range(2 * rounds)]
    return statistics.median(medians[0::2]), statistics.median(medians[1::2])


def run(out: Path, calls: int) -> dict[str, Any]:
    toolchain = detect_toolchain("cpu", f"cpu-{platform.machine()}")
    device = DeviceInfo(backend="cpu", name=platform.processor() or platform.machine(),
                               arch=f"cpu-{platform.machine()}", sm_count=torch.get_num_threads(), toolchain="g++")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        for name, op, args, kwargs in _cases():
            card, _ = aten_card(op, args, kwargs)
            proposal = propose_offline(ProposeRequest(card=card, device=device, backend="cpu", seed=0))
            source = Path(tmp) / f"k{len(rows)}.cpp"
            source.write_text(proposal.source)
            library = source.with_suffix(".so")
            subprocess.run([toolchain.compiler, *toolchain.flags(), "-o", str(library), str(source)], check=True)
            launcher = KernelLauncher(KernelLibrary(library), CallDescriptors(
                [s.model_dump() for s in card.inputs], [s.model_dump() for s in card.outputs]))
            tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
            status, outputs = launcher.run(tensors, torch.device("cpu"))
            want = op(*args, **kwargs)
            want = want[0] if isinstance(want, tuple) else want
            assert status == 0 and torch.allclose(outputs[0].float(), want.float(), rtol=2e-2, atol=1e-3), name
            k, e = _interleaved(partial(launcher.run, tensors, torch.device("cpu")), partial(op, *args, **kwargs),
                                calls)
            rows.append({"card": name, "knobs": proposal.knobs, "eager_us": round(e, 2), "kernel_us": round(k, 2),
                         "speedup": round(e / k, 3)})
            print(f"{name:28} eager {e:9.2f} µs  kernel {k:9.2f} µs  {e / k:6.2f}x", flush=True)
    result = {"machine": platform.machine(), "cpu": device.name, "threads": torch.get_num_threads(),
              "torch": torch.__version__, "compiler": toolchain.version, "date": time.strftime("%Y-%m-%d"),
              "cards": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cpu_templates.json")
    parser.add_argument("--calls", type=int, default=50, help="calls per timed batch")
    args = parser.parse_args()
    run(args.out, args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
