"""The offline proposer on the examples' own cards (cpu): what it covers and whether it verifies.

Each example is captured with ``kforge capture`` (its real cards and samples), the offline
proposer writes the root kernel of every card it covers, g++ compiles it, and it runs on every
captured sample against the captured eager outputs. The table says, per example, how many cards
and how much of the captured eager time the templates cover, and how many kernels verified; the
JSON lists every card with its status or the reason it has no proposal.

    .venv/bin/python bench/agent_examples_cpu.py [--examples small_cnn,resnet50] [--out bench/results]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from agent_service.models import DeviceDescription, ProposalRequest  # noqa: E402
from agent_service.offline.proposer import propose_offline  # noqa: E402
from capture_service.cards import BLOBS_DIR, CardSet, OperatorCard, TensorSpec  # noqa: E402
from packager.abi import KernelLibrary  # noqa: E402

EXAMPLES = ("small_cnn", "small_transformer", "resnet50", "gemma_decoder", "qwen2_decoder", "diffusion_block",
            "whisper_encoder")
INCLUDE = ROOT / "gpu_sandbox_service" / "include"
TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.2e-2}


def _compile(source: str, workdir: Path) -> Path:
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    src, lib = workdir / f"{digest}.cpp", workdir / f"{digest}.so"
    if not lib.exists():
        src.write_text(source)
        subprocess.run(["g++", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-I", str(INCLUDE), "-o",
                        str(lib), str(src)], check=True, capture_output=True, text=True)
    return lib


def _laid_out(values: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    """``values`` copied into the card's exact layout (blobs store tensors contiguous)."""
    span = sum((n - 1) * s for n, s in zip(spec.shape, spec.stride, strict=True)) if values.numel() else -1
    storage = torch.empty(spec.storage_offset + span + 1, dtype=values.dtype)
    view = storage.as_strided(spec.shape, spec.stride, spec.storage_offset)
    view.copy_(values)
    return view


def _verify(card: OperatorCard, lib: KernelLibrary, capture_dir: Path) -> tuple[str, float]:
    """Run the kernel on every captured sample; worst normalised error."""
    worst = 0.0
    if not card.samples:
        return "no samples", float("nan")
    for sample in card.samples:
        ins = load_file(str(capture_dir / BLOBS_DIR / f"{sample.inputs_blob}.safetensors"))
        outs = load_file(str(capture_dir / BLOBS_DIR / f"{sample.outputs_blob}.safetensors"))
        inputs = [ins[f"input.{i}"] for i in range(len(card.inputs))]
        inputs = [_laid_out(t, s) for t, s in zip(inputs, card.inputs, strict=True)]
        expected = [outs[f"output.{i}"] for i in range(len(card.outputs))]
        got = [torch.empty_strided(s.shape, s.stride, dtype=e.dtype).fill_(float("nan")) if s.numel
               else torch.empty(0, dtype=e.dtype) for s, e in zip(card.outputs, expected, strict=True)]
        rc = lib.launch(inputs, got, None)
        if rc != 0:
            return f"kf_launch returned {rc}", float("nan")
        for g, e in zip(got, expected, strict=True):
            if e.numel() == 0:
                continue
            g64, e64 = g.double(), e.double()
            if torch.isnan(g64).any():
                return "NaN or unwritten output", float("nan")
            rel = ((g64 - e64).norm() / max(e64.norm().item(), 1e-12)).item()
            worst = max(worst, rel)
            if rel > TOLERANCE.get(e.dtype, 1e-4):
                return "wrong result", worst
    return "verified", worst


def run_example(name: str, workdir: Path, device: DeviceDescription) -> dict[str, Any]:
    capture_dir = workdir / name
    started = time.time()
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "kforge"), "capture", str(ROOT / "examples" / f"{name}.py"),
                           "--out", str(capture_dir)], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"example": name, "error": (proc.stderr or proc.stdout)[-2000:]}
    cards = CardSet.load(capture_dir).cards
    rows = []
    for card in cards:
        row: dict[str, Any] = {"card": card.id, "kind": card.kind, "op": card.op, "shape": card.inputs[0].shape
                               if card.inputs else [], "time_share": card.time_share}
        if not card.optimisable:
            row.update(status="not optimisable", reason=card.reason)
        else:
            proposal = propose_offline(ProposalRequest(card=card, device=device))
            if not proposal.has_proposal:
                row.update(status="no proposal", reason=proposal.no_proposal_reason)
            else:
                try:
                    lib = KernelLibrary(_compile(proposal.source, workdir))
                    status, error = _verify(card, lib, capture_dir)
                except subprocess.CalledProcessError as exc:
                    status, error = f"compile error: {exc.stderr[-500:]}", float("nan")
                row.update(status=status, family=proposal.knobs.get("family"), rel_l2_error=error)
        rows.append(row)

    proposed = [r for r in rows if r["status"] not in ("not optimisable", "no proposal")]
    verified = [r for r in rows if r["status"] == "verified"]
    return {
        "example": name, "capture_s": round(time.time() - started, 1), "cards": len(rows),
        "optimisable": sum(r["status"] != "not optimisable" for r in rows),
        "proposed": len(proposed), "verified": len(verified),
        "time_share_proposed": sum(r["time_share"] for r in proposed),
        "time_share_verified": sum(r["time_share"] for r in verified), "rows": rows,
    }


def _table(results: list[dict[str, Any]]) -> str:
    lines = ["| example | cards | optimisable | offline proposal | verified | eager time covered | verified time |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['example']} | capture failed | | | | | |")
            continue
        lines.append(f"| {r['example']} | {r['cards']} | {r['optimisable']} | {r['proposed']} | {r['verified']} | "
                     f"{100 * r['time_share_proposed']:.1f}% | {100 * r['time_share_verified']:.1f}% |")
    reasons: dict[str, int] = {}
    for r in results:
        for row in r.get("rows", []):
            if row["status"] == "no proposal":
                reason = row["reason"]
                reasons[reason] = reasons.get(reason, 0) + 1
    lines += ["", "Cards without an offline proposal, by reason:", ""]
    lines += [f"- {n} × {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    import os

    device = DeviceDescription(backend="cpu", name="host cpu", sm_count=os.cpu_count() or 1)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [e for e in args.examples.split(",") if e]:
            results.append(run_example(name, Path(tmp), device))
            r = results[-1]
            print(f"{name}: {r.get('verified', 0)}/{r.get('proposed', 0)} verified, "
                  f"{100 * r.get('time_share_proposed', 0):.1f}% of eager time covered", flush=True)
    stamp = time.strftime("%Y-%m-%d")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"agent_examples_cpu_{stamp}.json").write_text(json.dumps(results, indent=1, default=str))
    (args.out / f"agent_examples_cpu_{stamp}.md").write_text(
        f"# Offline proposer on the examples' cards, cpu ({stamp})\n\n"
        "`bench/agent_examples_cpu.py`: root kernel of every covered card, compiled with g++, run on every captured "
        "sample against the captured eager outputs. Time shares are of the captured eager time, measured by capture "
        "on this 2-core machine while other work ran: read them as rough.\n\n" + _table(results))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
