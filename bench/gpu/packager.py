"""The .cast runtime on a real GPU: guard overhead per call, hits, fallbacks, eager vs cast latency,
and the three deployment modes: eager, ``cast.compile`` against torch.compile, and the same with
CUDA graphs (``mode="reduce-overhead"``), each with its parity.

``run(out_dir)`` compiles a relu and a softmax kernel for the current GPU with nvcc, times them
and eager on the device (CUDA events), and records what the builder decides with the guard's
cost charged ("packaged" / "fallbacks"). It then exercises the runtime whatever that verdict,
with a cast of the same kernels whose latencies are stand-ins: guard overhead per call, hits,
fallbacks, and the model end to end, eager and with the cast, in one process. Needs only torch,
nvcc and this repository's ``packager``. A module card (``relu(x) * weight`` in a leaf module) is
timed the same way: eager, a hit through the module guard's native front, the same hit through the
Python guard alone, and misses, with the module's outputs checked against eager.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
# Run as a script, this file's folder comes first on sys.path and its name would hide the package.
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO))

from kforge_torch.timing import Timer  # noqa: E402
from packager import Cast, load_cast  # noqa: E402
from packager.format import KernelEntry, ModelIdentity, build_cast  # noqa: E402
from packager.guard_cost import median_us  # noqa: E402
from packager.manifest import KEPT, ModeVerdict  # noqa: E402
from packager.native.build import ENABLE_ENV  # noqa: E402
from packager.variant import (  # noqa: E402
    STATE_KWARG,
    dtype_name,
    encode_call,
    module_state,
    module_variant_key,
    variant_key,
)

ROWS, COLS = 256, 1024
ROUNDS = 4

RELU_CU = r"""
#include "kf_abi.h"
#include <cuda_runtime.h>
__global__ void relu_kernel(const float *x, float *y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *stream) {
  if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 2;
  int64_t n = 1;
  for (int d = 0; d < in[0].ndim; ++d) n *= in[0].shape[d];
  relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>((const float *)in[0].data,
                                                                            (float *)out[0].data, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
"""

SOFTMAX_CU = r"""
#include "kf_abi.h"
#include <cuda_runtime.h>
#include <math.h>
__global__ void softmax_rows(const float *x, float *y, int64_t cols) {
  __shared__ float red[256];
  const float *xr = x + blockIdx.x * cols; float *yr = y + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
  red[threadIdx.x] = m; __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0]; __syncthreads();
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += __expf(xr[c] - m);
  red[threadIdx.x] = sum; __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  float inv = 1.f / red[0];
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = __expf(xr[c] - m) * inv;
}
extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *stream) {
  if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32 || in[0].ndim != 2) return 2;
  softmax_rows<<<(unsigned)in[0].shape[0], 256, 0, (cudaStream_t)stream>>>((const float *)in[0].data,
                                                                          (float *)out[0].data, in[0].shape[1]);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
"""


SCALED_RELU_CU = r"""
#include "kf_abi.h"
#include <cuda_runtime.h>
__global__ void scaled_relu(const float *x, const float *w, float *y, int64_t n, int64_t cols) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = (x[i] > 0.f ? x[i] : 0.f) * w[i % cols];
}
extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *stream) {
  if (n_in != 2 || n_out != 1 || in[0].dtype != KF_F32 || in[0].ndim != 2) return 2;
  int64_t n = in[0].shape[0] * in[0].shape[1];
  scaled_relu<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
      (const float *)in[0].data, (const float *)in[1].data, (float *)out[0].data, n, in[0].shape[1]);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
"""


class ScaledRelu(torch.nn.Module):
    """A leaf module served by a module card."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(COLS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.weight


class Net(torch.nn.Module):
    """Linear layers (eager) around relu and softmax calls the cast covers."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(COLS, COLS) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.softmax(torch.relu(layer(x)), dim=-1)
        return x


def _spec(t: torch.Tensor) -> dict[str, object]:
    return {"shape": list(t.shape), "stride": list(t.stride()), "dtype": dtype_name(t.dtype),
            "storage_offset": t.storage_offset(), "aligned16": t.data_ptr() % 16 == 0}


def _card(op: str, args: list[object], result: torch.Tensor) -> dict[str, object]:
    key = variant_key(op, args, {})
    _, tensors = encode_call(args, {})
    return {"id": key.id, "kind": "aten", "op": op, "device": "cuda", "key": key.to_json(),
            "inputs": [_spec(t) for t in tensors], "outputs": [_spec(result)]}


def _device_us(fn: Callable[[], object], repeats: int = 200) -> float:
    """Median device time of one call, timed as the sandbox times it (launch latency outside the window)."""
    timer = Timer("cuda", torch.cuda.get_device_properties(0).L2_cache_size, torch.cuda.current_stream())
    for _ in range(20):
        fn()
    return statistics.median(timer.time_us(fn) for _ in range(repeats))


def _wall_samples(fn: Callable[..., object], repeats: int, *args: object) -> list[float]:
    """Per-call wall times (µs) with the device synchronised after each call (launch overhead included)."""
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def _stand_in(entry: KernelEntry) -> KernelEntry:
    """The entry with a stand-in kernel latency that always passes the builder (runtime exercise only)."""
    return dataclasses.replace(entry, eager_latency_us=1e6, latency_us=1.0, speedup=1e6)


def _call(op: str, x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) if "relu" in op else torch.softmax(x, -1)


def _compile(source: str, name: str, arch: str, work: pathlib.Path) -> tuple[bytes, str]:
    src = work / f"{name}.cu"
    src.write_text(source)
    flags = f"-O3 -shared -Xcompiler -fPIC -arch={arch}"
    lib = work / f"{name}.so"
    subprocess.run([shutil.which("nvcc") or "nvcc", *flags.split(), "-I", str(REPO / "gpu_sandbox_service/include"),
                    str(src), "-o", str(lib)], check=True)
    return lib.read_bytes(), flags


def _match_us(cast: Cast, x: torch.Tensor) -> float | None:
    """The guard's matching alone, on a hit of the softmax card."""
    kernel = next((k for k in cast.kernels.values() if "softmax" in k.record.op), None)
    if kernel is None:
        return None
    return round(median_us(lambda: kernel.matcher.miss_reason([x, -1, False], {}, [])), 3)


def _hit_breakdown(cast: Cast, x: torch.Tensor) -> dict[str, dict[str, float]]:
    """Where a guarded hit's host time goes, part by part, per kernel (the kernel launch included last)."""
    from packager.guard_cost import dispatch_entry_us

    parts: dict[str, dict[str, float]] = {}
    entry_us = dispatch_entry_us()
    for kernel in cast.kernels.values():
        args = [x] if "relu" in kernel.record.op else [x, -1, False]
        descriptors = kernel.launcher.descriptors
        outputs = descriptors.allocate_outputs(x.device, [x])
        parts[kernel.record.op] = {k: round(v, 3) for k, v in {
            "dispatcher_entry_us": entry_us,
            "match_us": median_us(lambda k=kernel, a=args: k.matcher.miss_reason(a, {}, [])),
            "allocate_outputs_us": median_us(lambda d=descriptors: d.allocate_outputs(x.device, [x])),
            "pack_descriptors_us": median_us(lambda d=descriptors, o=outputs: d.prepare([x], o)),
            "current_stream_us": median_us(lambda: torch._C._cuda_getCurrentRawStream(x.device.index or 0)),
            "count_hit_us": median_us(lambda k=kernel: k.stats.hit()),
            "try_launch_us": median_us(lambda k=kernel: k.try_launch([x])),
        }.items()}
    torch.cuda.synchronize()
    return parts


def _use_native(cast: Cast, native: bool) -> None:
    """Make the cast's next compile record the native op (the default) or the Python op alone."""
    os.environ[ENABLE_ENV] = "1" if native else "0"
    cast._graph_kernels = None  # a fresh owner, with or without native slots


def _graph_op_calls(cast: Cast, net: torch.nn.Module, x: torch.Tensor) -> dict[str, dict[str, float]]:
    """Host time of one graph-op call per kernel, as a compiled graph makes it: the native op,
    the Python op, and the eager op it replaces, interleaved in rounds."""
    _use_native(cast, True)
    cast.backend(net)
    owner = cast._graph_kernels
    assert owner is not None
    walls: dict[str, list[float]] = {}
    with torch.inference_mode():
        for _ in range(ROUNDS):
            for kernel in cast.kernels.values():
                op, slot = kernel.record.op, owner.native_slots.get(kernel.card_id)
                walls.setdefault(f"eager {op}", []).extend(_wall_samples(lambda o=op: _call(o, x), 50))
                walls.setdefault(f"python {op}", []).extend(_wall_samples(
                    lambda k=kernel: torch.ops.kforge_cast.kernel([x], owner.token, k.card_id), 50))
                if slot is not None:
                    walls.setdefault(f"native {op}", []).extend(_wall_samples(
                        lambda s=slot: torch.ops.kforge_cast.native([x], s), 50))
    cast.remove()
    return {kernel.record.op: {kind: round(statistics.median(walls[f"{kind} {kernel.record.op}"]), 2)
                               for kind in ("eager", "python", "native") if f"{kind} {kernel.record.op}" in walls}
            for kernel in cast.kernels.values()}


def _compiled_pairs(cast: Cast, net: torch.nn.Module, x: torch.Tensor, want: torch.Tensor,
                    native: bool) -> dict[str, dict]:
    """torch.compile alone against cast.compile, per mode, timed alternately in one process."""
    pairs: dict[str, dict] = {}
    for mode in ("default", "reduce-overhead"):
        _use_native(cast, native)
        torch._dynamo.reset()
        kwargs = {} if mode == "default" else {"mode": mode}
        plain = torch.compile(net, **kwargs)
        with torch.inference_mode():
            plain_out = plain(x).clone()
            cast.reset_stats()
            with_cast = cast.compile(net, **kwargs)
            cast_out = with_cast(x).clone()
            compile_stats = cast.stats()
            # Net's cards are aten cards: no module forward is replaced, so both compiled models
            # can alternate without either recompiling.
            samples: dict[str, list[float]] = {"torch.compile": [], "cast.compile": []}
            for _ in range(ROUNDS):
                samples["torch.compile"] += _wall_samples(plain, 25, x)
                samples["cast.compile"] += _wall_samples(with_cast, 25, x)
            cast.remove()
        plain_us, cast_us = (statistics.median(samples[n]) for n in ("torch.compile", "cast.compile"))
        pairs[mode] = {
            "torch_compile_us": round(plain_us, 1), "cast_compile_us": round(cast_us, 1),
            "cast_compile_speedup": round(plain_us / cast_us, 3),
            "torch_compile_max_abs_error": float((plain_out - want).abs().max()),
            "cast_compile_max_abs_error": float((cast_out - want).abs().max()),
            "stats_first_call": compile_stats,
        }
    return pairs


def run(out_dir: pathlib.Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        raise RuntimeError("bench/gpu/packager.py needs a CUDA device")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    work = out_dir / "work"
    work.mkdir(exist_ok=True)
    x = torch.randn(ROWS, COLS, device="cuda")
    toolchain = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    entries = []
    cases: list[tuple[str, str, str, list[object], Callable[[], torch.Tensor]]] = [
        ("relu", RELU_CU, "aten::relu.default", [x], lambda: torch.relu(x)),
        ("softmax", SOFTMAX_CU, "aten::_softmax.default", [x, -1, False], lambda: torch.softmax(x, -1)),
    ]
    for name, source, op, args, eager in cases:
        artifact, flags = _compile(source, name, arch, work)
        card = _card(op, args, eager())
        entries.append(KernelEntry(
            card_id=str(card["id"]), kind="aten", op=op, card_json=json.dumps(card), backend="cuda", arch=arch,
            audit_class="custom", source=source, artifact=artifact,
            eager_latency_us=_device_us(eager), eager_spread_us=None, latency_us=0.0, latency_spread_us=None,
            speedup=0.0, rel_l2_error=None, max_scaled_error=None,
            source_sha256=hashlib.sha256(source.encode()).hexdigest(), compiler_flags=flags,
            toolchain=toolchain, candidate_id=f"bench-{name}",
        ))
    # Kernel device time through the runtime's own launcher, read from a probe cast.
    probe_path = work / "probe.cast"
    timed, launchers = [], {}
    for e in entries:
        build_cast(probe_path, ModelIdentity("bench", "probe", "probe"), [_stand_in(e)], [])
        kernel = next(iter(load_cast(probe_path).kernels.values()))
        launchers[e.card_id] = kernel
        kernel_us = _device_us(lambda k=kernel: k.try_launch([x]))
        timed.append(dataclasses.replace(e, latency_us=kernel_us, speedup=e.eager_latency_us / kernel_us))
    # The builder's verdict on the measured numbers (guard cost included).
    manifest = build_cast(out_dir / "bench.cast", ModelIdentity("bench/gpu/packager.py:Net", "Net", "bench"), timed, [])
    # The runtime exercised whatever that verdict: a cast of the same kernels with stand-in latencies.
    build_cast(work / "exercise.cast", ModelIdentity("bench", "exercise", "exercise"),
               [_stand_in(e) for e in timed], [],
               verdicts={(e.card_id, "compiled"): ModeVerdict(KEPT, "bench") for e in timed})
    cast = load_cast(work / "exercise.cast")
    net = Net().cuda().eval()
    other = torch.randn(ROWS // 2, COLS, device="cuda")
    with torch.inference_mode():
        want = net(x)
        with cast.applied_to(net):
            got = net(x)
        # Eager, the kernel called directly and the guarded hit alternate in rounds, so all three
        # see the same host conditions (a slow host's clock and caches drift over a run).
        walls: dict[str, list[float]] = {}
        for _ in range(ROUNDS):
            for e in entries:
                walls.setdefault(f"eager {e.op}", []).extend(_wall_samples(lambda e=e: _call(e.op, x), 50))
                walls.setdefault(f"direct {e.op}", []).extend(
                    _wall_samples(lambda e=e: launchers[e.card_id].try_launch([x]), 50))
            walls.setdefault("model eager", []).extend(_wall_samples(lambda: net(x), 25))
            walls.setdefault("model miss eager", []).extend(_wall_samples(lambda: net(other), 25))
            with cast.applied_to(net):
                for e in entries:
                    walls.setdefault(f"hit {e.op}", []).extend(_wall_samples(lambda e=e: _call(e.op, x), 50))
                walls.setdefault("model cast", []).extend(_wall_samples(lambda: net(x), 25))
                walls.setdefault("model miss cast", []).extend(_wall_samples(lambda: net(other), 25))
            for e in entries:
                walls.setdefault(f"miss eager {e.op}", []).extend(_wall_samples(lambda e=e: _call(e.op, other), 50))
            with cast.applied_to(net):
                for e in entries:
                    walls.setdefault(f"miss cast {e.op}", []).extend(
                        _wall_samples(lambda e=e: _call(e.op, other), 50))
            os.environ[ENABLE_ENV] = "0"  # the Python override alone, for comparison
            with cast.applied_to(net):
                for e in entries:
                    walls.setdefault(f"python hit {e.op}", []).extend(_wall_samples(lambda e=e: _call(e.op, x), 50))
                    walls.setdefault(f"python miss {e.op}", []).extend(
                        _wall_samples(lambda e=e: _call(e.op, other), 50))
            os.environ[ENABLE_ENV] = "1"
        with cast.applied_to(net):
            cast.reset_stats()
            net(x)
            net(other)
            stats = cast.stats()
        breakdown = _hit_breakdown(cast, x)
    graph_op_calls = _graph_op_calls(cast, net, x)
    compiled = _compiled_pairs(cast, net, x, want, native=True)
    compiled_python_op = _compiled_pairs(cast, net, x, want, native=False)
    _use_native(cast, True)
    wall = {name: statistics.median(samples) for name, samples in walls.items()}
    op_eager = {e.op: wall[f"eager {e.op}"] for e in entries}
    kernel_wall = {e.op: wall[f"direct {e.op}"] for e in entries}
    op_cast = {e.op: wall[f"hit {e.op}"] for e in entries}
    eager_us, cast_us = wall["model eager"], wall["model cast"]
    miss_eager_us, miss_cast_us = wall["model miss eager"], wall["model miss cast"]
    result = {
        "device": torch.cuda.get_device_name(), "arch": arch, "torch": torch.__version__,
        "measured": [{"op": e.op, "eager_device_us": round(e.eager_latency_us, 2),
                      "kernel_device_us": round(e.latency_us, 2)} for e in timed],
        "packaged": [{"card_id": k.card_id, "op": k.op, "guard_cost_us": k.guard_cost_us,
                      "effective_speedup": k.effective_speedup} for k in manifest.kernels],
        "fallbacks": [f.reason for f in manifest.fallbacks],
        "exercise_skipped": [s.reason for s in cast.skipped],
        "guard_match_us": _match_us(cast, x),
        "per_op_wall_us": {op: {"eager": round(op_eager[op], 2), "kernel_direct": round(kernel_wall[op], 2),
                                "cast_hit": round(op_cast[op], 2),
                                "guard_overhead": round(op_cast[op] - kernel_wall[op], 2),
                                "miss_overhead": round(wall[f"miss cast {op}"] - wall[f"miss eager {op}"], 2),
                                "hit_over_eager": round(op_cast[op] - op_eager[op], 2),
                                "python_hit": round(wall[f"python hit {op}"], 2),
                                "python_hit_over_eager": round(wall[f"python hit {op}"] - op_eager[op], 2),
                                "python_guard_overhead": round(wall[f"python hit {op}"] - kernel_wall[op], 2),
                                "python_miss_overhead": round(wall[f"python miss {op}"] - wall[f"miss eager {op}"],
                                                              2)}
                           for op in op_eager},
        "hit_breakdown_us": breakdown,
        "graph_op_call_wall_us": graph_op_calls,
        "compiled": compiled,
        "compiled_python_op": compiled_python_op,
        "model_eager_us": round(eager_us, 1), "model_cast_us": round(cast_us, 1),
        "model_speedup": round(eager_us / cast_us, 3),
        "model_miss_eager_us": round(miss_eager_us, 1), "model_miss_cast_us": round(miss_cast_us, 1),
        "max_abs_error": float((got - want).abs().max()),
        "stats": stats,
        "module_card": _module_card_or_error(arch, work, toolchain),
    }
    (out_dir / "packager.json").write_text(json.dumps(result, indent=1))
    return result


def _module_card(arch: str, work: pathlib.Path, toolchain: str) -> dict[str, object]:
    """A module card's eager calls on the GPU: per-call wall (µs, synchronised) of eager, the native
    front's hit, the Python guard's hit, and misses, alternating in rounds."""
    module = ScaledRelu().cuda().eval()
    x, other = torch.randn(ROWS, COLS, device="cuda"), torch.randn(ROWS // 2, COLS, device="cuda")
    artifact, flags = _compile(SCALED_RELU_CU, "scaled_relu", arch, work)
    with torch.inference_mode():
        key = module_variant_key(module, [x], {})
        _, tensors = encode_call([x], {STATE_KWARG: module_state(module)})
        card = {"id": key.id, "kind": "module", "op": key.op, "device": "cuda", "key": key.to_json(),
                "inputs": [_spec(t) for t in tensors], "outputs": [_spec(module(x))]}
        entry = _stand_in(KernelEntry(
            card_id=key.id, kind="module", op=key.op, card_json=json.dumps(card), backend="cuda", arch=arch,
            audit_class="custom", source=SCALED_RELU_CU, artifact=artifact, eager_latency_us=0.0,
            eager_spread_us=None, latency_us=0.0, latency_spread_us=None, speedup=0.0, rel_l2_error=None,
            max_scaled_error=None, source_sha256=hashlib.sha256(SCALED_RELU_CU.encode()).hexdigest(),
            compiler_flags=flags, toolchain=toolchain, candidate_id="bench-module"))
        build_cast(work / "module.cast", ModelIdentity("bench", "module", "module"), [entry], [])
        cast = load_cast(work / "module.cast")
        want, want_other = module(x), module(other)
        walls: dict[str, list[float]] = {}
        with cast.applied_to(module):
            (override,) = cast._modules.values()
            front = override.front
            got, got_other = module(x), module(other)
            for _ in range(ROUNDS):
                override.front = None
                walls.setdefault("python hit", []).extend(_wall_samples(lambda: module(x), 50))
                walls.setdefault("python miss", []).extend(_wall_samples(lambda: module(other), 50))
                override.front = front
                walls.setdefault("native hit", []).extend(_wall_samples(lambda: module(x), 50))
                walls.setdefault("native miss", []).extend(_wall_samples(lambda: module(other), 50))
                cast.remove()
                walls.setdefault("eager", []).extend(_wall_samples(lambda: module(x), 50))
                walls.setdefault("eager miss", []).extend(_wall_samples(lambda: module(other), 50))
                cast.apply(module)
                (override,) = cast._modules.values()
                front = override.front
                module(x)  # the first hit arms the new front
            armed = front.armed if front is not None else 0
        stats = cast.stats()
    wall = {name: round(statistics.median(samples), 2) for name, samples in walls.items()}
    return {"wall_us": wall, "native_hit_over_eager": round(wall["native hit"] - wall["eager"], 2),
            "python_hit_over_eager": round(wall["python hit"] - wall["eager"], 2),
            "native_miss_overhead": round(wall["native miss"] - wall["eager miss"], 2),
            "python_miss_overhead": round(wall["python miss"] - wall["eager miss"], 2),
            "front_armed": armed, "max_abs_error": float(max((got - want).abs().max(),
                                                              (got_other - want_other).abs().max())),
            "stats": stats}


def _module_card_or_error(arch: str, work: pathlib.Path, toolchain: str) -> dict[str, object]:
    try:
        return _module_card(arch, work, toolchain)
    except Exception as exc:  # the other figures of the run are kept
        return {"error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    print(json.dumps(run(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/gpu_packager")), indent=1))
