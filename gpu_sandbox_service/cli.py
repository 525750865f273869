"""``kforge sandbox eval``: verify and time one candidate kernel against a captured card."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict, fields
from pathlib import Path

from pydantic import ValidationError

from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.evaluator import Evaluator
from gpu_sandbox_service.models import Timing
from kforge_domain.card import BLOBS_DIR, CardSet
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import RunFigures
from servicekit.errors import InvalidArgument, KforgeError, NotFound

DEFAULT_WORK_DIR = Path.home() / ".cache" / "kforge" / "sandbox"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``sandbox eval`` to the ``kforge`` parser."""
    sandbox = subparsers.add_parser("sandbox", help="evaluate candidate kernels locally")
    commands = sandbox.add_subparsers(dest="sandbox_command", required=True)
    evaluate = commands.add_parser("eval", help="verify and time one candidate against one card")
    evaluate.add_argument("--cards", type=Path, required=True, metavar="DIR", help="capture dir: cards.json + blobs/")
    evaluate.add_argument("--card", required=True, metavar="ID", help="the card's id")
    evaluate.add_argument("--source", type=Path, required=True, metavar="FILE", help="the candidate (.cpp or .cu)")
    evaluate.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto")
    evaluate.add_argument("--json", action="store_true", help="print the result as JSON")
    evaluate.add_argument("--remeasure", action="store_true", help="re-time a passing candidate in a fresh process")
    evaluate.add_argument("--timing-runs", type=int, default=Timing().timing_runs)
    evaluate.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR, help="compile cache and run dirs")
    evaluate.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    """Exit status 0 when the candidate passed, 1 when it did not."""
    result = asyncio.run(evaluate_file(args))
    print(result_json(result) if args.json else result_text(result))
    return 0 if result.status.value == "PASSED" else 1


async def evaluate_file(args: argparse.Namespace) -> CandidateResult:
    try:
        card = CardSet.load(args.cards).card(args.card)
    except FileNotFoundError as exc:
        raise NotFound(str(exc)) from exc
    except KeyError as exc:
        raise NotFound(f"{exc.args[0]} in {args.cards}") from exc
    except ValidationError as exc:
        raise InvalidArgument(f"{args.cards}/cards.json is not a valid card set: {exc.errors()[:3]}") from exc
    try:
        source = args.source.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise NotFound(f"cannot read the candidate {args.source}: {exc}") from exc
    evaluator = Evaluator(args.work_dir, args.backend, BlobStore(args.cards / BLOBS_DIR))
    options = EvaluationOptions(timing_runs=args.timing_runs, remeasure=args.remeasure)
    request = EvaluateRequest(candidate_id=args.source.name, card=card, source=source, backend=evaluator.backend,
                              options=options)
    return await evaluator.evaluate(request)


def result_json(result: CandidateResult) -> str:
    """The result's fields, status by name, the artifact by size only."""
    verdict = {f.name: None for f in fields(RunFigures)} | asdict(result.verdict)
    verdict |= {"status": result.status.value, "speedup": result.speedup}
    shown = verdict | {f.name: getattr(result, f.name) for f in fields(result) if f.name not in ("artifact", "verdict")}
    shown["artifact_bytes"] = len(result.artifact)
    return json.dumps(shown, indent=1)


def result_text(result: CandidateResult) -> str:
    lines = [f"{result.candidate_id}: {result.status.value}"]
    run = result.figures
    if run is not None and run.latency_us is not None:
        lines.append(f"  latency {run.latency_us:.2f} us (IQR {run.latency_spread_us or 0:.2f}), eager "
                     f"{run.eager_latency_us or 0:.2f} us, speedup {run.speedup or 0:.2f}x")
    if run is not None and run.rel_l2_error is not None:
        lines.append(f"  error rel_l2 {run.rel_l2_error:.3g}, max_scaled {run.max_scaled_error or 0:.3g}")
    if result.verdict.error_message:
        lines.append(f"  {result.verdict.error_message}")
    if result.status.value != "PASSED" and result.log_tail.strip():
        lines.append("  log tail:\n    " + "\n    ".join(result.log_tail.strip().splitlines()[-20:]))
    lines.append(f"  audit {result.audit_class}, compile {result.compile_s:.2f} s, total {result.total_s:.2f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_sandbox_service.cli")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KforgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
