"""Graph breaks and recompilations a .cast adds to a model under torch.compile, on the GPU.

Builds module cards for every RMSNorm variant of a model (the tiny Gemma 4 by default, on cuda)
with a stand-in kernel that reports failure (so every call falls back: only tracing is under
test), and compares ``torch._dynamo.explain`` and dynamo's counters with and without the cast:
graph count, graph breaks with their reasons, recompilations. Writes ``graph_breaks.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from capture_service.spec import load_model_spec  # noqa: E402
from kforge_domain.card import OperatorCard  # noqa: E402
from packager import load_cast  # noqa: E402
from packager.format import KernelEntry, ModelIdentity, build_cast  # noqa: E402
from packager.manifest import KEPT, ModeVerdict  # noqa: E402
from packager.variant import STATE_KWARG, encode_call, module_state, module_variant_key, qualified_class_name  # noqa: E402

FAILING = '#include "kf_abi.h"\nextern "C" int kf_launch(const kf_tensor *i, int32_t ni, kf_tensor *o, int32_t no, ' \
          'void *s) { return 7; }\n'


def _spec(t: torch.Tensor) -> dict[str, object]:
    return {"shape": list(t.shape), "stride": list(t.stride()), "dtype": str(t.dtype).removeprefix("torch."),
            "storage_offset": t.storage_offset(), "aligned16": t.data_ptr() % 16 == 0}


def module_cards(model: torch.nn.Module, args: tuple, kwargs: dict, class_name: str) -> list[OperatorCard]:
    seen: dict[str, OperatorCard] = {}
    calls: list[tuple[torch.nn.Module, torch.Tensor]] = []
    hooks = [m.register_forward_hook(lambda mod, a, out: calls.append((mod, a[0])))
             for m in model.modules() if type(m).__name__ == class_name]
    with torch.inference_mode():
        model(*args, **kwargs)
    for hook in hooks:
        hook.remove()
    for module, x in calls:
        key = module_variant_key(module, [x], {})
        _, tensors = encode_call([x], {STATE_KWARG: module_state(module)})
        with torch.inference_mode():
            out = module(x)
        seen.setdefault(key.id, OperatorCard.model_validate({
            "id": key.id, "kind": "module", "op": qualified_class_name(module), "device": x.device.type,
            "key": key.to_json(), "inputs": [_spec(t) for t in tensors], "outputs": [_spec(out)]}))
    return list(seen.values())


def explain(model: torch.nn.Module, args: tuple, kwargs: dict) -> dict[str, object]:
    torch._dynamo.reset()
    with torch.inference_mode():
        result = torch._dynamo.explain(model)(*args, **kwargs)
    return {"graphs": result.graph_count, "breaks": result.graph_break_count,
            "reasons": [f"{b.reason[:300]} @ {b.user_stack[-1] if b.user_stack else ''}" for b in result.break_reasons]}


def compiled_counts(run_compiled) -> dict[str, object]:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with torch.inference_mode():
        run_compiled()
        run_compiled()
    counters = torch._dynamo.utils.counters
    return {"unique_graphs": counters["stats"]["unique_graphs"], "graph_breaks": dict(counters["graph_break"]),
            "recompiles": dict(counters["recompiles"]) if "recompiles" in counters else {}}


def run(out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = os.environ.get("KF_BENCH_BREAKS_MODEL", "examples/paper/gemma4_e2b.py")
    class_name = os.environ.get("KF_BENCH_BREAKS_CLASS", "Gemma4RMSNorm")
    loaded = load_model_spec(str(ROOT / spec))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = loaded.model.to(device)
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in loaded.args)
    kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in loaded.kwargs.items()}
    cards = module_cards(model, args, kwargs, class_name)
    backend = "cuda" if device.type == "cuda" else "cpu"
    arch = f"sm_{''.join(map(str, torch.cuda.get_device_capability()))}" if backend == "cuda" else "cpu-x86_64"
    src = out_dir / ("failing.cu" if backend == "cuda" else "failing.cpp")
    src.write_text(FAILING)
    lib = out_dir / "failing.so"
    compiler = [shutil.which("nvcc") or "nvcc", "-shared", "-Xcompiler", "-fPIC", f"-arch={arch}"] \
        if backend == "cuda" else ["g++", "-shared", "-fPIC"]
    subprocess.run([*compiler, "-I", str(ROOT / "gpu_sandbox_service/include"), str(src), "-o", str(lib)], check=True)
    entries = [KernelEntry(
        card_id=c.id, kind="module", op=c.op, card_json=c.to_json(), backend=backend, arch=arch, audit_class="custom",
        source=FAILING, artifact=lib.read_bytes(), eager_latency_us=1e6, eager_spread_us=None, latency_us=1.0,
        latency_spread_us=None, speedup=1e6, rel_l2_error=None, max_scaled_error=None,
        source_sha256=hashlib.sha256(FAILING.encode()).hexdigest(), compiler_flags="", toolchain="", candidate_id="x",
    ) for c in cards]
    build_cast(out_dir / "breaks.cast", ModelIdentity(spec, class_name, "bench"), entries, [],
               verdicts={(c.id, "compiled"): ModeVerdict(KEPT, "bench") for c in cards})
    cast = load_cast(out_dir / "breaks.cast")
    result: dict[str, object] = {"model": spec, "device": str(device), "cards": len(cards),
                                 "without_cast": explain(model, args, kwargs)}
    with cast.applied_to(model):
        result["with_cast"] = explain(model, args, kwargs)
    plain = torch.compile(model)
    result["torch_compile"] = compiled_counts(lambda: plain(*args, **kwargs))
    compiled = cast.compile(model)
    result["cast_compile"] = compiled_counts(lambda: compiled(*args, **kwargs))
    result["cast_compile_stats"] = cast.stats()
    cast.remove()
    (out_dir / "graph_breaks.json").write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/graph_breaks")), indent=1, default=str))
