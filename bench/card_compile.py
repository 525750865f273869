"""Each card's own call under eager and under torch.compile, timed alike: the per-card baseline.

A kernel is worth shipping only if it beats what torch.compile would make of the same call. For
each card picked from a capture directory (or a run's ``capture/``), the captured sample is laid
out exactly as the card says, the call is replayed as the sandbox replays it (the aten overload,
or the module's exported program), compiled with ``torch.compile``, checked against eager, and
both are timed with the sandbox's timer (cache flushed before each call, interleaved rounds).

    python bench/card_compile.py CAPTURE_DIR --card ID [--card ID ...] [--device cuda] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from capture_service.blobs import BlobStore  # noqa: E402
from gpu_sandbox_service.harness.reference import Reference, flatten_tensors  # noqa: E402
from gpu_sandbox_service.harness.tensors import allocate, assign  # noqa: E402
from kforge_domain.card import CardSet, OperatorCard  # noqa: E402
from kforge_torch.timing import Summary, Timer  # noqa: E402


def _inputs(card: OperatorCard, blobs: BlobStore, device: str) -> list[torch.Tensor]:
    """The card's first sample, laid out with the card's exact shapes, strides and offsets."""
    if not card.samples:
        raise ValueError(f"card {card.id} has no captured sample")
    values = blobs.read_tensors(card.samples[0].inputs_blob)
    inputs = [allocate(spec, device) for spec in card.inputs]
    for tensor, value in zip(inputs, values, strict=True):
        assign(tensor, value)
    return inputs


def _l2_bytes(device: str) -> int:
    return int(torch.cuda.get_device_properties(0).L2_cache_size) if device == "cuda" else 32 << 20


def card_baseline(card: OperatorCard, blobs: BlobStore, device: str, *, rounds: int = 25,
                  backend: str = "inductor") -> dict[str, object]:
    """Eager and compiled µs (median and spread) of one card's call, and their largest difference."""
    program = blobs.path(card.module_program_blob) if card.module_program_blob else None
    reference = Reference(card, program)
    call = reference.eager_call(_inputs(card, blobs, device))
    compiled = torch.compile(call, backend=backend, dynamic=False)
    with torch.inference_mode():
        want, got = flatten_tensors(call()), flatten_tensors(compiled())
        difference = max((float((g.double() - w.double()).abs().max()) for g, w in zip(got, want, strict=True)
                          if g.numel()), default=0.0)
        stream = torch.cuda.Stream() if device == "cuda" else None
        timer = Timer("cuda" if device == "cuda" else "cpu", _l2_bytes(device), stream)
        eager_us, compiled_us = [], []
        for _ in range(3):  # warm both
            timer.time_us(call), timer.time_us(compiled)
        for _ in range(rounds):
            eager_us.append(timer.time_us(call))
            compiled_us.append(timer.time_us(compiled))
    eager, comp = Summary.of(eager_us), Summary.of(compiled_us)
    return {"op": card.op, "kind": card.kind, "eager_us": round(eager.median_us, 3),
            "eager_spread_us": round(eager.spread_us, 3), "compile_us": round(comp.median_us, 3),
            "compile_spread_us": round(comp.spread_us, 3), "compile_max_abs_diff": difference}


def card_baselines(capture_dir: Path, card_ids: Sequence[str], device: str, *, rounds: int = 25,
                   backend: str = "inductor") -> dict[str, dict[str, object]]:
    """:func:`card_baseline` for each card id; a card that cannot be replayed or compiled gets its error."""
    cards = {card.id: card for card in CardSet.load(capture_dir).cards}
    blobs = BlobStore(capture_dir)
    results: dict[str, dict[str, object]] = {}
    for card_id in card_ids:
        card = cards.get(card_id)
        if card is None:
            results[card_id] = {"error": f"no card {card_id} in {capture_dir}"}
            continue
        try:
            results[card_id] = card_baseline(card, blobs, device, rounds=rounds, backend=backend)
        except Exception as exc:  # one card's failure must not lose the others' numbers
            results[card_id] = {"op": card.op, "error": f"{type(exc).__name__}: {exc}"[:800]}
        torch._dynamo.reset()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture_dir", type=Path, help="a capture directory or a run directory (uses its capture/)")
    parser.add_argument("--card", action="append", required=True, help="card id (repeat)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    capture_dir = args.capture_dir / "capture" if (args.capture_dir / "capture").is_dir() else args.capture_dir
    results = card_baselines(capture_dir, args.card, args.device, rounds=args.rounds, backend=args.backend)
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"{'card':<18}{'op':<44}{'eager us':>10}{'compile us':>12}{'eager/compile':>15}")
    for card_id, row in results.items():
        if "error" in row:
            print(f"{card_id:<18}{row.get('op', '')!s:<44}  {row['error']}")
            continue
        ratio = float(row["eager_us"]) / float(row["compile_us"])  # type: ignore[arg-type]
        print(f"{card_id:<18}{row['op']!s:<44}{row['eager_us']:>10}{row['compile_us']:>12}{ratio:>14.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
