"""What a module card's eager reference costs per call against the live module: prints a table, writes JSON.

The sandbox times a module card's eager call on the module's exported program; capture times the
live module. ``ExportedProgram.module()`` checks each call's inputs against the export (a
pre-hook, a guard function, a metadata assertion per tensor), which the sandbox's lean program
(:func:`gpu_sandbox_service.harness.reference.lean_module`) leaves out; the sandbox then calls
that program on its inputs flattened once
(:class:`gpu_sandbox_service.harness.flat_program.FlatProgram`). For a few small modules of the
kinds module cards hold (an RMSNorm written out, a gated MLP's activation, a LayerNorm, a norm and
activation block of submodules, a ReLU on a few floats), their programs saved and loaded as the
sandbox has them, on the device given: the live module, ``module()``, the lean module with the
call hooks ``module()`` adds (what the lean module was before it left them out), the lean module
called whole and the bound call the sandbox times, median µs of a call.

    .venv/bin/python bench/module_reference.py [--device cpu] [--out bench/results/module_reference.json]
"""

from __future__ import annotations

import argparse
import copy
import functools
import io
import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from gpu_sandbox_service.harness.flat_program import FlatProgram
from gpu_sandbox_service.harness.reference import lean_module

REPEATS = 2000
ROUNDS = 20


class RMSNorm(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.float()
        v = v * torch.pow(v.pow(2).mean(-1, keepdim=True) + 1e-6, -0.5)
        return (v * self.weight.float()).type_as(x)


class GatedSilu(torch.nn.Module):
    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(gate) * up


def modules(device: torch.device) -> dict[str, tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]:
    rows = torch.randn(8, 1536, device=device, dtype=torch.bfloat16)
    return {
        "rms_norm bf16 (8, 1536)": (RMSNorm(1536).to(device), (rows,)),
        "silu(gate) * up bf16 (8, 1536)": (GatedSilu(), (rows, rows.clone())),
        "nn.LayerNorm fp32 (8, 1536)": (torch.nn.LayerNorm(1536).to(device), (rows.float(),)),
        "LayerNorm, SiLU (Sequential) fp32 (8, 1536)": (
            torch.nn.Sequential(torch.nn.LayerNorm(1536), torch.nn.SiLU()).to(device), (rows.float(),)),
        "nn.ReLU fp32 (8, 64)": (torch.nn.ReLU(), (rows[:, :64].float(),)),
    }


def saved_and_loaded(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.export.ExportedProgram:
    """The module's program as the sandbox loads it: exported, saved, loaded."""
    buffer = io.BytesIO()
    torch.export.save(torch.export.export(module, inputs), buffer)
    buffer.seek(0)
    return torch.export.load(buffer)


def with_call_hooks(lean: torch.nn.Module, program: torch.export.ExportedProgram) -> torch.nn.Module:
    """``lean`` with the hooks ``module()`` wraps around each call put back, its input checks
    aside: what the lean program cost before it left them out."""
    hooked, source = copy.deepcopy(lean), program.module()
    for key, hook in source._forward_hooks.items():
        hooked._forward_hooks[key] = hook
        if key in source._forward_hooks_always_called:
            hooked._forward_hooks_always_called[key] = True
    for key, hook in source._forward_pre_hooks.items():
        if getattr(hook, "__name__", "") != "_check_input_constraints_pre_hook":
            hooked._forward_pre_hooks[key] = hook
    return hooked


def medians_us(calls: Sequence[Callable[[], object]], device: torch.device) -> list[float]:
    """Median µs of a call of each, timed in turns (``ROUNDS`` rounds of ``REPEATS // ROUNDS`` calls
    of each), so that a change in the machine's load falls on all of them alike."""
    for call in calls:
        for _ in range(50):
            call()
    samples: list[list[float]] = [[] for _ in calls]
    for _ in range(ROUNDS):
        for call, timed in zip(calls, samples, strict=True):
            for _ in range(REPEATS // ROUNDS):
                start = time.perf_counter()
                call()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                timed.append((time.perf_counter() - start) * 1e6)
    return [statistics.median(timed) for timed in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=Path("bench/results/module_reference.json"))
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = []
    with torch.inference_mode():
        for name, (module, inputs) in modules(device).items():
            program = saved_and_loaded(module, inputs)
            checked, lean = program.module(), lean_module(program)
            hooked = with_call_hooks(lean, program)
            flat = FlatProgram.of(lean)
            assert flat is not None, name
            calls: list[Callable[[], object]] = [functools.partial(m, *inputs) for m in (module, checked, hooked, lean)]
            calls.append(flat.bind(inputs, {}, None))
            live_us, checked_us, hooked_us, lean_us, bound_us = medians_us(calls, device)
            rows.append({"module": name, "live_us": live_us, "module_us": checked_us, "hooked_us": hooked_us,
                         "lean_us": lean_us, "bound_us": bound_us, "module_over_live": checked_us / live_us,
                         "hooked_over_live": hooked_us / live_us, "lean_over_live": lean_us / live_us,
                         "bound_over_live": bound_us / live_us})
    print(f"{'module':44} {'live µs':>9} {'module() µs':>12} {'hooked µs':>10} {'lean µs':>9} {'bound µs':>9} "
          f"{'module()/live':>14} {'hooked/live':>12} {'lean/live':>10} {'bound/live':>11}")
    for r in rows:
        print(f"{r['module']:44} {r['live_us']:9.1f} {r['module_us']:12.1f} {r['hooked_us']:10.1f} {r['lean_us']:9.1f} "
              f"{r['bound_us']:9.1f} {r['module_over_live']:14.2f} {r['hooked_over_live']:12.2f} "
              f"{r['lean_over_live']:10.2f} {r['bound_over_live']:11.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": str(device), "host": platform.processor() or platform.machine(),
                                    "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
