"""The gather engine's store widths on the GPU: each width a card allows, checked and timed against eager.

For gather cards whose outputs are dense and aligned (comparisons into bool, masked_fill, where,
cat, an integer remainder, an int64-to-bf16 conversion), every ``store_bytes`` choice of
``rows`` mode is rendered, compiled with nvcc, checked bit for bit against eager (outputs filled
with a byte pattern first, so an element left unwritten shows) and timed against eager with the
agent benchmark's timer (L2 flushed before each call, CUDA events, interleaved, median). Prints
a table and writes ``gather_stores.json``.

    python bench/gpu/gather_stores.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # ahead of this folder, whose packager.py is not the packager package

import torch  # noqa: E402

from agent_service.offline.catalog import plan_for_card  # noqa: E402
from bench.gpu.agent import Timer, _compile, aten_case  # noqa: E402
from kforge_domain.device import DeviceInfo  # noqa: E402
from packager.abi import KernelLibrary  # noqa: E402
from packager.variant import encode_call  # noqa: E402


def cases(device: str = "cuda") -> list[tuple[str, Any, list[Any]]]:
    """(name, op, args): gathers whose dense, aligned outputs allow wide stores."""
    aten, bf16 = torch.ops.aten, torch.bfloat16
    h = torch.randn(4096, 2048, device=device, dtype=bf16)
    ids = torch.randint(0, 64, (4096, 1024), device=device)
    return [
        ("gt bf16 -> bool", aten.gt.Scalar, [h, 1.0]),
        ("masked_fill bf16", aten.masked_fill.Scalar, [h, h > 1.0, 0.0]),
        ("where fp32", aten.where.self, [h < 0, h.float(), h.float() * 2]),
        ("cat bf16", aten.cat.default, [[h, h.flip(0)], -1]),
        ("remainder int64", aten.remainder.Scalar, [ids, 8]),
        ("int64 to bf16", aten._to_copy.default, [ids]),
    ]


def kwargs_of(op: Any) -> dict[str, Any]:
    return {"dtype": torch.bfloat16} if op is torch.ops.aten._to_copy.default else {}


def _bench(name: str, op: Any, args: list[Any], device: DeviceInfo, workdir: Path, pool: ThreadPoolExecutor,
           timer: Timer) -> dict[str, Any]:
    kwargs = kwargs_of(op)
    card, call = aten_case(op, args, kwargs)
    inputs = encode_call(args, kwargs)[1]  # the card's tensors, in its order
    (want,) = call(inputs)
    plan = plan_for_card(card, "cuda")
    widths = plan.knob_space("cuda", device).choices.get("store_bytes", ())
    built = list(pool.map(lambda w: _compile(plan.render("cuda", {"mode": "rows", "store_bytes": w}, device),
                                             workdir, f"{abs(hash(card.id)) % 10**8}_{w}"), widths))
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    for width, (path, log) in zip(widths, built, strict=True):
        row: dict[str, Any] = {"store_bytes": width}
        if path is None:
            rows.append({**row, "status": "compile error", "log": log})
            continue
        lib = KernelLibrary(path)
        got = torch.empty_like(want)
        got.view(torch.uint8).fill_(0x5A)
        rc = lib.launch(inputs, [got], stream)
        torch.cuda.synchronize()
        if rc != 0 or not torch.equal(got, want):
            rows.append({**row, "status": f"launch returned {rc}" if rc else "differs from eager"})
            continue

        def kernel(lib: KernelLibrary = lib, got: torch.Tensor = got) -> int:
            return lib.launch(inputs, [got], stream)

        kernel_us, eager_us = timer.measure([kernel, lambda: op(*args, **kwargs)])
        rows.append({**row, "status": "passed", "kernel_us": kernel_us, "eager_us": eager_us,
                     "speedup": eager_us / kernel_us})
    return {"name": name, "op": card.op, "widths": rows}


def _table(results: list[dict[str, Any]]) -> str:
    lines = ["| card | store bytes | status | eager µs | kernel µs | speedup |",
             "| --- | ---: | --- | ---: | ---: | ---: |"]
    nan = float("nan")
    for r in results:
        for w in r.get("widths", []):
            lines.append(f"| {r['name']} | {w['store_bytes']} | {w['status']} | {w.get('eager_us', nan):.2f} | "
                         f"{w.get('kernel_us', nan):.2f} | {w.get('speedup', nan):.2f} |")
        if "error" in r:
            lines.append(f"| {r['name']} | - | {r['error']} | | | |")
    return "\n".join(lines) + "\n"


def run(out_dir: Path) -> list[dict[str, Any]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    device = DeviceInfo(backend="cuda", name=props.name, arch=f"sm_{props.major}{props.minor}",
                        sm_count=props.multi_processor_count, l2_bytes=props.L2_cache_size, toolchain="nvcc")
    timer, results = Timer(), []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=16) as pool, torch.inference_mode():
        for name, op, args in cases():
            try:
                results.append(_bench(name, op, args, device, Path(tmp), pool, timer))
            except Exception as exc:  # one broken case must not lose the others' numbers
                results.append({"name": name, "error": repr(exc)[-300:]})
    table = _table(results)
    print(table)
    (out_dir / "gather_stores.json").write_text(json.dumps({"device": props.name, "torch": torch.__version__,
                                                            "results": results}, indent=1, default=str))
    (out_dir / "gather_stores.md").write_text(table)
    return results


if __name__ == "__main__":
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-gather-stores"))
