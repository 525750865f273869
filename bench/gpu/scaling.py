"""One fixed ``kforge optimize`` run on 1, 2, 4 and 8 GPUs of one host: rate, wall time, results.

For N GPUs one sandbox serves them all (``kforge serve sandbox --gpus 0,..,N-1``: one run slot
pinned per GPU, one compile cache and one blob store for the host) and the forge is given its
address once: the sandbox says how many candidates it takes at once (three per GPU, one per cpu
run slot), and the forge keeps that many in flight. Counts above the
host's GPUs are recorded as skipped. Each count starts afresh (own sandbox work dir, own runs
dir), so no count reuses another's compiled kernels.

Per count: wall time of the run, candidates a minute over the search (first candidate created to
last result, from the run store), speedup and efficiency against linear scaling of the 1-GPU
rate, and the run's result against the smallest count's: the distinct accepted (PASSED) kernel
sources per card (cards named by op and variant key, as card ids differ between runs) and each
card's best speedup. The offline proposer is seeded, but which kernel a card
refines next follows measured latencies and the order results arrive in, so with more slots in
flight the accepted set can differ; ``same_accepted`` and ``best_speedup_delta`` say by how much.

    python bench/gpu/scaling.py OUT_DIR [--backend cuda|cpu] [--counts 1,2,4,8] [--model NAME|PATH]
        [--cards 9] [--budget 8] [--seed 0] [--time-limit S] [--timeout S]

Defaults come from KF_BENCH_SCALING_{BACKEND,COUNTS,MODEL,CARDS,BUDGET,SEED,TIME_LIMIT,TIMEOUT};
the model defaults to ``sd35_vae_decoder`` on cuda (paper size, weights drawn on the GPU) and
``small_cnn`` on cpu, where ``--counts`` counts cpu run slots (``--workers``) of one sandbox.
Prints a table and writes ``scaling.json`` (plus each run's log) under OUT_DIR.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
sys.path.append(str(Path(__file__).resolve().parent))
from forge_e2e import MODELS, PAPER_SIZE  # noqa: E402

DEFAULT_COUNTS = (1, 2, 4, 8)
DEFAULT_MODEL = {"cuda": "sd35_vae_decoder", "cpu": "small_cnn"}


@dataclass
class CountResult:
    """One run of the fixed workload on ``devices`` GPUs (or cpu run slots)."""

    devices: int
    skipped: str = ""
    error: str = ""
    wall_s: float | None = None
    search_s: float | None = None
    evaluations: int = 0
    candidates_per_min: float | None = None
    speedup_vs_1: float | None = None
    efficiency: float | None = None
    run_status: str = ""
    accepted: dict[str, list[str]] = field(default_factory=dict)
    best_speedup: dict[str, float] = field(default_factory=dict)
    same_accepted: bool | None = None
    best_speedup_delta: float | None = None
    log: str = ""


def parse_counts(text: str) -> list[int]:
    """``1,2,4`` → ``[1, 2, 4]``, sorted and unique; raises ``ValueError`` on anything but positive ints."""
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as exc:
        raise ValueError(f"--counts {text!r}: expected comma-separated positive integers") from exc
    if not counts or counts[0] < 1:
        raise ValueError(f"--counts {text!r}: expected comma-separated positive integers")
    return counts


def host_devices(backend: str) -> int:
    """GPUs visible here (cuda), or cpu cores (cpu)."""
    if backend == "cpu":
        return os.cpu_count() or 1
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                              text=True, check=False)
        if proc.returncode == 0:
            return len(proc.stdout.split())
    return 0


def resolve_model(name: str) -> tuple[str, dict[str, str]]:
    """A name of ``forge_e2e.MODELS`` or a model spec path, and the environment it runs with."""
    if name in MODELS:
        return MODELS[name]
    return name, {}


def start_sandbox(work: Path, backend: str, devices: int, log: Path) -> tuple[subprocess.Popen[str], str]:
    """One ``kforge serve sandbox`` serving ``devices`` GPUs (``--gpus``) or cpu slots (``--workers``)."""
    slots = ["--gpus", ",".join(map(str, range(devices)))] if backend == "cuda" else ["--workers", str(devices)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "forge_service.cli", "serve", "sandbox", "--address", "127.0.0.1:0", "--backend",
         backend, "--work-dir", str(work), *slots],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    with log.open("a") as out:
        for line in proc.stdout:
            out.write(line)
            if match := re.search(r"listening on (\S+:\d+)", line):
                return proc, match.group(1)
    proc.wait()
    raise RuntimeError(f"the sandbox did not start: {log.read_text(errors='replace')[-1500:]}")


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def card_label(card_json: str) -> str:
    """A card's name that holds across runs (its id does not): the op and a digest of its variant key."""
    card = json.loads(card_json)
    key = json.dumps(card.get("key", {}), sort_keys=True)
    return f"{card.get('op', '?')}@{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def read_run(run_dir: Path) -> dict:
    """From the run store: search span, evaluations, accepted source digests and best speedup per card."""
    con = sqlite3.connect(f"file:{run_dir / 'run.sqlite'}?mode=ro", uri=True)
    try:
        first = con.execute("SELECT MIN(created_at) FROM candidates").fetchone()[0]
        last = con.execute("SELECT MAX(created_at) FROM results").fetchone()[0]
        evaluations = con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        accepted: dict[str, set[str]] = {}
        best: dict[str, float] = {}
        for card_json, source, speedup in con.execute(
                "SELECT k.card_json, c.source, r.speedup FROM results r JOIN candidates c ON c.id = r.candidate_id "
                "JOIN cards k ON k.id = c.card_id WHERE r.status = 'PASSED'"):
            card = card_label(card_json)
            accepted.setdefault(card, set()).add(hashlib.sha256((source or "").encode()).hexdigest()[:16])
            if speedup is not None:
                best[card] = max(best.get(card, 0.0), float(speedup))
    finally:
        con.close()
    return {"search_s": (last - first) if first is not None and last is not None else None,
            "evaluations": evaluations, "accepted": {k: sorted(v) for k, v in sorted(accepted.items())},
            "best_speedup": {k: round(v, 4) for k, v in sorted(best.items())}}


def run_count(devices: int, args: argparse.Namespace, work: Path, out_dir: Path) -> CountResult:
    """The fixed run with one sandbox serving ``devices`` slots, its address given to the forge once."""
    result = CountResult(devices, log=str(out_dir / f"run-{devices}.log"))
    log = Path(result.log)
    log.write_text("")
    spec, model_env = resolve_model(args.model)
    env = {**os.environ, **(PAPER_SIZE if args.backend == "cuda" else {}), **model_env}
    sandbox, address = start_sandbox(work / f"sandbox-{devices}", args.backend, devices, log)
    try:
        cmd = [sys.executable, "-m", "forge_service.cli", "-v", "optimize", spec, "--backend", args.backend,
               "--budget", str(args.budget), "--max-cards", str(args.cards), "--seed", str(args.seed),
               "--json", "--runs-dir", str(work / f"runs-{devices}"), "--no-compile-baseline"]
        if args.time_limit:
            cmd += ["--time-limit", str(args.time_limit)]
        cmd += ["--sandbox", address]  # the sandbox says how many candidates its slots take at once
        started = time.perf_counter()
        try:
            with log.open("a") as progress:
                proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=progress, text=True, env=env,
                                      timeout=args.timeout)
        except subprocess.TimeoutExpired:
            result.error = f"timed out after {args.timeout:g} s"
            return result
        result.wall_s = round(time.perf_counter() - started, 2)
        if proc.returncode != 0:
            result.error = f"optimize exited {proc.returncode}: {log.read_text(errors='replace')[-1500:]}"
            return result
        outcome = json.loads(proc.stdout)
        result.run_status = outcome["run"]["status"]
        facts = read_run(Path(outcome["run"]["run_dir"]))
    finally:
        stop(sandbox)
    result.search_s = round(facts["search_s"], 2) if facts["search_s"] else None
    result.evaluations = facts["evaluations"]
    result.accepted, result.best_speedup = facts["accepted"], facts["best_speedup"]
    if result.search_s:
        result.candidates_per_min = round(result.evaluations / result.search_s * 60, 2)
    return result


def compare(results: list[CountResult]) -> None:
    """Fill in speedup and efficiency against linear, and the result against the smallest count's run."""
    done = [r for r in results if not r.skipped and not r.error]
    if not done:
        return
    base = done[0]
    for r in done:
        if base.candidates_per_min and r.candidates_per_min:
            r.speedup_vs_1 = round(r.candidates_per_min / base.candidates_per_min * base.devices, 3)
            r.efficiency = round(r.speedup_vs_1 / r.devices, 3)
        r.same_accepted = r.accepted == base.accepted
        cards = set(r.best_speedup) | set(base.best_speedup)
        r.best_speedup_delta = round(max(
            (abs(r.best_speedup.get(c, 1.0) - base.best_speedup.get(c, 1.0)) for c in cards), default=0.0), 4)


def table(results: list[CountResult]) -> str:
    """The per-count table printed after the runs."""
    def cell(value: object) -> str:
        return "-" if value is None or value == "" else str(value)

    lines = ["| devices | wall s | search s | evals | cand/min | speedup | efficiency | same accepted "
             "| max best-speedup Δ | note |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        note = r.skipped or r.error[:80].replace("\n", " ") or r.run_status
        lines.append(f"| {r.devices} | {cell(r.wall_s)} | {cell(r.search_s)} | {r.evaluations} | "
                     f"{cell(r.candidates_per_min)} | {cell(r.speedup_vs_1)} | {cell(r.efficiency)} | "
                     f"{cell(r.same_accepted)} | {cell(r.best_speedup_delta)} | {note} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--backend", choices=["cuda", "cpu"], default=env("KF_BENCH_SCALING_BACKEND", "cuda"))
    parser.add_argument("--counts", default=env("KF_BENCH_SCALING_COUNTS", ",".join(map(str, DEFAULT_COUNTS))))
    parser.add_argument("--model", default=env("KF_BENCH_SCALING_MODEL"),
                        help="a name of forge_e2e.MODELS or a model spec path")
    parser.add_argument("--cards", type=int, default=int(env("KF_BENCH_SCALING_CARDS", "9")))
    parser.add_argument("--budget", type=int, default=int(env("KF_BENCH_SCALING_BUDGET", "8")))
    parser.add_argument("--seed", type=int, default=int(env("KF_BENCH_SCALING_SEED", "0")))
    parser.add_argument("--time-limit", type=float, default=float(env("KF_BENCH_SCALING_TIME_LIMIT", "0")),
                        help="stop each run's search after S seconds (0: none; a cut run is not comparable)")
    parser.add_argument("--timeout", type=float, default=float(env("KF_BENCH_SCALING_TIMEOUT", "3600")),
                        help="seconds per count before the run is abandoned")
    args = parser.parse_args(argv)
    try:
        args.counts = parse_counts(args.counts)
    except ValueError as exc:
        parser.error(str(exc))
    if args.cards < 1 or args.budget < 1:
        parser.error("--cards and --budget must be at least 1")
    args.model = args.model or DEFAULT_MODEL[args.backend]
    spec, _ = resolve_model(args.model)
    if not (ROOT / spec).is_file() and not Path(spec).is_file():
        parser.error(f"--model {args.model!r}: neither a name of forge_e2e.MODELS nor a model file")
    return args


def run(args: argparse.Namespace) -> dict:
    """Every count in turn; returns (and writes) the JSON document."""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    available = host_devices(args.backend)
    results: list[CountResult] = []
    with tempfile.TemporaryDirectory(prefix="kforge-scaling-") as tmp:
        for devices in args.counts:
            if devices > available:
                unit = "GPUs" if args.backend == "cuda" else "cpu cores"
                results.append(CountResult(devices, skipped=f"host has {available} {unit}"))
                continue
            results.append(run_count(devices, args, Path(tmp), args.out_dir))
            print(f"{devices}: {results[-1].error or results[-1].run_status} in {results[-1].wall_s} s", flush=True)
    compare(results)
    doc = {"backend": args.backend, "model": args.model, "cards": args.cards, "budget": args.budget,
           "seed": args.seed, "time_limit_s": args.time_limit or None, "host": platform.node(),
           "host_devices": available, "device_name": device_name(args.backend), "commit": commit(),
           "layout": "one sandbox per host (--gpus 0..N-1), its address given to the forge once",
           "results": [asdict(r) for r in results]}
    (args.out_dir / "scaling.json").write_text(json.dumps(doc, indent=1))
    print(table(results))
    return doc


def device_name(backend: str) -> str:
    if backend == "cuda" and shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, check=False)
        return proc.stdout.splitlines()[0].strip() if proc.returncode == 0 and proc.stdout.strip() else ""
    return platform.processor() or platform.machine()


def commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return proc.stdout.strip()


if __name__ == "__main__":
    run(parse_args())
