"""`kforge optimize --backend cuda` on model specs, end to end, on the GPU.

Runs the real CLI (embedded services, offline proposer) per model and keeps its JSON outcome:
per card eager µs, best µs, speedup and % of the bandwidth floor, and the model's end-to-end
latency per deployment mode with output parity: eager / .cast eager / torch.compile /
cast.compile, and with KF_BENCH_FORGE_CUDA_GRAPHS=1 the mode="reduce-overhead" pair. Each searched
card's own call is then timed under torch.compile too (bench/card_compile.py, in a child
process), giving the best kernel's speedup over torch.compile card by card.

KF_BENCH_FORGE_MODELS picks models (comma-separated names of MODELS; ``examples`` names the
bundled examples; the paper's models by default), KF_BENCH_FORGE_BUDGET the
evaluations per card, KF_BENCH_FORGE_CARDS the cards per model, KF_BENCH_FORGE_TIMEOUT the seconds
per model, of which capture and search may use KF_BENCH_FORGE_SEARCH_S (half by default: the rest
is for packaging and the end-to-end measurement); KF_BENCH_FORGE_NO_COMPILE=1 leaves torch.compile
out of the end-to-end measurement and the per-card baselines. Each model's result also says how
much of its captured eager time the offline proposer covers (``_coverage``) and what each
packaged kernel's guard costs per call (``guard_us``, from the .cast's manifest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(Path(__file__).resolve().parent))
from _coverage import card_table, offline_refusal  # noqa: E402

# name -> (model spec, environment)
MODELS: dict[str, tuple[str, dict[str, str]]] = {
    "sd35_vae_decoder": ("examples/paper/sd35_vae_decoder.py", {}),
    "sd35_vae_decoder_channels_last": ("examples/paper/sd35_vae_decoder.py", {"KF_EXAMPLE_VARIANT": "channels_last"}),
    "gemma4_prefill": ("examples/paper/gemma4_e2b.py", {"KF_EXAMPLE_VARIANT": "prefill"}),
    "resnet50_b32_bf16": ("examples/paper/resnet50.py", {"KF_EXAMPLE_VARIANT": "b32_bf16"}),
    "qwen35_prefill": ("examples/paper/qwen35_moe.py", {"KF_EXAMPLE_VARIANT": "prefill"}),
    "sd35_mmdit": ("examples/paper/sd35_mmdit.py", {}),
}
#: The bundled examples at their GPU sizes (``KF_BENCH_FORGE_MODELS=examples`` runs them all).
EXAMPLES: dict[str, tuple[str, dict[str, str]]] = {
    name: (f"examples/{name}.py", {})
    for name in ("small_cnn", "small_transformer", "resnet50", "diffusion_block", "gemma_decoder", "qwen2_decoder",
                 "whisper_encoder")
}
MODELS.update(EXAMPLES)
#: Paper sizes, weights drawn on the GPU: every process of a run that builds the model (the capture
#: worker, the end-to-end child) would otherwise draw a billion parameters on the CPU each time.
PAPER_SIZE = {"KF_EXAMPLE_SIZE": "gpu", "KF_EXAMPLE_DEVICE": "cuda"}


def optimize(name: str, spec: str, env: dict[str, str], runs: Path, budget: int, cards: int, log: Path) -> dict:
    """One ``kforge optimize`` run; its progress goes to ``log`` so a run cut short still shows how far it got."""
    cmd = [sys.executable, "-m", "forge_service.cli", "-v", "optimize", spec, "--backend", "cuda",
           "--budget", str(budget),
           "--max-cards", str(cards), "--json", "--runs-dir", str(runs), "--out", str(runs / f"{name}.cast"),
           "--sample-budget-mb", os.environ.get("KF_BENCH_FORGE_SAMPLE_MB", "8192"), "--samples", "1"]
    if no_compile():
        cmd.append("--no-compile-baseline")
    elif os.environ.get("KF_BENCH_FORGE_CUDA_GRAPHS") == "1":
        cmd.append("--cuda-graphs")
    timeout = float(os.environ.get("KF_BENCH_FORGE_TIMEOUT", "1500"))
    # Capture and search stop here, so packaging and the end-to-end measurement still fit in the timeout.
    cmd += ["--time-limit", os.environ.get("KF_BENCH_FORGE_SEARCH_S", str(round(timeout / 2)))]
    started = time.perf_counter()
    try:
        with log.open("w") as progress:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=progress, text=True, cwd=ROOT,
                                  env={**os.environ, **PAPER_SIZE, **env}, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "seconds": timeout, "error": f"timed out after {timeout:g} s",
                "stderr": log.read_text(errors="replace")[-3000:]}
    seconds = round(time.perf_counter() - started, 1)
    if proc.returncode != 0:
        return {"ok": False, "seconds": seconds, "stderr": log.read_text(errors="replace")[-3000:],
                "stdout": proc.stdout[-2000:]}
    out = json.loads(proc.stdout)
    report = out["report"]
    cards_out = [
        {k: c.get(k) for k in ("card_id", "op", "kind", "time_share", "status", "reason", "eager_us", "best_us",
                               "speedup", "floor_us", "pct_of_floor", "audit_class", "evaluations")}
        for c in report.get("cards", []) if c.get("status") != "skipped"
    ]
    run_dir = Path(out["run"].get("run_dir") or runs / str(out["run"]["run_id"]))
    if not no_compile():
        add_compile_baselines(run_dir, cards_out)
    return {"ok": True, "seconds": seconds, "run_status": out["run"]["status"],
            "evaluations": out["run"].get("evaluations_done"), "cards": cards_out,
            "end_to_end": report.get("end_to_end"), "kernels_packaged": report.get("kernels_packaged"),
            "pruned_ops": report.get("pruned_ops"), "pruned_compiled_ops": report.get("pruned_compiled_ops"),
            "guard_us": guard_costs(runs / f"{name}.cast"),
            "coverage": coverage(run_dir)}


def no_compile() -> bool:
    """Whether torch.compile stays out of the run (end to end and card by card)."""
    return os.environ.get("KF_BENCH_FORGE_NO_COMPILE") == "1"


def guard_costs(cast: Path) -> dict:
    """Per packaged kernel, what its guarded dispatch costs per call (µs), from the .cast's manifest."""
    if not cast.is_file():
        return {}
    inspect = "from packager.cli import main; raise SystemExit(main())"
    proc = subprocess.run([sys.executable, "-c", inspect, "inspect", str(cast), "--json"],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        return {"error": proc.stderr[-500:]}
    return {k["card_id"]: k["guard_cost_us"] for k in json.loads(proc.stdout)["kernels"]}


def coverage(run_dir: Path) -> dict:
    """The run's captured cards: top ones by share and the share the offline proposer covers."""
    try:
        from kforge_domain.card import CardSet

        return card_table(CardSet.load(run_dir / "capture"), offline_refusal())
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def add_compile_baselines(run_dir: Path, cards: list[dict]) -> None:
    """Each card's torch.compile µs and the best kernel's speedup over it (or why it is missing)."""
    ids = [str(c["card_id"]) for c in cards if c.get("card_id")]
    if not ids:
        return
    cmd = [sys.executable, str(ROOT / "bench/card_compile.py"), str(run_dir), "--json", "--device", "cuda"]
    cmd += [arg for card_id in ids for arg in ("--card", card_id)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
        baselines = json.loads(proc.stdout) if proc.returncode == 0 else {}
        error = "" if proc.returncode == 0 else proc.stderr[-800:]
    except subprocess.TimeoutExpired:
        baselines, error = {}, "card_compile timed out after 600 s"
    for card in cards:
        row = baselines.get(str(card.get("card_id")), {"error": error})
        card["compile_us"] = row.get("compile_us")
        card["compile_error"] = row.get("error")
        best, compiled = card.get("best_us"), row.get("compile_us")
        card["speedup_vs_compile"] = round(compiled / best, 3) if best and compiled else None


def run(out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    asked = os.environ.get("KF_BENCH_FORGE_MODELS", ",".join(n for n in MODELS if n not in EXAMPLES))
    names = [m for n in asked.split(",") if n for m in (EXAMPLES if n == "examples" else [n])]
    budget = int(os.environ.get("KF_BENCH_FORGE_BUDGET", "4"))
    cards = int(os.environ.get("KF_BENCH_FORGE_CARDS", "3"))
    results = {}
    runs_dir = Path(tempfile.mkdtemp(prefix="kforge-bench-runs-"))  # blobs are large: keep them off out_dir
    for name in names:
        spec, env = MODELS[name]
        results[name] = optimize(name, spec, env, runs_dir, budget, cards, out_dir / f"{name}.log")
        (out_dir / "forge_e2e.json").write_text(json.dumps(results, indent=1))
        print(json.dumps({name: {k: v for k, v in results[name].items() if k != "cards"}}, default=str)[:1500],
              flush=True)
    return results
