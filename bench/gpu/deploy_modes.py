"""A model's .cast in each deployment mode on the GPU: eager, cast.compile, and CUDA graphs.

Per model (names of ``forge_e2e.MODELS``, from KF_BENCH_MODES_MODELS): ``kforge optimize --backend
cuda --no-compile-baseline`` finds and packages the kernels (the eager check and its pruning
included); the .cast is then rebuilt with every packaged kernel allowed in compiled graphs, and
``forge_service.e2e`` measures, in one process, eager against the .cast applied, torch.compile
against ``cast.compile``, and the same pair with ``mode="reduce-overhead"``, each with its parity.
This is the comparison a run's compiled verdicts are made from, before any compiled pruning.
KF_BENCH_MODES_BUDGET, KF_BENCH_MODES_CARDS and KF_BENCH_MODES_SEARCH_S size the search;
KF_BENCH_MODES_TIMEOUT bounds each step (seconds). Writes ``<model>.json`` under the output folder.

With KF_BENCH_MODES_PRUNED=1 the run itself measures and prunes every mode instead
(``kforge optimize --cuda-graphs``): the result is the run's own end-to-end figures, the ops each
mode left out, and every packaged kernel's verdict per mode, as a user of the .cast gets them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
sys.path.append(str(Path(__file__).resolve().parent))
from forge_e2e import MODELS, PAPER_SIZE  # noqa: E402


def _run(cmd: list[str], env: dict[str, str], timeout: float, log: Path) -> subprocess.CompletedProcess[str] | str:
    try:
        with log.open("a") as progress:
            return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=progress, text=True, cwd=ROOT,
                                  env={**os.environ, **env}, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:g} s"


def compiled_cast(run_dir: Path, out: Path) -> int:
    """The run's .cast with every packaged kernel kept for compiled use, with and without CUDA graphs
    (the eager verdicts as measured)."""
    from forge_service.packaging import Pruning, write_cast
    from forge_service.store import RunStore

    store = RunStore(run_dir)
    try:
        measured = Pruning.from_report(json.loads(store.run_row()["report_json"] or "{}"))
        pruning = Pruning(measured=("compiled", "cuda_graphs"), excluded={**measured.excluded, "compiled": {},
                                                                        "cuda_graphs": {}})
        return len(write_cast(store, None, out, pruning).kernels)
    finally:
        store.close()


def optimize(name: str, work: Path, modes: list[str]) -> tuple[dict, Path, dict[str, str], float]:
    """``kforge optimize`` on the model: its JSON outcome (or ``{"error": ...}``), the .cast, the env."""
    spec, model_env = MODELS[name]
    env = {**PAPER_SIZE, **model_env}
    timeout = float(os.environ.get("KF_BENCH_MODES_TIMEOUT", "420"))
    runs, log = work / f"{name}-runs", work / f"{name}.log"
    cast = work / f"{name}.cast"
    proc = _run([sys.executable, "-m", "forge_service.cli", "-v", "optimize", spec, "--backend", "cuda",
                 "--budget", os.environ.get("KF_BENCH_MODES_BUDGET", "2"),
                 "--max-cards", os.environ.get("KF_BENCH_MODES_CARDS", "3"), *modes, "--json",
                 "--runs-dir", str(runs), "--samples", "1", "--sample-budget-mb", "8192", "--out", str(cast),
                 "--time-limit", os.environ.get("KF_BENCH_MODES_SEARCH_S", "90")], env, timeout, log)
    if isinstance(proc, str) or proc.returncode != 0:
        return ({"error": proc if isinstance(proc, str) else proc.stdout[-2000:],
                 "log": log.read_text(errors="replace")[-3000:]}, cast, env, timeout)
    return json.loads(proc.stdout), cast, env, timeout


def measure_pruned(name: str, work: Path) -> dict:
    """The run's own per-mode measurement and pruning, and the verdicts its .cast ships."""
    from packager.archive import read_archive
    from packager.manifest import MODES, CastManifest

    started = time.perf_counter()
    outcome, cast, _, _ = optimize(name, work, ["--cuda-graphs"])
    if "error" in outcome:
        return {"ok": False, "step": "optimize", **outcome}
    report = outcome["report"]
    result = {"ok": True, "seconds": round(time.perf_counter() - started, 1),
              "end_to_end": report.get("end_to_end"),
              **{key: report.get(key) for key in ("pruned_ops", "pruned_compiled_ops", "pruned_cuda_graphs_ops")},
              "cards": [{k: c.get(k) for k in ("op", "eager_us", "best_us", "speedup", "status")}
                        for c in report.get("cards", []) if c.get("status") != "skipped"]}
    if cast.is_file():
        manifest = CastManifest.from_json(read_archive(cast).files["manifest.json"])
        result["kernels"] = [{"op": k.op, "card_id": k.card_id, "speedup": k.speedup,
                              **{m: k.mode_verdict(m).verdict for m in MODES}} for k in manifest.kernels]
    return result


def measure(name: str, work: Path) -> dict:
    if os.environ.get("KF_BENCH_MODES_PRUNED") == "1":
        return measure_pruned(name, work)
    spec = MODELS[name][0]
    log = work / f"{name}.log"
    started = time.perf_counter()
    outcome, _, env, timeout = optimize(name, work, ["--no-compile-baseline"])
    if "error" in outcome:
        return {"ok": False, "step": "optimize", **outcome}
    run_dir = Path(outcome["run"]["run_dir"])
    cast = work / f"{name}-compiled.cast"
    kernels = compiled_cast(run_dir, cast)
    optimize_s = round(time.perf_counter() - started, 1)
    e2e = _run([sys.executable, "-m", "forge_service.e2e", "--model", str(ROOT / spec), "--cast", str(cast),
                "--device", "cuda", "--modes", "eager,compiled,cuda_graphs"], env, timeout, log)
    result = {"ok": not isinstance(e2e, str) and e2e.returncode == 0, "optimize_s": optimize_s,
              "kernels": kernels, "optimize_end_to_end": outcome["report"].get("end_to_end"),
              "pruned_ops": outcome["report"].get("pruned_ops"),
              "cards": [{k: c.get(k) for k in ("op", "eager_us", "best_us", "speedup", "status")}
                        for c in outcome["report"].get("cards", []) if c.get("status") != "skipped"]}
    if result["ok"]:
        result["modes"] = json.loads(e2e.stdout.strip().splitlines()[-1])  # type: ignore[union-attr]
    else:
        result["error"] = e2e if isinstance(e2e, str) else log.read_text(errors="replace")[-3000:]
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def run(out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in os.environ.get("KF_BENCH_MODES_MODELS", "gemma4_prefill").split(","):
        results[name] = measure(name, out_dir)
        (out_dir / f"{name}.json").write_text(json.dumps(results[name], indent=1))
        modes = results[name].get("modes") or results[name].get("end_to_end") or {}
        print(name, {k: modes.get(k) for k in ("eager_ms", "cast_ms", "compile_ms", "cast_compile_ms",
                                              "cuda_graphs_ms", "cast_cuda_graphs_ms", "parity_ok",
                                              "cast_compile_parity_ok", "cast_cuda_graphs_parity_ok")}, flush=True)
    return results


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/deploy_modes")), indent=1))
