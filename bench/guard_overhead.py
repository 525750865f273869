"""Per-call cost of the .cast runtime's guard on the CPU: prints a table and writes JSON.

Builds a cast with a relu and a softmax kernel (compiled with g++ for one (64, 256) float32
layout), then measures per call: eager, a guarded hit (kernel included), a guarded miss
(guard, then the original kernel), the matcher alone, and the guard cost the builder charges.
For a module card with a kernel, hits and misses are timed through the module guard's native
front and through the Python guard alone. For a GroupNorm module card it compares reading the
module's side of the key afresh on every call with the runtime's kept reading, alone and with
the match; for an op with several kernels, a call none of them takes, turned away by the
first-argument shape lookup or by every matcher.
A hit is also taken apart (output allocation, descriptor packing, counting); hits and misses are
timed with the guard's native front and with the Python override alone, and the call a compiled
graph makes is timed for both ops (``kforge_cast::native`` and ``kforge_cast::kernel``). An in-place
``relu_`` hit is timed with the native front and with the Python override alone.

    .venv/bin/python bench/guard_overhead.py [--out bench/results/guard_overhead.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path

import torch

from packager import load_cast
from packager.compiled import AtenGraphKernels
from packager.format import KernelEntry, ModelIdentity, build_cast
from packager.guard import CallMatcher
from packager.guard_cost import dispatch_entry_us, guard_cost_us, median_us
from packager.module_state import ModuleKeyReader
from packager.native.build import ENABLE_ENV
from packager.runtime import host_cpu_arch
from packager.variant import (
    ATTRIBUTES_KWARG,
    STATE_KWARG,
    VariantKey,
    dtype_name,
    encode_call,
    module_call_kwargs,
    module_state,
    module_variant_key,
    variant_key,
)

REPO = Path(__file__).resolve().parents[1]
SHAPE = (64, 256)
_HEAD = '#include "kf_abi.h"\n#include <math.h>\n'
_SIGNATURE = 'extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *s)'
RELU = _HEAD + _SIGNATURE + """ {
  int64_t n = in[0].shape[0] * in[0].shape[1];
  const float *x = (const float *)in[0].data; float *y = (float *)out[0].data;
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
  return 0;
}
"""
SOFTMAX = _HEAD + _SIGNATURE + """ {
  int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  const float *x = (const float *)in[0].data; float *y = (float *)out[0].data;
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols; float *yr = y + r * cols; float m = xr[0], s = 0.f;
    for (int64_t c = 1; c < cols; ++c) m = fmaxf(m, xr[c]);
    for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
    for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
  }
  return 0;
}
"""
RELU_IN_PLACE = _HEAD + _SIGNATURE + """ {
  int64_t n = out[0].shape[0] * out[0].shape[1];
  float *y = (float *)out[0].data;  /* the tensor relu_ writes, passed as the output, pre-filled */
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] > 0.f ? y[i] : 0.f;
  return 0;
}
"""
# relu(x) * weight over rows, for the ScaledRelu module card: inputs are x, then the module's weight.
SCALED_RELU = _HEAD + _SIGNATURE + """ {
  int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  const float *x = (const float *)in[0].data, *w = (const float *)in[1].data; float *y = (float *)out[0].data;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) { float v = x[r * cols + c]; y[r * cols + c] = (v > 0.f ? v : 0.f) * w[c]; }
  return 0;
}
"""


class ScaledRelu(torch.nn.Module):
    """A leaf module the offline search would serve with a module card."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.weight


def _spec(t: torch.Tensor) -> dict[str, object]:
    return {"shape": list(t.shape), "stride": list(t.stride()), "dtype": dtype_name(t.dtype),
            "storage_offset": t.storage_offset(), "aligned16": t.data_ptr() % 16 == 0}


def cpu_card(key: VariantKey, args: list[object], kwargs: dict[str, object], result: torch.Tensor,
          kind: str = "aten") -> dict[str, object]:
    _, tensors = encode_call(args, kwargs)
    return {"id": key.id, "kind": kind, "op": key.op, "device": "cpu", "key": key.to_json(),
            "inputs": [_spec(t) for t in tensors], "outputs": [_spec(result)]}


def cpu_entry(card: dict[str, object], source: str, work: Path, kind: str = "aten") -> KernelEntry:
    src, lib = work / f"{card['id']}.cpp", work / f"{card['id']}.so"
    src.write_text(source)
    flags = "-O3 -shared -fPIC"
    subprocess.run(["g++", *flags.split(), "-I", str(REPO / "gpu_sandbox_service/include"), str(src), "-o", str(lib)],
                   check=True)
    return KernelEntry(
        card_id=str(card["id"]), kind=kind, op=str(card["op"]), card_json=json.dumps(card), backend="cpu",
        arch=host_cpu_arch(), audit_class="custom", source=source, artifact=lib.read_bytes(),
        eager_latency_us=1e6, eager_spread_us=None, latency_us=1.0, latency_spread_us=None, speedup=1e6,
        rel_l2_error=None, max_scaled_error=None, source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        compiler_flags=flags, toolchain="g++", candidate_id="bench",
    )


def measure() -> dict[str, object]:
    x = torch.randn(*SHAPE)
    miss = torch.randn(SHAPE[0] // 2, SHAPE[1])
    calls = {
        "relu": ("aten::relu.default", [x], lambda t: torch.relu(t), RELU),
        "softmax": ("aten::_softmax.default", [x, -1, False], lambda t: torch.softmax(t, -1), SOFTMAX),
    }
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        work = Path(tmp)
        cards = {name: cpu_card(variant_key(op, args, {}), args, {}, fn(x))
                 for name, (op, args, fn, _) in calls.items()}
        entries = [cpu_entry(cards[name], source, work) for name, (*_, source) in calls.items()]
        build_cast(work / "bench.cast", ModelIdentity("bench", "bench", "bench"), entries, [])
        cast = load_cast(work / "bench.cast")
        for name, (_, args, fn, _) in calls.items():
            kernel = cast.kernels[str(cards[name]["id"])]
            row = {"eager_us": median_us(lambda fn=fn: fn(x)), "eager_miss_shape_us": median_us(lambda fn=fn: fn(miss))}
            row["match_us"] = median_us(lambda k=kernel, a=args: k.matcher.miss_reason(a, {}, []))
            row["kernel_direct_us"] = median_us(lambda k=kernel: k.try_launch([x]))
            # Where a hit's time goes, part by part (the kernel itself is in kernel_direct_us).
            descriptors = kernel.launcher.descriptors
            outputs = descriptors.allocate_outputs(x.device, [x])
            row["allocate_outputs_us"] = median_us(lambda d=descriptors: d.allocate_outputs(x.device, [x]))
            row["pack_descriptors_us"] = median_us(lambda d=descriptors, o=outputs: d.prepare([x], o))
            row["count_hit_us"] = median_us(lambda k=kernel: k.stats.hit())
            graph = AtenGraphKernels([kernel])
            graph.prepare_native()
            row["graph_op_python_us"] = median_us(
                lambda k=kernel, g=graph: torch.ops.kforge_cast.kernel([x], g.token, k.card_id))
            slot = graph.native_slots.get(kernel.card_id)
            if slot is not None:
                row["graph_op_native_us"] = median_us(lambda s=slot: torch.ops.kforge_cast.native([x], s))
            for path, enabled in (("python", "0"), ("native", "1")):  # the eager guard with and without its front
                os.environ[ENABLE_ENV] = enabled
                cast.apply()
                row[f"cast_hit_{path}_us"] = median_us(lambda fn=fn: fn(x))
                row[f"cast_miss_{path}_us"] = median_us(lambda fn=fn: fn(miss))
                cast.remove()
                row[f"hit_overhead_{path}_us"] = row[f"cast_hit_{path}_us"] - row["kernel_direct_us"]
                row[f"miss_overhead_{path}_us"] = row[f"cast_miss_{path}_us"] - row["eager_miss_shape_us"]
            row["guard_cost_charged_us"] = guard_cost_us(cards[name])
            rows[name] = {k: round(v, 3) for k, v in row.items()}
    return {"machine": platform.machine(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "shape": list(SHAPE), "dispatch_entry_us": round(dispatch_entry_us(), 3), "ops": rows,
            "misses_among_kernels": measure_misses_among_kernels(), "module": measure_module(),
            "module_card": measure_module_card(), "in_place": measure_in_place()}


def measure_in_place() -> dict[str, float]:
    """``x.relu_()`` served in place: a hit with the guard's native front and with the Python override
    alone (the kernel writes the live tensor and the call returns it)."""
    x = torch.randn(*SHAPE)
    card = {**cpu_card(variant_key("aten::relu_.default", [x], {}), [x], {}, x), "mutated_inputs": [0]}
    row: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        work = Path(tmp)
        build_cast(work / "in_place.cast", ModelIdentity("bench", "bench", "bench"),
                   [cpu_entry(card, RELU_IN_PLACE, work)], [])
        cast = load_cast(work / "in_place.cast")
        kernel = cast.kernels[str(card["id"])]
        row["eager_us"] = median_us(lambda: x.relu_())
        row["kernel_direct_us"] = median_us(lambda: kernel.try_launch([x]))
        for path, enabled in (("python", "0"), ("native", "1")):
            os.environ[ENABLE_ENV] = enabled
            cast.apply()
            hits = int(cast.stats()[kernel.card_id]["hits"])  # type: ignore[call-overload]
            row[f"cast_hit_{path}_us"] = median_us(lambda: x.relu_())
            row[f"served_{path}"] = float(int(cast.stats()[kernel.card_id]["hits"]) > hits)  # type: ignore[call-overload]
            cast.remove()
            row[f"hit_overhead_{path}_us"] = row[f"cast_hit_{path}_us"] - row["kernel_direct_us"]
    return {k: round(v, 3) for k, v in row.items()}


def measure_misses_among_kernels(n_kernels: int = 4) -> dict[str, float]:
    """A relu call of a shape none of the op's ``n_kernels`` kernels takes (ResNet-50 has dozens of
    batch norm shapes, few of them with kernels): the override's lookup by first-argument shape
    against running every kernel's matcher, in one run."""
    x = torch.randn(*SHAPE)
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        work = Path(tmp)
        entries = []
        for i in range(n_kernels):
            t = torch.randn(8 * (i + 1), SHAPE[1])
            entries.append(cpu_entry(cpu_card(variant_key("aten::relu.default", [t], {}), [t], {}, torch.relu(t)), RELU,
                                  work))
        build_cast(work / "many.cast", ModelIdentity("bench", "bench", "bench"), entries, [])
        cast = load_cast(work / "many.cast")
        row = {"kernels": float(n_kernels), "eager_us": median_us(lambda: torch.relu(x))}
        with cast.applied_to():
            (override,) = cast._aten  # the override itself: measured with its index and without
            kernels = override._kernels
            row["miss_by_lookup_us"] = median_us(lambda: torch.relu(x))
            index, kernels._by_first_shape = kernels._by_first_shape, None
            row["miss_by_matchers_us"] = median_us(lambda: torch.relu(x))
            kernels._by_first_shape = index
    return {k: round(v, 3) for k, v in row.items()}


def measure_module() -> dict[str, float]:
    """A GroupNorm module card's guard: reading the module afresh against the reader's kept reading."""
    module = torch.nn.GroupNorm(32, 128).eval()
    x = torch.randn(1, 128, 16, 16)
    key = module_variant_key(module, [x], {})
    card = cpu_card(key, [x], module_call_kwargs(module, {}), x, kind="module")
    plain, remembering, reader = CallMatcher(key), CallMatcher(key, remembered=(ATTRIBUTES_KWARG,)), ModuleKeyReader()
    with torch.inference_mode():
        row = {
            "eager_us": median_us(lambda: module(x)),
            "read_fresh_us": median_us(lambda: module_call_kwargs(module, {})),
            "read_kept_us": median_us(lambda: reader.call_kwargs(module, {})),
            "guard_fresh_us": median_us(lambda: plain.miss_reason([x], module_call_kwargs(module, {}), [])),
            "guard_kept_us": median_us(lambda: remembering.miss_reason([x], reader.call_kwargs(module, {}), [])),
            "guard_cost_charged_us": guard_cost_us(card),
        }
    return {k: round(v, 3) for k, v in row.items()}


def measure_module_card() -> dict[str, float]:
    """A module card's guarded call, kernel included: hits and misses through the module guard's
    native front and through the Python guard alone, in one run."""
    module = ScaledRelu(SHAPE[1]).eval()
    x, miss = torch.randn(*SHAPE), torch.randn(SHAPE[0] // 2, SHAPE[1])
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        work = Path(tmp)
        key = module_variant_key(module, [x], {})
        card = cpu_card(key, [x], {STATE_KWARG: module_state(module)}, module(x), kind="module")
        build_cast(work / "module.cast", ModelIdentity("bench", "bench", "bench"),
                   [cpu_entry(card, SCALED_RELU, work, kind="module")], [])
        cast = load_cast(work / "module.cast")
        kernel = cast.kernels[str(card["id"])]
        row = {"eager_us": median_us(lambda: module(x)), "eager_miss_shape_us": median_us(lambda: module(miss)),
               "kernel_direct_us": median_us(lambda: kernel.try_launch([x, module.weight]))}
        with cast.applied_to(module):
            (override,) = cast._modules.values()
            front = override.front
            for path in ("native", "python"):
                override.front = front if path == "native" else None
                row[f"cast_hit_{path}_us"] = median_us(lambda: module(x))
                row[f"cast_miss_{path}_us"] = median_us(lambda: module(miss))
                row[f"miss_overhead_{path}_us"] = row[f"cast_miss_{path}_us"] - row["eager_miss_shape_us"]
            override.front = front
            row["native_front_armed"] = float(front is not None and front.armed > 0)
        row["guard_cost_charged_us"] = guard_cost_us(card)
    return {k: round(v, 3) for k, v in row.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/guard_overhead.json")
    args = parser.parse_args()
    torch.set_num_threads(1)  # shared CI machines: intra-op threads make timings swing by 100x
    result = measure()
    columns = list(next(iter(result["ops"].values())))  # type: ignore[union-attr]
    print(f"{'op':<9}" + "".join(f"{c:>25}" for c in columns))
    for name, row in result["ops"].items():  # type: ignore[union-attr]
        print(f"{name:<9}" + "".join(f"{row[c]:>25.2f}" for c in columns))
    print(f"dispatcher -> Python kernel entry: {result['dispatch_entry_us']} us")
    print("GroupNorm module card: " + ", ".join(f"{k} {v:.2f}" for k, v in result["module"].items()))  # type: ignore[union-attr]
    print("relu_ in place: " + ", ".join(f"{k} {v:.2f}" for k, v in result["in_place"].items()))  # type: ignore[attr-defined]
    print("module card: " + ", ".join(f"{k} {v:.2f}" for k, v in result["module_card"].items()))  # type: ignore[attr-defined]
    print("miss among an op's kernels: " + ", ".join(
        f"{k} {v:.2f}" for k, v in result["misses_among_kernels"].items()))  # type: ignore[union-attr]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
