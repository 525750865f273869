"""Offline proposer on the GPU: every cuda template family compiled for sm_90, verified, timed.

For representative cards of each family (LLM-, CNN- and diffusion-sized shapes), the offline
proposer's root kernel and a short hill-climb over its knobs are compiled with nvcc, run through
``packager.abi.KernelLibrary`` on CUDA tensors on the current stream, checked against eager
(fresh random inputs, NaN-poisoned outputs, run twice for determinism) and timed against eager
with CUDA events, L2 flushed before every timed call, interleaved, median of many.

    python bench/gpu_suite.py --out "$OUT" --only agent      # or: python bench/gpu/agent.py OUT_DIR

Needs torch with CUDA, nvcc, and pydantic (carry its wheels where the image lacks it).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # ahead of this folder, whose packager.py is not the packager package

import torch  # noqa: E402
from torch import nn  # noqa: E402

from agent_service.offline.proposer import propose_offline  # noqa: E402
from gpu_sandbox_service.device_probe import cuda_facts  # noqa: E402
from kforge_domain.card import OperatorCard, TensorSpec  # noqa: E402
from kforge_domain.device import DeviceInfo  # noqa: E402
from kforge_domain.floor import memory_floor_us  # noqa: E402
from kforge_domain.propose_request import ParentCandidate, ProposeRequest  # noqa: E402
from packager.abi import KernelLibrary  # noqa: E402
from packager.variant import decode_call, encode_call, module_variant_key, tensor_signature, variant_key  # noqa: E402

INCLUDE = ROOT / "gpu_sandbox_service" / "include"
TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.2e-2}
ROUNDS, CHILDREN = 2, 4  # hill-climb: root, then CHILDREN revisions of the best, ROUNDS times
TIMED_CALLS = 25


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        dtype = h.dtype
        h = h.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


class Qwen3_5MoeRMSNormGated(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, h: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = h.dtype
        h = h.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        h = self.weight * h.to(dtype)
        return (h * nn.functional.silu(gate.float())).to(dtype)


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return nn.functional.silu(x[..., :d]) * x[..., d:]


class GroupNormSiLU(nn.Module):
    def __init__(self, groups: int, channels: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.silu(self.norm(x))


def _spec(t: torch.Tensor) -> TensorSpec:
    sig = tensor_signature(t)
    return TensorSpec(shape=list(sig.shape), stride=list(sig.stride), dtype=sig.dtype,
                      storage_offset=sig.storage_offset, aligned16=sig.aligned16)


def _outputs(result: Any) -> list[torch.Tensor]:
    return [r for r in (result if isinstance(result, (tuple, list)) else [result]) if isinstance(r, torch.Tensor)]


def aten_case(
    op: Any, args: list[Any], kwargs: dict[str, Any] | None = None
) -> tuple[OperatorCard, Callable[..., Any]]:
    kwargs = kwargs or {}
    name = f"aten::{op._schema.name.removeprefix('aten::')}.{op._overloadname}"
    key = variant_key(name, args, kwargs)
    tensors = encode_call(args, kwargs)[1]  # in argument order, those in lists (cat's) included
    outs = _outputs(op(*args, **kwargs))
    data = key.to_json()
    card = OperatorCard(id=key.id, kind="aten", op=name, device="cuda", key=data, inputs=[_spec(t) for t in tensors],
                        outputs=[_spec(o) for o in outs])

    def call(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        a, k = decode_call(card.template, inputs)
        return _outputs(op(*a, **k))

    return card, call


def module_case(module: nn.Module, args: list[torch.Tensor], attributes: dict[str, Any]) -> tuple[OperatorCard, Any]:
    key = module_variant_key(module, args, {})
    data = key.to_json()
    state = [t.detach() for _, t in module.named_parameters()]
    outs = _outputs(module(*args))
    card = OperatorCard(id=key.id, kind="module", op=key.op, device="cuda", key=data,
                        inputs=[_spec(t) for t in [*args, *state]], outputs=[_spec(o) for o in outs],
                        module_attributes=attributes)

    def call(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return _outputs(module(*inputs[: len(args)]))

    return card, (call, len(args), state)


def _diffusers_rms_norm(dim: int) -> nn.Module:
    from diffusers.models.normalization import RMSNorm

    module = RMSNorm(dim, eps=1e-6)
    with torch.no_grad():
        module.weight.normal_()
    return module


def _cases() -> list[tuple[str, OperatorCard, Any]]:
    aten = torch.ops.aten
    bf16, dev = torch.bfloat16, "cuda"

    def r(*shape: int, dtype: torch.dtype = bf16) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=dtype)

    cl = torch.channels_last
    specs: list[tuple[str, Any, list[Any], dict[str, Any]]] = [
        ("relu resnet bf16", aten.relu.default, [r(32, 256, 56, 56)], {}),
        ("gelu_tanh mlp bf16", aten.gelu.default, [r(4096, 8192)], {"approximate": "tanh"}),
        ("silu f32", aten.silu.default, [r(4096, 4096, dtype=torch.float32)], {}),
        ("add bias broadcast bf16", aten.add.Tensor, [r(4096, 8192), r(8192)], {}),
        ("mul residual f32", aten.mul.Tensor, [r(4096, 4096, dtype=torch.float32), r(4096, 4096, dtype=torch.float32)],
         {}),
        ("add channels_last bf16", aten.add.Tensor,
         [r(32, 256, 56, 56).contiguous(memory_format=cl), r(32, 256, 56, 56).contiguous(memory_format=cl)], {}),
        ("sum rows bf16", aten.sum.dim_IntList, [r(4096, 4096), [-1]], {}),
        ("amax rows f32", aten.amax.default, [r(4096, 8192, dtype=torch.float32), [-1]], {}),
        ("mean dim0 f32", aten.mean.dim, [r(4096, 4096, dtype=torch.float32), [0]], {}),
        ("softmax attention bf16", aten._softmax.default, [r(8, 32, 512, 512), -1, False], {}),
        ("softmax vocab f32", aten._softmax.default, [r(512, 32000, dtype=torch.float32), -1, False], {}),
        ("log_softmax gemma vocab bf16", aten._log_softmax.default, [r(64, 262144), -1, False], {}),
        ("layer_norm bf16", aten.native_layer_norm.default, [r(8192, 1536), [1536], r(1536), r(1536), 1e-6], {}),
        ("rms_norm hidden bf16", aten.rms_norm.default, [r(8192, 2048), [2048], r(2048), 1e-6], {}),
        ("rms_norm head_dim bf16", aten.rms_norm.default, [r(65536, 256), [256], r(256), 1e-6], {}),
        ("group_norm vae bf16", aten.native_group_norm.default,
         [r(1, 512, 128, 128), r(512), r(512), 1, 512, 16384, 32, 1e-6], {}),
        ("group_norm vae 512@128 f32", aten.group_norm.default,
         [r(1, 512, 128, 128, dtype=torch.float32), 32, r(512, dtype=torch.float32), r(512, dtype=torch.float32),
          1e-6], {}),
        ("group_norm vae 512@128 bf16", aten.group_norm.default, [r(1, 512, 128, 128), 32, r(512), r(512), 1e-6], {}),
        ("group_norm vae 256@512 bf16", aten.group_norm.default, [r(1, 256, 512, 512), 32, r(256), r(256), 1e-6], {}),
        ("group_norm vae 128@1024 bf16", aten.group_norm.default,
         [r(1, 128, 1024, 1024), 32, r(128), r(128), 1e-6], {}),
        ("group_norm channels_last vae attention 512@128 bf16", aten.group_norm.default,
         [r(1, 512, 128, 128).contiguous(memory_format=cl), 32, r(512), r(512), 1e-6], {}),
        ("group_norm channels_last 256@512 bf16", aten.group_norm.default,
         [r(1, 256, 512, 512).contiguous(memory_format=cl), 32, r(256), r(256), 1e-6], {}),
        ("softmax attention 8x4096x4096 bf16", aten._softmax.default, [r(8, 4096, 4096), -1, False], {}),
        ("softmax vocab 512x262144 bf16", aten._softmax.default, [r(512, 262144), -1, False], {}),
        ("batch_norm resnet bf16", aten._native_batch_norm_legit_no_training.default,
         [r(32, 256, 56, 56), r(256), r(256), r(256), r(256).abs() + 0.1, 0.1, 1e-5], {}),
        ("global avg pool bf16", aten.mean.dim, [r(32, 2048, 7, 7), [-1, -2], True], {}),
        ("global avg pool channels_last bf16", aten.adaptive_avg_pool2d.default,
         [r(32, 2048, 7, 7).contiguous(memory_format=cl), [1, 1]], {}),
        ("layer_norm nhwc view bf16 (ConvNeXt)", aten.native_layer_norm.default,
         [r(32, 96, 56, 56).permute(0, 2, 3, 1), [96], r(96), r(96), 1e-6], {}),
        ("softmax of transposed scores bf16", aten._softmax.default, [r(64, 1024, 1024).transpose(1, 2), -1, False],
         {}),
        ("adaptive avg pool 7x7 bf16", aten._adaptive_avg_pool2d.default, [r(32, 512, 14, 14), [7, 7]], {}),
        ("max pool resnet stem bf16", aten.max_pool2d.default, [r(32, 64, 112, 112), [3, 3], [2, 2], [1, 1]], {}),
        ("cast f32 to bf16", aten._to_copy.default, [r(4096, 8192, dtype=torch.float32)], {"dtype": bf16}),
        ("contiguous from transposed bf16", aten.clone.default, [r(4096, 4096).t()],
         {"memory_format": torch.contiguous_format}),
        ("add channels_last to contiguous bf16", aten.add.Tensor,
         [r(32, 256, 56, 56).contiguous(memory_format=cl), r(32, 256, 56, 56)], {}),
        ("softmax over dim 1 f32", aten._softmax.default, [r(64, 128, 1024, dtype=torch.float32), 1, False], {}),
    ]
    wanted = [w for w in os.environ.get("KF_BENCH_AGENT_CASES", "").split(",") if w]
    specs = [spec for spec in specs if not wanted or any(w in spec[0] for w in wanted)]
    cases = []
    for name, op, args, kwargs in specs:
        card, call = aten_case(op, args, kwargs)
        cases.append((name, card, (call, None, None)))
    modules: list[tuple[str, nn.Module, list[torch.Tensor], dict[str, Any]]] = [
        ("LlamaRMSNorm bf16", LlamaRMSNorm(4096).to(dev, bf16), [r(8192, 4096)], {"variance_epsilon": 1e-6}),
        ("RMSNormGated bf16", Qwen3_5MoeRMSNormGated(4096).to(dev, bf16), [r(4096, 4096), r(4096, 4096)],
         {"variance_epsilon": 1e-6}),
        ("SiluAndMul bf16", SiluAndMul(), [r(4096, 16384)], {}),
        ("GroupNormSiLU bf16", GroupNormSiLU(32, 512).to(dev, bf16), [r(1, 512, 128, 128)],
         {"eps": 1e-6, "num_groups": 32}),
        ("diffusers RMSNorm qk bf16", _diffusers_rms_norm(64).to(dev, bf16), [r(2, 4429, 24, 64)], {"eps": 1e-6}),
        ("diffusers RMSNorm qk heads-first view bf16", _diffusers_rms_norm(64).to(dev, bf16),
         [r(2, 4429, 24, 64).transpose(1, 2)], {"eps": 1e-6}),
    ]
    for name, module, args, attributes in modules:
        if wanted and not any(w in name for w in wanted):
            continue
        card, bundle = module_case(module, args, attributes)
        cases.append((name, card, bundle))
    return cases


def _fresh(
    card: OperatorCard, seed: int, n_forward: int | None, state: list[torch.Tensor] | None
) -> list[torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    tensors = []
    for i, s in enumerate(card.inputs):
        if state is not None and n_forward is not None and i >= n_forward:
            tensors.append(state[i - n_forward])
            continue
        span = sum((n - 1) * st for n, st in zip(s.shape, s.stride, strict=True))
        storage = torch.randn(s.storage_offset + span + 1, generator=g, device="cuda").to(getattr(torch, s.dtype))
        if "batch_norm" in card.op and i == 4:
            storage = storage.abs() + 0.1
        tensors.append(torch.as_strided(storage, s.shape, s.stride, s.storage_offset))
    return tensors


def _errors(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    g, w = got.double(), want.double()
    rel = ((g - w).norm() / max(w.norm().item(), 1e-12)).item()
    scaled = ((g - w).abs().max() / max(w.abs().max().item(), 1e-12)).item()
    return rel, scaled


def _compile(source: str, workdir: Path, tag: str) -> tuple[Path | None, str]:
    src, lib = workdir / f"{tag}.cu", workdir / f"{tag}.so"
    src.write_text(source)
    proc = subprocess.run(["nvcc", "-arch=sm_90", "-O3", "-shared", "-Xcompiler", "-fPIC", "-I", str(INCLUDE),
                           "-o", str(lib), str(src)], capture_output=True, text=True)
    return (lib if proc.returncode == 0 else None), proc.stderr[-2000:]


class Timer:
    """Median device time of a call: L2 flushed before each, CUDA events on the current stream."""

    def __init__(self) -> None:
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush = torch.empty(max(4 * l2, 256 << 20), dtype=torch.uint8, device="cuda")

    def measure(self, fns: list[Callable[[], Any]]) -> list[float]:
        """Median microseconds of each function, the functions interleaved call by call."""
        for fn in fns:
            fn()
        torch.cuda.synchronize()
        samples: list[list[float]] = [[] for _ in fns]
        for _ in range(TIMED_CALLS):
            for i, fn in enumerate(fns):
                self.flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                samples[i].append(start.elapsed_time(end) * 1000.0)
        return [statistics.median(s) for s in samples]


def _verify(lib: KernelLibrary, card: OperatorCard, bundle: Any) -> tuple[str, float, float]:
    call, n_forward, state = bundle
    stream = torch.cuda.current_stream().cuda_stream
    worst = (0.0, 0.0)
    for seed in (1, 2):
        inputs = _fresh(card, seed, n_forward, state)
        with torch.inference_mode():
            want = call(inputs)
        runs = []
        for _ in range(2):
            outs = [torch.full_like(w, float("nan")) for w in want]
            rc = lib.launch(inputs, outs, stream)
            torch.cuda.synchronize()
            if rc != 0:
                return f"launch returned {rc}", float("nan"), float("nan")
            runs.append(outs)
        for got, again, w in zip(runs[0], runs[1], want, strict=True):
            if w.numel() == 0:
                continue
            if torch.isnan(got).any():
                return "unwritten or NaN elements", float("nan"), float("nan")
            if not torch.equal(got, again):
                return "not deterministic", float("nan"), float("nan")
            rel, scaled = _errors(got, w)
            worst = (max(worst[0], rel), max(worst[1], scaled))
            tol = TOLERANCE[w.dtype]
            if rel > tol or scaled > 4 * tol:
                return "wrong result", rel, scaled
    return "passed", worst[0], worst[1]


def _bench_case(name: str, card: OperatorCard, bundle: Any, device: DeviceInfo, workdir: Path,
                pool: ThreadPoolExecutor, timer: Timer, copy_bandwidth_gbps: float) -> dict[str, Any]:
    call, n_forward, state = bundle
    inputs = _fresh(card, 0, n_forward, state)
    with torch.inference_mode():
        want = call(inputs)
    stream = torch.cuda.current_stream().cuda_stream
    variants: list[dict[str, Any]] = []
    tried: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    best_source = ""
    for round_ in range(ROUNDS + 1):
        proposals = []
        for child in range(1 if round_ == 0 else CHILDREN):
            parent = None if best is None else ParentCandidate(source=best_source, knobs=best["knobs"])
            p = propose_offline(ProposeRequest(card=card, device=device, backend="cuda", parent=parent,
                                                tried_knobs=tuple(tried), seed=round_ * 100 + child))
            if not p.has_proposal:
                if round_ == 0:
                    return {"name": name, "op": card.op, "status": "no proposal", "reason": p.no_proposal_reason}
                break
            tried.append(p.knobs)
            proposals.append(p)
        tags = [f"{abs(hash(card.id)) % 10**8}_{round_}_{i}" for i in range(len(proposals))]
        built = list(pool.map(lambda pt: _compile(pt[0].source, workdir, pt[1]), zip(proposals, tags, strict=True)))
        for p, (path, log) in zip(proposals, built, strict=True):
            entry: dict[str, Any] = {"knobs": p.knobs, "description": p.description}
            if path is None:
                entry.update(status="compile error", log=log)
                variants.append(entry)
                continue
            lib = KernelLibrary(path)
            status, rel, scaled = _verify(lib, card, bundle)
            entry.update(status=status, rel_l2_error=rel, max_scaled_error=scaled)
            if status == "passed":
                outs = [torch.empty_like(w) for w in want]
                kernel_us, eager_us = timer.measure([lambda lib=lib, outs=outs: lib.launch(inputs, outs, stream),
                                                     lambda: call(inputs)])
                entry.update(kernel_us=kernel_us, eager_us=eager_us, speedup=eager_us / kernel_us)
                if best is None or kernel_us < best["kernel_us"]:
                    best, best_source = entry, p.source
            variants.append(entry)
    if best is not None and os.environ.get("KF_BENCH_AGENT_COMPILE") == "1":
        try:
            torch._dynamo.reset()  # every case compiles afresh: past the recompile limit dynamo runs eager
            compiled = torch.compile(lambda *xs: call(list(xs)), dynamic=False)
            compiled(*inputs)
            best["compile_us"] = timer.measure([lambda: compiled(*inputs)])[0]
            best["speedup_vs_compile"] = best["compile_us"] / best["kernel_us"]
        except Exception as exc:  # the kernel's numbers stand without the baseline
            best["compile_error"] = repr(exc)[-500:]
    floor = memory_floor_us(card.inputs, card.outputs, copy_bandwidth_gbps)
    if best is not None and floor is not None:
        best.update(floor_us=floor, pct_of_floor=100 * floor / best["kernel_us"])
    family = variants[0]["knobs"].get("family") if variants else None
    verified = sum(v["status"] == "passed" for v in variants)
    return {
        "name": name, "op": card.op, "family": family, "shape": card.inputs[0].shape, "dtype": card.inputs[0].dtype,
        "status": "passed" if verified == len(variants) else "failed", "variants_passed": verified,
        "variants": variants, "best": best,
    }


def _table(results: list[dict[str, Any]]) -> str:
    lines = ["| card | family | shape | dtype | variants passed | eager µs | compile µs | best µs | speedup | "
             "vs compile | % of floor | best knobs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        best = r.get("best") or {}
        knobs = {k: v for k, v in (best.get("knobs") or {}).items() if k != "family"}
        lines.append(
            f"| {r['name']} | {r.get('family', '-')} | {r.get('shape', '-')} | {r.get('dtype', '-')} | "
            f"{r.get('variants_passed', 0)}/{len(r.get('variants', []))} | {best.get('eager_us', float('nan')):.1f} | "
            f"{best.get('compile_us', float('nan')):.1f} | {best.get('kernel_us', float('nan')):.1f} | "
            f"{best.get('speedup', float('nan')):.2f} | {best.get('speedup_vs_compile', float('nan')):.2f} | "
            f"{best.get('pct_of_floor', float('nan')):.0f} | {knobs} |"
        )
    return "\n".join(lines) + "\n"


def run(out_dir: Path) -> dict[str, Any]:
    """Compile, verify and time every cuda template family; write agent_cuda.json and agent_cuda.md."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        raise RuntimeError("the agent GPU benchmark needs a CUDA device")
    props = torch.cuda.get_device_properties(0)
    device = DeviceInfo(backend="cuda", name=props.name, arch=f"sm_{props.major}{props.minor}",
                               sm_count=props.multi_processor_count, l2_bytes=props.L2_cache_size,
                               toolchain="nvcc")
    copy_bandwidth_gbps = float(cuda_facts()["copy_bandwidth_gbps"])  # type: ignore[arg-type]
    started = time.time()
    timer = Timer()
    results = []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=16) as pool, torch.inference_mode():
        for name, card, bundle in _cases():
            try:
                results.append(_bench_case(name, card, bundle, device, Path(tmp), pool, timer, copy_bandwidth_gbps))
            except Exception as exc:  # one broken case must not lose the others' numbers
                results.append({"name": name, "op": card.op, "status": "error", "reason": repr(exc)})
            print(f"[agent] {name}: {results[-1].get('status')} "
                  f"{(results[-1].get('best') or {}).get('speedup', float('nan')):.2f}x", flush=True)
    summary = {
        "device": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
        "copy_bandwidth_gbps": copy_bandwidth_gbps,
        "wall_s": round(time.time() - started, 1),
        "cards": len(results), "cards_passed": sum(r.get("status") == "passed" for r in results),
        "results": results,
    }
    (out_dir / "agent_cuda.json").write_text(json.dumps(summary, indent=1, default=str))
    (out_dir / "agent_cuda.md").write_text(_table(results))
    return {k: v for k, v in summary.items() if k != "results"}


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-agent-out")), indent=1))
