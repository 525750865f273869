"""Where a packaged kernel's time goes inside a compiled graph: torch.compile against cast.compile.

For one model and a finished run of it, the run's .cast is rebuilt with every packaged kernel
kept for compiled use (as ``deploy_modes.compiled_cast`` does, before any compiled pruning); then,
in this process, the model compiled alone and with the .cast are timed per call (host clock around
a synchronised call, as the end-to-end check times them, and device time from events) and
profiled over a few calls, so the table shows which ops each compiled graph ran, their device time
and the host time on the way to them. Writes ``compiled_overhead.json`` and the profiler tables.

    python bench/gpu/compiled_overhead.py MODEL_SPEC RUN_DIR OUT_DIR
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
sys.path.append(str(Path(__file__).resolve().parent))
from deploy_modes import compiled_cast  # noqa: E402

CALLS = 200
PROFILED_CALLS = 20


def timed(fn: Any, inputs: tuple[Any, ...]) -> dict[str, float]:
    """Median host ms of a synchronised call, and (cuda) median device ms between events around it."""
    cuda = torch.cuda.is_available()
    for _ in range(20):
        fn(*inputs)
    host, device = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(CALLS):
        if cuda:
            torch.cuda.synchronize()
            start.record()
        t0 = time.perf_counter()
        fn(*inputs)
        if cuda:
            end.record()
            torch.cuda.synchronize()
            device.append(start.elapsed_time(end))
        host.append((time.perf_counter() - t0) * 1e3)
    return {"host_ms": statistics.median(host), "device_ms": statistics.median(device) if device else float("nan")}


def profiled(fn: Any, inputs: tuple[Any, ...]) -> str:
    """The profiler's tables of ``PROFILED_CALLS`` calls: by device time (on a GPU), and by host
    time, where dynamo's cache lookup and each op's launch cost show."""
    cuda = torch.cuda.is_available()
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(PROFILED_CALLS):
            fn(*inputs)
        if cuda:
            torch.cuda.synchronize()
    events = prof.key_averages()
    orders = ("self_cuda_time_total", "self_cpu_time_total") if cuda else ("self_cpu_time_total",)
    return "\n".join(f"by {order}:\n" + str(events.table(sort_by=order, row_limit=25, max_name_column_width=60))
                     for order in orders)


def main() -> None:
    spec, run_dir, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    from capture_service.spec import load_model_spec
    from packager import load_cast

    cast_path = out / "compiled.cast"
    kernels = compiled_cast(run_dir, cast_path)
    loaded = load_model_spec(spec)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = loaded.model.to(device)
    inputs = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in loaded.args)
    result: dict[str, Any] = {"model": spec, "kernels": kernels}
    with torch.inference_mode():
        result["eager"] = timed(model, inputs)
        torch._dynamo.reset()
        alone = torch.compile(model)
        result["torch_compile"] = timed(alone, inputs)
        (out / "torch_compile.txt").write_text(profiled(alone, inputs))
        torch._dynamo.reset()
        cast = load_cast(cast_path)
        with_cast = cast.compile(model)
        result["cast_compile"] = timed(with_cast, inputs)
        (out / "cast_compile.txt").write_text(profiled(with_cast, inputs))
        result["kernel_stats"] = cast.stats()
    (out / "compiled_overhead.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
