"""Seconds per candidate through the real Evaluator, split into build, start, checks and timing,
and candidates per minute with 1 and 2 sandboxes, and with one sandbox sent as many candidates at once as
it takes (``pip``: on cuda the next build overlaps the current run), on a small card and a large one.

Every candidate carries a nonce so the compile cache never serves it. The split comes from the
evaluator's own figures and from the same harness session run in this process on the same card:
``build`` is ``compile_s``; ``start`` the evaluator's ``start_s``, from the library being ready to
the candidate's process beginning its checks (its start, CUDA, inputs and references, as far as
they did not overlap the build: a process prepared while its candidate builds waits for the
library, and that wait counts nowhere); ``checks`` the verification and ``timing`` the timed
series, both measured in this process; ``other`` the rest of ``total_s`` (audit, staging, the
report, the process's end and the slot's scrub). ``ahead`` is ``prepared_ahead_s``: how long
before the library the process had prepared everything else.

``--card group_norm`` times the offline proposer's first kernel for a bfloat16 group norm in 32
groups (the SD3.5 VAE decoder's, whose eager call is slow) instead of the softmax; ``--remeasure``
asks for the fresh-process re-measure of every passing candidate, as the search asks it of each
candidate that would become a card's best.

    python bench/gpu/throughput.py OUT_DIR [--backend cpu|cuda] [--candidates N] [--big-mb MB]
        [--card softmax|group_norm] [--remeasure] [--in-flight N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
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
from gpu_sandbox_service.evaluator import Evaluator, timing_of  # noqa: E402
from gpu_sandbox_service.harness.session import Session  # noqa: E402
from kforge_domain.card import OperatorCard  # noqa: E402
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions  # noqa: E402
from kforge_domain.result import CandidateResult  # noqa: E402
from packager.abi import KernelLibrary  # noqa: E402

CORPUS = REPO / "tests" / "gpu_sandbox_service" / "corpus"
SUFFIX = {"cpu": "cpp", "cuda": "cu"}


def softmax_source(backend: str) -> str:
    folder = CORPUS / backend
    return (folder / "_prelude.inc").read_text() + "\n" + (folder / f"softmax_ok.{SUFFIX[backend]}").read_text()


def softmax_card(store: BlobStore, backend: str, megabytes: float) -> OperatorCard:
    """A float32 softmax card whose input is ``megabytes`` MiB (rows of 4096)."""
    cols = 4096
    rows = max(1, int(megabytes * 2**20 / 4 / cols))
    torch.manual_seed(0)
    device = "cuda" if backend == "cuda" else "cpu"
    return card_from_call("aten::_softmax.default", [torch.randn(rows, cols, device=device) * 3, -1, False], {}, store)


def group_norm_card(store: BlobStore, backend: str, megabytes: float) -> OperatorCard:
    """A bfloat16 group norm in 32 groups over 128 channels whose input is ``megabytes`` MiB."""
    side = max(8, int((megabytes * 2**20 / 2 / 128) ** 0.5))
    torch.manual_seed(0)
    device = "cuda" if backend == "cuda" else "cpu"
    x = torch.randn(1, 128, side, side, device=device, dtype=torch.bfloat16)
    affine = [torch.randn(128, device=device, dtype=torch.bfloat16) for _ in range(2)]
    return card_from_call("aten::group_norm.default", [x, 32, *affine, 1e-6], {}, store)


CARDS = {"softmax": softmax_card, "group_norm": group_norm_card}


def first_kernel(card: OperatorCard, backend: str) -> str:
    """The offline proposer's first kernel for ``card`` (the corpus's softmax for a softmax card)."""
    if card.op == "aten::_softmax.default":
        return softmax_source(backend)
    from agent_service.offline.catalog import plan_for_card
    from bench.gpu.knob_sweep import gpu_device
    from kforge_domain.device import DeviceInfo

    device = gpu_device() if backend == "cuda" else DeviceInfo(backend="cpu", name="cpu")
    plan = plan_for_card(card, backend)
    return plan.render(backend, plan.knob_space(backend, device).default(), device)


def fresh_request(card: OperatorCard, backend: str, options: EvaluationOptions) -> EvaluateRequest:
    source = f"// nonce {uuid.uuid4().hex}\n{first_kernel(card, backend)}"
    return EvaluateRequest(candidate_id=uuid.uuid4().hex[:8], card=card, source=source, backend=backend,
                           options=options)


def in_process_phases(evaluator: Evaluator, request: EvaluateRequest) -> dict[str, float]:
    """The harness session of ``request`` run here: references, checks and timing, in seconds."""
    # The newest library is the last candidate's build of this same kernel (the cache also holds
    # the canary's on cuda).
    library = max((evaluator.work_dir / "cache").glob("*.so"), key=lambda p: p.stat().st_mtime)
    with tempfile.TemporaryDirectory(dir=evaluator.scratch) as tmp:
        evaluator._stage_files(request, library, Path(tmp))
        harness_request = evaluator._harness_request(request, timing_of(request.options), Path(tmp), verify_fresh=True)
        started = time.perf_counter()
        session = Session(harness_request)
        kernel = KernelLibrary(harness_request.library)
        references = time.perf_counter()
        session.verify(kernel)
        verified = time.perf_counter()
        session.time(kernel)
        timed = time.perf_counter()
    return {"references_s": references - started, "verify_s": verified - references, "timing_s": timed - verified}


async def one_sandbox(evaluator: Evaluator, card: OperatorCard, n: int, options: EvaluationOptions
                      ) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for _ in range(n):
        result = await evaluator.evaluate(fresh_request(card, evaluator.backend, options))
        rows.append(_row(result))
    return rows


def _row(result: CandidateResult) -> dict[str, object]:
    return {"status": result.status.value, "total_s": result.total_s, "compile_s": result.compile_s,
            "start_s": result.start_s, "prepared_ahead_s": result.prepared_ahead_s, "error": result.error_message[:200]}


async def pipelined(evaluator: Evaluator, card: OperatorCard, n: int, options: EvaluationOptions,
                    in_flight: int | None = None) -> tuple[float, list[dict[str, object]]]:
    """Candidates a minute through one sandbox sent as many at once as it takes (``candidate_slots``,
    or ``in_flight``), as the forge sends them: on cuda one builds while another runs."""
    slots = asyncio.Semaphore(in_flight or (await evaluator.device_info()).candidate_slots)

    async def one() -> dict[str, object]:
        async with slots:
            result = await evaluator.evaluate(fresh_request(card, evaluator.backend, options))
        return _row(result)

    started = time.perf_counter()
    rows = await asyncio.gather(*(one() for _ in range(n)))
    return 60.0 * n / (time.perf_counter() - started), list(rows)


async def measure_card(root: Path, backend: str, label: str, megabytes: float, n: int,
                       options: EvaluationOptions, kind: str = "softmax", in_flight: int | None = None
                       ) -> dict[str, object]:
    store = BlobStore(root / "blobs")
    card = CARDS[kind](store, backend, megabytes)
    evaluators = [Evaluator(root / f"sandbox{i}", backend, store) for i in range(2)]
    await evaluators[0].device_info()
    await evaluators[1].device_info()
    await one_sandbox(evaluators[0], card, 1, options)  # warm: first process start, page cache
    rows = await one_sandbox(evaluators[0], card, n, options)
    try:
        phases = [in_process_phases(evaluators[0], fresh_request(card, backend, options)) for _ in range(2)]
    except Exception as exc:  # the split is lost, the counts per minute are not
        print(f"{label}: no phase split: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
        phases = [{"references_s": float("nan"), "verify_s": float("nan"), "timing_s": float("nan")}]
    per_minute_pipelined, pipelined_rows = await pipelined(evaluators[0], card, n, options, in_flight)
    started = time.perf_counter()
    both = await asyncio.gather(*(one_sandbox(e, card, n, options) for e in evaluators))
    two_s = time.perf_counter() - started
    for evaluator in evaluators:
        close = getattr(evaluator, "close", None)
        if close is not None:
            await close()
    totals = [float(r["total_s"]) for r in rows]  # type: ignore[arg-type]
    references = statistics.median(p["references_s"] for p in phases)
    verify = statistics.median(p["verify_s"] for p in phases)
    timing = statistics.median(p["timing_s"] for p in phases)
    total, build, start, ahead = (statistics.median(float(r[key]) for r in rows)  # type: ignore[arg-type]
                                  for key in ("total_s", "compile_s", "start_s", "prepared_ahead_s"))
    return {
        "card": label, "op": card.op, "input_mb": megabytes, "candidates": n, "remeasure": options.remeasure,
        "in_flight": in_flight,
        "statuses": sorted({str(r["status"]) for r in rows + pipelined_rows + [r for b in both for r in b]}),
        "not_passed": [r for r in pipelined_rows + [r for b in both for r in b] if r["status"] != "PASSED"],
        "median_total_s": total, "build_s": build, "start_s": start, "checks_s": verify, "timing_s": timing,
        "other_s": max(0.0, total - build - start - verify - timing), "prepared_ahead_s": ahead,
        "references_s": references,
        "per_minute_1": 60.0 / (sum(totals) / len(totals)), "per_minute_2": 60.0 * 2 * n / two_s,
        "per_minute_pipelined": per_minute_pipelined,
        "fork_server": getattr(evaluators[0], "fork_server_enabled", False), "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--backend", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--candidates", type=int, default=5)
    parser.add_argument("--big-mb", type=float, default=None, help="the large card's input (256 on cuda, 16 on cpu)")
    parser.add_argument("--label", default="", help="a suffix of the JSON file's name")
    parser.add_argument("--card", choices=sorted(CARDS), default="softmax")
    parser.add_argument("--remeasure", action="store_true", help="re-measure each passing candidate in a fresh process")
    parser.add_argument("--in-flight", type=int, default=None,
                        help="candidates sent at once in the pipelined series (default: what the sandbox takes)")
    args = parser.parse_args()
    big = args.big_mb or (256.0 if args.backend == "cuda" else 16.0)
    options = EvaluationOptions(remeasure=args.remeasure)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # as a served sandbox's --work-dir: a root server's candidates may run as nobody
        cards = [asyncio.run(measure_card(Path(tmp) / name, args.backend, name, mb, args.candidates, options,
                                          args.card, args.in_flight))
                 for name, mb in (("small", 1.0), ("large", big))]
    print(f"{'card':6} {'MB':>6} {'total s':>8} {'build':>7} {'start':>7} {'checks':>7} {'timing':>7} {'other':>7} "
          f"{'ahead':>7} {'/min x1':>8} {'/min x2':>8} {'/min pip':>8}  statuses")
    for c in cards:
        print(f"{c['card']:6} {c['input_mb']:>6g} {c['median_total_s']:>8.2f} {c['build_s']:>7.2f} "
              f"{c['start_s']:>7.2f} {c['checks_s']:>7.2f} {c['timing_s']:>7.2f} {c['other_s']:>7.2f} "
              f"{c['prepared_ahead_s']:>7.2f} {c['per_minute_1']:>8.1f} {c['per_minute_2']:>8.1f} "
              f"{c['per_minute_pipelined']:>8.1f}  {','.join(c['statuses'])}")  # type: ignore[arg-type]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name() if args.backend == "cuda" else platform.processor() or platform.machine()
    out = args.out_dir / f"throughput_{args.backend}{'_' + args.label if args.label else ''}.json"
    out.write_text(json.dumps({"backend": args.backend, "device": device, "cpu_count": os.cpu_count(),
                               "torch": torch.__version__, "cards": cards}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
