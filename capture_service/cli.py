"""``kforge capture MODEL_SPEC --out DIR``: capture a model's operator cards from the shell.

``register(subparsers)`` adds the command to the ``kforge`` parser; ``python -m
capture_service.cli MODEL_SPEC --out DIR`` runs it alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capture_service.capture import capture_model
from capture_service.options import DEFAULT_BUDGET_BYTES, DEFAULT_SAMPLES, DEVICES, GRAD_MODES
from capture_service.progress import CaptureProgress
from kforge_domain.card import CardSet
from servicekit.errors import KforgeError

MIB = 1024 * 1024
TABLE_ROWS = 15


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``capture`` to a subparsers object (``parser.add_subparsers()``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "capture", help="run a model under capture and write its operator cards and reference samples"
    )
    add_capture_arguments(parser)
    parser.set_defaults(func=cmd_capture)
    return parser


def add_capture_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_spec", metavar="MODEL_SPEC",
                        help="a .py file defining get_model() and get_inputs(), or package.module:factory")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where cards.json and blobs/ go")
    parser.add_argument("--json", action="store_true", help='print {"cards": [...]} on stdout')
    parser.add_argument("--device", choices=DEVICES, default="cpu")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, metavar="K",
                        help=f"reference samples kept per card (default {DEFAULT_SAMPLES})")
    parser.add_argument("--grad-mode", choices=list(GRAD_MODES), default="inference",
                        help="the mode the model is served in: its aten ops depend on it (default inference)")
    parser.add_argument("--sample-budget-mb", type=float, default=DEFAULT_BUDGET_BYTES / MIB, metavar="N",
                        help=f"total size of reference samples (default {DEFAULT_BUDGET_BYTES // MIB})")
    parser.add_argument("--trace-compiled", action="store_true",
                        help="also trace the model as torch.compile does and card each layout its graphs give a "
                             "captured call that eager never ran")


def cmd_capture(args: argparse.Namespace) -> int:
    """Run the capture; print cards as JSON or a summary table. Errors: a message, exit 1."""
    if args.sample_budget_mb < 0:
        print("error: --sample-budget-mb must be >= 0", file=sys.stderr)
        return 2

    def show(update: CaptureProgress) -> None:
        print(f"[{update.stage}] {update.message}", file=sys.stderr, flush=True)

    try:
        card_set = capture_model(
            args.model_spec, device=args.device, grad_mode=args.grad_mode, samples=args.samples,
            budget_bytes=int(args.sample_budget_mb * MIB), out_dir=args.out, progress=show,
            trace_compiled=args.trace_compiled,
        )
    except KforgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        json.dump({"cards": [c.model_dump(mode="json") for c in card_set.cards]}, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(summary_table(card_set))
        print(f"{len(card_set.cards)} cards written to {args.out}")
    return 0


def summary_table(card_set: CardSet, rows: int = TABLE_ROWS) -> str:
    """The top cards by share of eager time, as plain text; eager is the median and the
    interquartile range of the timed calls."""
    top = sorted(card_set.cards, key=lambda c: c.time_share, reverse=True)[:rows]
    lines = [f"{'share':>6}  {'eager µs ± IQR':>17}  {'calls':>5}  {'kind':6}  {'op':44}  first input / note"]
    for card in top:
        shape = "x".join(map(str, card.inputs[0].shape)) if card.inputs else "-"
        flags = [name for name, on in (("vendor", card.vendor_op), ("compiled only", card.compiled_only)) if on]
        note = card.reason or " ".join(flags)
        eager = f"{eager_text(card.eager_us, card.eager_spread_us):>17}"
        op = card.op if len(card.op) <= 44 else "…" + card.op[-43:]
        lines.append(
            f"{card.time_share:6.1%}  {eager}  {card.call_count:5d}  {card.kind:6}  {op:44}  "
            f"{shape} {card.inputs[0].dtype if card.inputs else ''} {note}".rstrip()
        )
    return "\n".join(lines)


def eager_text(median_us: float | None, spread_us: float | None) -> str:
    """``12.3 ± 0.4``; the median alone for a card written before the spread was recorded."""
    if median_us is None:
        return "-"
    return f"{median_us:.1f}" + (f" ± {spread_us:.1f}" if spread_us is not None else "")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m capture_service.cli [capture] MODEL_SPEC --out DIR ...``"""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["capture"]:
        arguments = arguments[1:]
    parser = argparse.ArgumentParser(prog="python -m capture_service.cli", description=__doc__)
    add_capture_arguments(parser)
    return cmd_capture(parser.parse_args(arguments))


if __name__ == "__main__":
    raise SystemExit(main())
