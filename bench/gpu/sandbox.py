"""GPU measurements of the sandbox: the cuda corpus verdicts, seconds per candidate against
``torch.utils.cpp_extension.load_inline``, and eager timings against ``triton.testing.do_bench``.

    python -c "import pathlib, bench.gpu.sandbox as b; print(b.run(pathlib.Path('out')))"
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from gpu_sandbox_service.blobs import BlobStore  # noqa: E402
from gpu_sandbox_service.cardkit import card_from_call  # noqa: E402
from gpu_sandbox_service.evaluator import Evaluator  # noqa: E402
from gpu_sandbox_service.models import Limits  # noqa: E402
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions  # noqa: E402
from kforge_torch.timing import Summary, Timer  # noqa: E402

CORPUS = REPO / "tests" / "gpu_sandbox_service" / "corpus"
SPEED_CANDIDATES = 5
AGREEMENT_ROUNDS = 4
LOAD_INLINE_BUILDS = 2


def cuda_corpus() -> list[tuple[str, str, str]]:
    prelude = (CORPUS / "cuda" / "_prelude.inc").read_text()
    entries = []
    for path in sorted((CORPUS / "cuda").glob("*.cu")):
        text = path.read_text()
        expected = text.split("expect:", 1)[1].split()[0]
        entries.append((path.stem, prelude + "\n" + text, expected))
    return entries


async def corpus_verdicts(evaluator: Evaluator, store: BlobStore) -> list[dict[str, object]]:
    card = card_from_call("aten::_softmax.default", [torch.randn(512, 1024, device="cuda") * 3, -1, False], {},
                          store)
    rows = []
    for name, source, expected in cuda_corpus():
        options = EvaluationOptions(timing_runs=20, run_timeout_s=15.0 if name == "hang" else 0.0)
        result = await evaluator.evaluate(EvaluateRequest(candidate_id=name, card=card, source=source,
                                                            backend="cuda", options=options))
        rows.append({"entry": name, "expected": expected, "status": result.status.value,
                     "ok": result.status.value == expected, "error_message": result.error_message[:300],
                     "latency_us": result.latency_us, "eager_latency_us": result.eager_latency_us,
                     "total_s": round(result.total_s, 3)})
    return rows


async def seconds_per_candidate(evaluator: Evaluator, store: BlobStore) -> dict[str, object]:
    """Fresh sources (a nonce defeats the compile cache): compile + verify + time, end to end."""
    card = card_from_call("aten::_softmax.default", [torch.randn(4096, 4096, device="cuda"), -1, False], {}, store)
    prelude = (CORPUS / "cuda" / "_prelude.inc").read_text()
    body = (CORPUS / "cuda" / "softmax_ok.cu").read_text()
    seconds, compile_seconds, statuses, speedups = [], [], [], []
    for _ in range(SPEED_CANDIDATES):
        source = f"// nonce {uuid.uuid4().hex}\n{prelude}\n{body}"
        started = time.perf_counter()
        result = await evaluator.evaluate(EvaluateRequest(candidate_id="speed", card=card, source=source,
                                                            backend="cuda"))
        seconds.append(time.perf_counter() - started)
        compile_seconds.append(result.compile_s)
        statuses.append(result.status.value)
        speedups.append(result.speedup)
    return {"median_s": statistics.median(seconds), "seconds": seconds, "compile_seconds": compile_seconds,
            "statuses": statuses, "speedups": speedups}


LOAD_INLINE_WRAPPER = """
#include <torch/extension.h>
torch::Tensor softmax(torch::Tensor x) {
  auto y = torch::empty_like(x);
  softmax_rows<<<(unsigned)x.size(0), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
  return y;
}
"""


INCLUDE_DIR = Path(__file__).resolve().parents[2] / "gpu_sandbox_service" / "include"


def load_inline_seconds() -> dict[str, object]:
    """The common approach: build with torch headers through load_inline, load, check once."""
    from torch.utils.cpp_extension import load_inline

    prelude = (CORPUS / "cuda" / "_prelude.inc").read_text().split("static int64_t kf_rows")[0]
    x = torch.randn(4096, 4096, device="cuda")
    seconds = []
    for _ in range(LOAD_INLINE_BUILDS):
        name = f"kf_softmax_{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as build:
            module = load_inline(name, cpp_sources="torch::Tensor softmax(torch::Tensor x);",
                                 cuda_sources="#include <ATen/cuda/CUDAContext.h>\n" + prelude + LOAD_INLINE_WRAPPER,
                                 functions=["softmax"], build_directory=build, verbose=False,
                                 extra_include_paths=[str(INCLUDE_DIR)])
            torch.testing.assert_close(module.softmax(x), torch.softmax(x, -1))
        seconds.append(time.perf_counter() - started)
    return {"median_s": statistics.median(seconds), "seconds": seconds}


def eager_agreement(l2_bytes: int) -> list[dict[str, object]]:
    """The harness's eager timer against do_bench's median, on the same inputs, in interleaved rounds."""
    from triton.testing import do_bench

    x = torch.randn(8192, 8192, device="cuda")
    y = torch.randn(8192, 8192, device="cuda")
    a, b = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
    w = torch.randn(8192, device="cuda")
    ops = {
        "softmax": lambda: torch.ops.aten._softmax.default(x, -1, False),
        "add": lambda: torch.ops.aten.add.Tensor(x, y),
        "mm": lambda: torch.ops.aten.mm.default(a, b),
        "layer_norm": lambda: torch.ops.aten.native_layer_norm.default(x, [8192], w, w, 1e-5),
        "gelu": lambda: torch.ops.aten.gelu.default(x),
    }
    stream = torch.cuda.Stream()
    timer = Timer("cuda", l2_bytes, stream)
    rows = []
    for name, call in ops.items():
        for _ in range(5):
            timer.time_us(call)
        # Interleaved rounds, so clock or thermal drift during the run falls on both timers alike.
        ours_us: list[float] = []
        theirs_us: list[float] = []
        for _ in range(AGREEMENT_ROUNDS):
            ours_us += [timer.time_us(call) for _ in range(25)]
            with torch.cuda.stream(stream):
                theirs_us += [t * 1e3 for t in do_bench(call, warmup=5, rep=50, return_mode="all")]
        ours = Summary.of(ours_us)
        theirs = statistics.median(theirs_us)
        rows.append({"op": name, "harness_median_us": ours.median_us, "harness_iqr_us": ours.spread_us,
                     "do_bench_median_us": theirs, "do_bench_calls": len(theirs_us), "ratio": ours.median_us / theirs,
                     "within_5_percent": abs(ours.median_us / theirs - 1) <= 0.05})
    return rows


def run(out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kforge-sandbox-bench-"))
    store = BlobStore(work / "blobs")
    evaluator = Evaluator(work, "cuda", store, Limits())

    async def measure() -> dict[str, object]:
        device = await evaluator.device_info()
        return {"device": dataclasses.asdict(device), "isolation": evaluator.isolation,
                "corpus": await corpus_verdicts(evaluator, store),
                "candidate_seconds": await seconds_per_candidate(evaluator, store)}

    results = asyncio.run(measure())
    (out_dir / "sandbox.json").write_text(json.dumps(results, indent=1, default=str))
    try:
        if os.environ.get("KF_BENCH_SANDBOX_LOAD_INLINE", "1") == "0":
            raise RuntimeError("skipped (KF_BENCH_SANDBOX_LOAD_INLINE=0)")
        results["load_inline_seconds"] = load_inline_seconds()
    except Exception as exc:  # keep what was measured
        results["load_inline_seconds"] = {"median_s": None, "error": f"{type(exc).__name__}: {exc}"[-2000:]}
    device = results["device"]
    assert isinstance(device, dict)
    results["eager_vs_do_bench"] = eager_agreement(int(device["l2_bytes"]))
    results["summary"] = {
        "corpus_all_ok": all(r["ok"] for r in results["corpus"]),  # type: ignore[index, union-attr]
        "median_s_per_candidate": results["candidate_seconds"]["median_s"],  # type: ignore[index]
        "median_s_load_inline": results["load_inline_seconds"]["median_s"],
        "eager_all_within_5_percent": all(r["within_5_percent"] for r in results["eager_vs_do_bench"]),
    }
    (out_dir / "sandbox.json").write_text(json.dumps(results, indent=1, default=str))
    return results


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("bench/results/sandbox"))["summary"],
                     indent=1))
