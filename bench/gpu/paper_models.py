"""The paper's four models on a GPU: eager and torch.compile latency, and where eager time goes.

For each model spec of ``examples/paper`` at the paper sizes (``KF_EXAMPLE_SIZE=gpu``), built
directly on CUDA:

- eager and ``torch.compile`` (default mode) latency of one forward under
  ``torch.inference_mode``: CUDA events around each call, warm-up first, the median of many;
- a capture on CUDA (``capture_service``): the top cards by share of captured eager time, and
  the share of eager time in cards the offline proposer covers
  (``agent_service.offline.catalog.plan_for_card`` answers whether a template family covers a
  card). Shares are over aten cards, which partition the forward's work; module cards overlap
  them and are counted apart.

Writes ``paper_models.json`` under ``out_dir`` and returns the same dict. A model that cannot be
built (a missing library) or a stage that fails is recorded with its error; the others still
run. ``KF_BENCH_PAPER_MODELS`` (comma-separated ``spec`` or ``spec:variant``) picks a subset and
its order. torch.compile is skipped once the run has used ``KF_BENCH_PAPER_COMPILE_DEADLINE_S``
seconds (default ``COMPILE_DEADLINE_S``), to stay within a time limit.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import import_module, metadata
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
# First on the path, so the project's packages win over this folder's same-named bench modules.
if not sys.path or sys.path[0] != str(REPO_ROOT):
    sys.path.insert(0, str(REPO_ROOT))
sys.path.append(str(Path(__file__).resolve().parent))
from _coverage import card_table, offline_refusal  # noqa: E402

#: (spec, variant) pairs in the paper's order; "" is a spec without variants.
CONFIGURATIONS: tuple[tuple[str, str], ...] = (
    ("resnet50", "b1_fp32"),
    ("resnet50", "b32_bf16"),
    ("sd35_mmdit", ""),
    ("sd35_vae_decoder", ""),
    ("gemma4_e2b", "prefill"),
    ("gemma4_e2b", "decode"),
    ("qwen35_moe", "prefill"),
    ("qwen35_moe", "decode"),
)
SUBSET_ENV = "KF_BENCH_PAPER_MODELS"
WARMUP = 3
REPS = 20
COMPILE_DEADLINE_S = 90.0
RESULT_FILE = "paper_models.json"


@contextmanager
def _paper_size(variant: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("KF_EXAMPLE_SIZE", "KF_EXAMPLE_DEVICE", "KF_EXAMPLE_VARIANT")}
    os.environ.update({"KF_EXAMPLE_SIZE": "gpu", "KF_EXAMPLE_DEVICE": "cuda"})
    if variant:
        os.environ["KF_EXAMPLE_VARIANT"] = variant
    else:
        os.environ.pop("KF_EXAMPLE_VARIANT", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _error(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}{where}"


def median_latency_ms(call: Callable[[], object], warmup: int = WARMUP, reps: int = REPS) -> dict[str, float]:
    """Median and minimum milliseconds of ``call()``, timed with CUDA events after warm-up."""
    with torch.inference_mode():
        for _ in range(warmup):
            call()
        torch.cuda.synchronize()
        times: list[float] = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    return {"median_ms": statistics.median(times), "min_ms": min(times), "reps": float(reps)}


#: Reference samples kept per capture: the runs' ``--sample-budget-mb 8192``. With 2 GiB the SD3.5
#: VAE decoder's largest cards got no sample, which marks them not optimisable and so uncovered.
SAMPLE_BUDGET_BYTES = 8 << 30


def _capture(spec_path: Path, model: torch.nn.Module, inputs: tuple[Any, ...]) -> Any:
    options = import_module("capture_service.options")
    session = import_module("capture_service.session")
    spec = import_module("capture_service.spec")
    timing = import_module("capture_service.timing")
    loaded = spec.LoadedModel(model, tuple(inputs), {})
    with tempfile.TemporaryDirectory() as out_dir:
        return session.capture_loaded(
            str(spec_path),
            loaded,
            options.CaptureOptions(device="cuda", samples=1, budget_bytes=SAMPLE_BUDGET_BYTES, allow_unsampled=True),
            Path(out_dir),
            timing=timing.TimingPolicy(warmup=1, min_reps=5, max_reps=10, budget_s=0.005),
        )


def bench_configuration(name: str, variant: str, compile_allowed: bool, covers: Any) -> dict[str, Any]:
    """Everything measured for one (spec, variant)."""
    result: dict[str, Any] = {"model": name, "variant": variant or None}
    with _paper_size(variant):
        try:
            spec = import_module(f"examples.paper.{name}")
            started = time.perf_counter()
            model = spec.get_model()
            inputs = tuple(spec.get_inputs())
            torch.cuda.synchronize()
            result["build_s"] = time.perf_counter() - started
        except Exception as exc:
            result["error"] = f"build failed: {_error(exc)}"
            return result
    _measure(name, model, inputs, result, compile_allowed, covers)
    del model, inputs
    gc.collect()
    torch.cuda.empty_cache()
    return result


def _measure(
    name: str,
    model: torch.nn.Module,
    inputs: tuple[Any, ...],
    result: dict[str, Any],
    compile_allowed: bool,
    covers: Any,
) -> None:
    result["parameters"] = sum(p.numel() for p in model.parameters())
    result["input_shapes"] = [list(t.shape) for t in inputs if isinstance(t, torch.Tensor)]
    result["input_dtypes"] = sorted({str(t.dtype) for t in inputs if isinstance(t, torch.Tensor)})
    lm = getattr(model, "lm", None)
    if lm is not None:
        result["attn_implementation"] = getattr(lm.config, "_attn_implementation", None)
        result["experts_implementation"] = getattr(lm.config, "_experts_implementation", None)
    try:
        result["eager"] = median_latency_ms(lambda: model(*inputs))
    except Exception as exc:
        result["eager_error"] = _error(exc)
    if compile_allowed:
        try:
            compiled = torch.compile(model)
            started = time.perf_counter()
            with torch.inference_mode():
                compiled(*inputs)
            torch.cuda.synchronize()
            result["compile_s"] = time.perf_counter() - started
            result["compiled"] = median_latency_ms(lambda: compiled(*inputs))
        except Exception as exc:
            result["compile_error"] = _error(exc)
        finally:
            torch._dynamo.reset()
    else:
        result["compile_skipped"] = "the run passed its compile deadline before this model"
    if "eager" in result and "compiled" in result:
        result["compile_speedup"] = result["eager"]["median_ms"] / result["compiled"]["median_ms"]
    try:
        cards = _capture(REPO_ROOT / "examples" / "paper" / f"{name}.py", model, inputs)
        result["cards"] = card_table(cards, covers)
    except Exception as exc:
        result["capture_error"] = _error(exc)


def _selected() -> list[tuple[str, str]]:
    wanted = [w.strip() for w in os.environ.get(SUBSET_ENV, "").split(",") if w.strip()]
    if not wanted:
        return list(CONFIGURATIONS)
    chosen = [(n, v) for w in wanted for n, v in CONFIGURATIONS if w in (n, f"{n}:{v}")]
    if not chosen:
        raise ValueError(f"{SUBSET_ENV}={os.environ[SUBSET_ENV]!r} names none of the paper configurations")
    return chosen


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("transformers", "diffusers", "torchvision", "triton"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def run(out_dir: Path) -> dict[str, Any]:
    """Measure every selected paper configuration on the current CUDA device; write JSON."""
    if not torch.cuda.is_available():
        raise RuntimeError("paper_models needs a CUDA device")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    covers = offline_refusal()
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "versions": _versions(),
        "timing": {"warmup": WARMUP, "reps": REPS, "statistic": "median of CUDA-event times"},
        "grad_mode": "inference",
        "results": [],
    }
    path = out_dir / RESULT_FILE
    deadline = float(os.environ.get("KF_BENCH_PAPER_COMPILE_DEADLINE_S", COMPILE_DEADLINE_S))
    for name, variant in _selected():
        compile_allowed = time.perf_counter() - started < deadline
        report["results"].append(bench_configuration(name, variant, compile_allowed, covers))
        report["wall_s"] = time.perf_counter() - started
        path.write_text(json.dumps(report, indent=1, default=str))
    return report


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results")), indent=1, default=str))
