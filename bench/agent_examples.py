"""The offline proposer on the examples' own cards: what it covers and whether it verifies.

Each example is captured with ``kforge capture`` (its real cards and samples), the offline
proposer writes the root kernel of every card it covers for the backend, the backend's compiler
builds it (g++ for ``cpu``; nvcc for ``cuda``, several builds at once) and it runs on every
captured sample against the captured eager outputs. The table says, per example, how many cards
and how much of the captured eager time the templates cover, and how many kernels verified; the
JSON lists every card with its status or the reason it has no proposal.

With ``--backend cuda`` on a GPU the examples are captured on it at their GPU sizes
(``KF_EXAMPLE_SIZE=gpu``). Without a GPU the cards are captured on the cpu, retargeted to cuda and
only compiled (status ``compiled``): a check that every template family builds with nvcc.

    .venv/bin/python bench/agent_examples.py [--backend cpu|cuda] [--examples small_cnn,resnet50] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from agent_service.offline.proposer import propose_offline  # noqa: E402
from gpu_sandbox_service.compiler import SOURCE_SUFFIX, Toolchain, detect_toolchain  # noqa: E402
from kforge_domain.card import BLOBS_DIR, CardSet, OperatorCard, TensorSpec  # noqa: E402
from kforge_domain.device import DeviceInfo  # noqa: E402
from kforge_domain.propose_request import ProposeRequest  # noqa: E402
from packager.abi import KernelLibrary  # noqa: E402

EXAMPLES = ("small_cnn", "small_transformer", "resnet50", "gemma_decoder", "qwen2_decoder", "diffusion_block",
            "whisper_encoder")
TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.2e-2}


def _compile(source: str, workdir: Path, toolchain: Toolchain) -> Path:
    """Builds ``source`` with the sandbox's compiler and flags (no isolation: the sources are ours)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    src, lib = workdir / f"{digest}{SOURCE_SUFFIX[toolchain.backend]}", workdir / f"{digest}.so"
    if not lib.exists():
        src.write_text(source)
        subprocess.run([toolchain.compiler, *toolchain.flags(), "-o", str(lib), str(src)], check=True,
                       capture_output=True, text=True)
    return lib


def _on_device(card: OperatorCard, device: str) -> OperatorCard:
    """The card as a capture on ``device`` would have written it (for compile-only checks)."""
    key = json.loads(json.dumps(card.key))
    for tensor in key.get("tensors", []):
        if "device" in tensor:
            tensor["device"] = device
    return card.model_copy(update={"device": device, "key": key})


def _laid_out(values: torch.Tensor, spec: TensorSpec, device: str) -> torch.Tensor:
    """``values`` copied into the card's exact layout (blobs store tensors contiguous)."""
    span = sum((n - 1) * s for n, s in zip(spec.shape, spec.stride, strict=True)) if values.numel() else -1
    storage = torch.empty(spec.storage_offset + span + 1, dtype=values.dtype, device=device)
    view = storage.as_strided(spec.shape, spec.stride, spec.storage_offset)
    view.copy_(values)
    return view


def _verify(card: OperatorCard, lib: KernelLibrary, capture_dir: Path, device: str) -> tuple[str, float]:
    """Run the kernel on every captured sample; worst normalised error."""
    worst = 0.0
    if not card.samples:
        return "no samples", float("nan")
    stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else None
    for sample in card.samples:
        ins = load_file(str(capture_dir / BLOBS_DIR / f"{sample.inputs_blob}.safetensors"))
        outs = load_file(str(capture_dir / BLOBS_DIR / f"{sample.outputs_blob}.safetensors"))
        inputs = [ins[f"input.{i}"] for i in range(len(card.inputs))]
        inputs = [_laid_out(t, s, device) for t, s in zip(inputs, card.inputs, strict=True)]
        expected = [outs[f"output.{i}"] for i in range(len(card.outputs))]
        got = [torch.empty_strided(s.shape, s.stride, dtype=e.dtype, device=device).fill_(float("nan")) if s.numel
               else torch.empty(0, dtype=e.dtype, device=device) for s, e in zip(card.outputs, expected, strict=True)]
        rc = lib.launch(inputs, got, stream)
        if device == "cuda":
            torch.cuda.synchronize()
        if rc != 0:
            return f"kf_launch returned {rc}", float("nan")
        for g, e in zip(got, expected, strict=True):
            if e.numel() == 0:
                continue
            g64, e64 = g.cpu().double(), e.double()
            if torch.isnan(g64).any():
                return "NaN or unwritten output", float("nan")
            rel = ((g64 - e64).norm() / max(e64.norm().item(), 1e-12)).item()
            worst = max(worst, rel)
            if rel > TOLERANCE.get(e.dtype, 1e-4):
                return "wrong result", worst
    return "verified", worst


def run_example(name: str, workdir: Path, device: DeviceInfo, pool: ThreadPoolExecutor,
                toolchain: Toolchain) -> dict[str, Any]:
    capture_dir = workdir / name
    on_gpu = device.backend == "cuda" and torch.cuda.is_available()
    started = time.time()
    env = {**os.environ, **({"KF_EXAMPLE_SIZE": "gpu"} if on_gpu else {})}
    proc = subprocess.run([sys.executable, "-m", "forge_service.cli", "capture", str(ROOT / "examples" / f"{name}.py"),
                           "--out", str(capture_dir), "--device", "cuda" if on_gpu else "cpu", "--samples", "1",
                           "--sample-budget-mb", "4096"],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        return {"example": name, "error": (proc.stderr or proc.stdout)[-2000:]}
    cards = CardSet.load(capture_dir).cards
    if device.backend == "cuda" and not on_gpu:
        cards = [_on_device(card, "cuda") for card in cards]
    rows: list[dict[str, Any]] = []
    builds = {}
    for card in cards:
        row: dict[str, Any] = {"card": card.id, "kind": card.kind, "op": card.op, "shape": card.inputs[0].shape
                               if card.inputs else [], "dtype": card.inputs[0].dtype if card.inputs else "",
                               "time_share": card.time_share}
        rows.append(row)
        if not card.optimisable:
            row.update(status="not optimisable", reason=card.reason)
            continue
        proposal = propose_offline(ProposeRequest(card=card, device=device, backend=device.backend))
        if not proposal.has_proposal:
            row.update(status="no proposal", reason=proposal.no_proposal_reason)
            continue
        row["family"] = proposal.knobs.get("family")
        builds[card.id] = pool.submit(_compile, proposal.source, workdir, toolchain)
    for card, row in zip(cards, rows, strict=True):
        if card.id not in builds:
            continue
        try:
            lib_path = builds[card.id].result()
        except subprocess.CalledProcessError as exc:
            row.update(status=f"compile error: {exc.stderr[-500:]}", rel_l2_error=float("nan"))
            continue
        if device.backend == "cuda" and not on_gpu:
            row.update(status="compiled", rel_l2_error=float("nan"))
            continue
        status, error = _verify(card, KernelLibrary(lib_path), capture_dir, "cuda" if on_gpu else "cpu")
        row.update(status=status, rel_l2_error=error)

    proposed = [r for r in rows if r["status"] not in ("not optimisable", "no proposal")]
    verified = [r for r in rows if r["status"] in ("verified", "compiled")]
    return {
        "example": name, "capture_s": round(time.time() - started, 1), "captured_on": "cuda" if on_gpu else "cpu",
        "cards": len(rows), "optimisable": sum(r["status"] != "not optimisable" for r in rows),
        "proposed": len(proposed), "verified": len(verified),
        "families": sorted({str(r["family"]) for r in verified}),
        # Over operator cards only: they partition the captured work, module cards overlap them.
        "time_share_proposed": sum(r["time_share"] for r in proposed if r["kind"] == "aten"),
        "time_share_verified": sum(r["time_share"] for r in verified if r["kind"] == "aten"), "rows": rows,
    }


def _table(results: list[dict[str, Any]], checked: str) -> str:
    lines = [f"| example | captured on | cards | optimisable | offline proposal | {checked} | eager time covered | "
             f"{checked} time |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    note = ("Eager time covered: the captured eager time in operator (aten) cards with a proposal; module cards "
            "contain operator cards, so their shares are not added.")
    for r in results:
        if "error" in r:
            lines.append(f"| {r['example']} | capture failed | | | | | | |")
            continue
        shares = f"{100 * r['time_share_proposed']:.1f}% | {100 * r['time_share_verified']:.1f}%"
        lines.append(f"| {r['example']} | {r['captured_on']} | {r['cards']} | {r['optimisable']} | {r['proposed']} | "
                     f"{r['verified']} | {shares} |")
    families: dict[str, list[int]] = {}
    failures: list[str] = []
    reasons: dict[str, int] = {}
    for r in results:
        for row in r.get("rows", []):
            if row["status"] == "no proposal":
                reasons[row["reason"]] = reasons.get(row["reason"], 0) + 1
            elif "family" in row:
                passed = row["status"] in ("verified", "compiled")
                counts = families.setdefault(str(row["family"]), [0, 0])
                counts[0] += passed
                counts[1] += 1
                if not passed:
                    where = f"{r['example']} {row['op']} {row['shape']} {row['dtype']}"
                    failures.append(f"- {where}: {row['status'][:200]}")
    lines += ["", note, "", f"Template families ({checked} / proposed):", ""]
    lines += [f"- {family}: {ok}/{n}" for family, (ok, n) in sorted(families.items())]
    if failures:
        lines += ["", "Failures:", "", *failures]
    lines += ["", "Cards without an offline proposal, by reason:", ""]
    lines += [f"- {n} × {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines) + "\n"


def _device(backend: str, arch: str) -> DeviceInfo:
    if backend == "cpu":
        return DeviceInfo(backend="cpu", name="host cpu", sm_count=os.cpu_count() or 1)
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return DeviceInfo(backend="cuda", name=props.name, arch=f"sm_{props.major}{props.minor}",
                                 sm_count=props.multi_processor_count, l2_bytes=props.L2_cache_size, toolchain="nvcc")
    return DeviceInfo(backend="cuda", name=f"{arch} (compile only)", arch=arch, sm_count=132,
                             l2_bytes=60 << 20, toolchain="nvcc")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--arch", default="sm_90", help="cuda without a GPU: the architecture to compile for")
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compiler processes at once")
    args = parser.parse_args()
    device = _device(args.backend, args.arch)
    compile_only = args.backend == "cuda" and not torch.cuda.is_available()
    checked = "compiled" if compile_only else "verified"
    toolchain = detect_toolchain(args.backend, device.arch or "cpu")
    results = []
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        for name in [e for e in args.examples.split(",") if e]:
            results.append(run_example(name, Path(tmp), device, pool, toolchain))
            r = results[-1]
            print(f"{name}: {r.get('verified', 0)}/{r.get('proposed', 0)} {checked}, "
                  f"{100 * r.get('time_share_proposed', 0):.1f}% of eager time covered {r.get('error', '')[-300:]}",
                  flush=True)
    stamp = time.strftime("%Y-%m-%d")
    tag = f"{args.backend}_{device.arch}_compile_only" if compile_only else args.backend
    if args.backend == "cuda" and not compile_only:
        tag = f"cuda_{device.name.split()[-1].lower()}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"agent_examples_{tag}_{stamp}.json").write_text(
        json.dumps({"device": dataclasses.asdict(device), "wall_s": round(time.time() - started, 1),
                    "results": results}, indent=1, default=str))
    if compile_only:
        how = (f"compiled with nvcc -arch={device.arch} (no GPU here: the cards were captured on the cpu, retargeted "
               "to cuda, and not run)")
    elif args.backend == "cuda":
        how = (f"compiled with nvcc -arch={device.arch} and run on the {device.name} on every captured sample against "
               "the captured eager outputs (examples at their GPU sizes)")
    else:
        how = "compiled with g++, run on every captured sample against the captured eager outputs"
    (args.out / f"agent_examples_{tag}_{stamp}.md").write_text(
        f"# Offline proposer on the examples' cards, {args.backend} ({stamp})\n\n"
        f"`bench/agent_examples.py --backend {args.backend}`: the root kernel of every covered card, {how}. Time "
        "shares are of the captured eager time.\n\n" + _table(results, checked))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
