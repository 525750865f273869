"""GPU capture of the paper's architectures: where each model's eager time goes, by card.

Captures ResNet-50 (batch 32, bf16), the Gemma3- and Qwen2-style decoders (bf16, sequence 512)
and the diffusers mid block at their ``KF_EXAMPLE_SIZE=gpu`` sizes on CUDA, each in its own
capture process, and writes ``capture_bench.json`` and ``capture_bench.md``: the top aten cards
by share of eager time with their eager µs, and the share of eager time in cards that are not
vendor-library calls (convolution, matmul, attention).

    python -c "import pathlib, bench.gpu.capture as b; print(b.run(pathlib.Path('out')))"
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from capture_service.capture import capture_model  # noqa: E402
from capture_service.errors import CaptureError  # noqa: E402
from kforge_domain.card import CardSet, OperatorCard  # noqa: E402

MODELS = {
    "resnet50 (b32, bf16, 224)": "examples/resnet50.py",
    "gemma3 decoder (bf16, seq 512)": "examples/gemma_decoder.py",
    "qwen2 decoder (bf16, seq 512)": "examples/qwen2_decoder.py",
    "diffusion mid block (bf16, 512ch 64x64)": "examples/diffusion_block.py",
}
TOP_CARDS = 12
SAMPLE_BUDGET_BYTES = 8 << 30


def _row(card: OperatorCard) -> dict[str, Any]:
    return {
        "op": card.op,
        "inputs": ["x".join(map(str, t.shape)) + f" {t.dtype}" for t in card.inputs],
        "calls": card.call_count,
        "eager_us": card.eager_us,
        "time_share": card.time_share,
        "vendor_op": card.vendor_op,
        "optimisable": card.optimisable,
        "reason": card.reason,
    }


def summarise(card_set: CardSet) -> dict[str, Any]:
    """Top aten cards by time share and how much eager time is outside vendor-library calls."""
    aten = [c for c in card_set.cards if c.kind == "aten"]
    modules = [c for c in card_set.cards if c.kind == "module" and c.optimisable]
    return {
        "total_eager_us": card_set.total_eager_us,
        "n_cards": len(card_set.cards),
        "n_aten_cards": len(aten),
        "n_module_cards": len(modules),
        "non_vendor_share": sum(c.time_share for c in aten if not c.vendor_op),
        "optimisable_non_vendor_share": sum(c.time_share for c in aten if not c.vendor_op and c.optimisable),
        "top_cards": [_row(c) for c in sorted(aten, key=lambda c: c.time_share, reverse=True)[:TOP_CARDS]],
        "top_module_cards": [
            _row(c) for c in sorted(modules, key=lambda c: c.time_share, reverse=True)[:5]
        ],
    }


def markdown(results: dict[str, Any], machine: dict[str, Any]) -> str:
    lines = [f"# Capture on {machine['device']} (torch {machine['torch']})", ""]
    for name, result in results.items():
        lines.append(f"## {name}")
        if "error" in result:
            lines += ["", f"capture failed: {result['error']}", ""]
            continue
        lines += [
            "",
            f"{result['n_aten_cards']} aten cards, {result['n_module_cards']} optimisable module cards; "
            f"captured eager time {result['total_eager_us'] / 1000:.2f} ms (sum of cards); "
            f"**{result['non_vendor_share']:.1%} of it in non-vendor cards** "
            f"({result['optimisable_non_vendor_share']:.1%} optimisable); capture took {result['capture_s']:.0f} s.",
            "",
            "| share | eager µs | calls | op | inputs | vendor | note |",
            "|---:|---:|---:|---|---|---|---|",
        ]
        for row in result["top_cards"]:
            eager = f"{row['eager_us']:.1f}" if row["eager_us"] is not None else "-"
            lines.append(
                f"| {row['time_share']:.1%} | {eager} | {row['calls']} | `{row['op']}` | "
                f"{', '.join(row['inputs'][:3])} | {'yes' if row['vendor_op'] else ''} | {row['reason']} |"
            )
        lines.append("")
    return "\n".join(lines)


def run(out_dir: Path) -> dict[str, Any]:
    """Capture each model on CUDA (CPU when none) and write the tables under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    machine = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    previous = os.environ.get("KF_EXAMPLE_SIZE")
    os.environ["KF_EXAMPLE_SIZE"] = "gpu"
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="kforge-capture-bench-") as scratch:
            for name, spec in MODELS.items():
                start = time.perf_counter()
                try:
                    card_set = capture_model(
                        str(REPO / spec), device=device, samples=1, budget_bytes=SAMPLE_BUDGET_BYTES,
                        out_dir=Path(scratch) / Path(spec).stem,
                    )
                except CaptureError as exc:
                    results[name] = {"error": str(exc)[-2000:]}
                    continue
                results[name] = {**summarise(card_set), "capture_s": time.perf_counter() - start}
    finally:
        if previous is None:
            os.environ.pop("KF_EXAMPLE_SIZE", None)
        else:
            os.environ["KF_EXAMPLE_SIZE"] = previous
    report = {"machine": machine, "models": results}
    (out_dir / "capture_bench.json").write_text(json.dumps(report, indent=1))
    (out_dir / "capture_bench.md").write_text(markdown(results, machine))
    return {
        name: {k: r[k] for k in ("non_vendor_share", "total_eager_us", "n_cards")} if "error" not in r else r
        for name, r in results.items()
    }


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1] if len(sys.argv) > 1 else "capture-bench")), indent=1))
