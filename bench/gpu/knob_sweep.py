"""One card's knob sets on the GPU: each rendered, compiled, checked bit for bit and timed against eager.

Every knob set of a card is rendered by the offline proposer, compiled with nvcc (side by side on
the host's cores), run on the card's inputs into outputs filled with a byte pattern first (so an
element left unwritten shows), compared with eager's every output bit for bit, and timed against
eager with the agent benchmark's timer (L2 flushed before each call, CUDA events, interleaved,
median). The
benchmarks that sweep one template's knobs (:mod:`bench.gpu.gather_stores`,
:mod:`bench.gpu.arg_reduce`, :mod:`bench.gpu.sort_network`, :mod:`bench.gpu.row_norms`,
:mod:`bench.gpu.group_norm_nhwc`) share it through :func:`sweep_cases`; each has its own
``run(out_dir)``, the entry :mod:`bench.gpu_suite` calls.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # ahead of this folder, whose packager.py is not the packager package

import torch  # noqa: E402

from agent_service.offline.catalog import plan_for_card  # noqa: E402
from agent_service.offline.knobs import Knobs  # noqa: E402
from bench.gpu.agent import Timer, _compile, aten_case  # noqa: E402
from kforge_domain.card import OperatorCard  # noqa: E402
from kforge_domain.device import DeviceInfo  # noqa: E402
from packager.abi import KernelLibrary  # noqa: E402
from packager.variant import encode_call  # noqa: E402

#: (name, op, positional args, keyword args)
Case = tuple[str, Any, list[Any], dict[str, Any]]
#: The knob sets worth sweeping on a card's plan, for the device.
KnobSets = Callable[[Any, DeviceInfo], Sequence[Knobs]]
#: Whether a kernel's output matches eager's: (kernel's, eager's).
Matches = Callable[[torch.Tensor, torch.Tensor], bool]


def gpu_device() -> DeviceInfo:
    """The current cuda device as the proposer sees it."""
    props = torch.cuda.get_device_properties(0)
    return DeviceInfo(backend="cuda", name=props.name, arch=f"sm_{props.major}{props.minor}",
                      sm_count=props.multi_processor_count, l2_bytes=props.L2_cache_size, toolchain="nvcc")


def _same_bits(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal element for element, floats by their bits (NaN payloads and zero signs included)."""
    if want.is_floating_point():
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
        return torch.equal(got.reshape(-1).view(bits), want.reshape(-1).view(bits))
    return torch.equal(got, want)


def _label(knobs: Knobs) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items())


def sweep(case: Case, knob_sets: KnobSets, device: DeviceInfo, workdir: Path, pool: ThreadPoolExecutor,
          timer: Timer, matches: Matches = _same_bits) -> dict[str, Any]:
    """Every knob set ``knob_sets`` gives for ``case``'s plan: status, and where it matched eager, times."""
    name, op, args, kwargs = case
    card: OperatorCard
    card, call = aten_case(op, args, kwargs)
    inputs = encode_call(args, kwargs)[1]  # the card's tensors, in its order
    want = list(call(inputs))
    plan = plan_for_card(card, "cuda")
    chosen = list(knob_sets(plan, device))
    tag = abs(hash(card.id)) % 10**8
    built = list(pool.map(lambda i: _compile(plan.render("cuda", chosen[i], device), workdir, f"{tag}_{i}"),
                          range(len(chosen))))
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    for knobs, (path, log) in zip(chosen, built, strict=True):
        row: dict[str, Any] = {"knobs": knobs}
        if path is None:
            rows.append({**row, "status": "compile error", "log": log})
            continue
        lib = KernelLibrary(path)
        got = [torch.empty_like(w) for w in want]
        for g in got:
            g.unsqueeze(0).view(torch.uint8).fill_(0x5A)  # a view (reshape may copy); 0-dim has no byte view
        rc = lib.launch(inputs, got, stream)
        torch.cuda.synchronize()
        if rc != 0 or not all(matches(g, w) for g, w in zip(got, want, strict=True)):
            rows.append({**row, "status": f"launch returned {rc}" if rc else "differs from eager"})
            continue

        def kernel(lib: KernelLibrary = lib, got: list[torch.Tensor] = got) -> int:
            return lib.launch(inputs, got, stream)

        kernel_us, eager_us = timer.measure([kernel, lambda: op(*args, **kwargs)])
        rows.append({**row, "status": "passed", "kernel_us": kernel_us, "eager_us": eager_us,
                     "speedup": eager_us / kernel_us})
    return {"name": name, "op": card.op, "knob_sets": rows}


def table(results: list[dict[str, Any]]) -> str:
    """A markdown table: one line per card and knob set."""
    lines = ["| card | knobs | status | eager µs | kernel µs | speedup |", "| --- | --- | --- | ---: | ---: | ---: |"]
    nan = float("nan")
    for r in results:
        for k in r.get("knob_sets", []):
            lines.append(f"| {r['name']} | {_label(k['knobs'])} | {k['status']} | {k.get('eager_us', nan):.2f} | "
                         f"{k.get('kernel_us', nan):.2f} | {k.get('speedup', nan):.2f} |")
        if "error" in r:
            lines.append(f"| {r['name']} | - | {r['error']} | | | |")
    return "\n".join(lines) + "\n"


def named(cases: Sequence[Case], parts: Sequence[str]) -> list[Case]:
    """The cases whose name holds one of ``parts`` (``("",)``: all)."""
    return [case for case in cases if any(part in case[0] for part in parts)]


def sweep_cases(out_dir: Path, stem: str, cases: Sequence[Case], knob_sets: KnobSets,
        matches: Matches = _same_bits) -> list[dict[str, Any]]:
    """Sweep every case, print the table, write ``<stem>.json`` and ``<stem>.md`` under ``out_dir``;
    a kernel passes where ``matches`` (by default: the same bits) holds for each output."""
    out_dir.mkdir(parents=True, exist_ok=True)
    device, timer, results = gpu_device(), Timer(), []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=16) as pool, torch.inference_mode():
        for case in cases:
            try:
                results.append(sweep(case, knob_sets, device, Path(tmp), pool, timer, matches))
            except Exception as exc:  # one broken case must not lose the others' numbers
                results.append({"name": case[0], "error": repr(exc)[-300:]})
    text = table(results)
    print(text)
    (out_dir / f"{stem}.json").write_text(json.dumps({"device": device.name, "torch": torch.__version__,
                                                      "results": results}, indent=1, default=str))
    (out_dir / f"{stem}.md").write_text(text)
    return results
