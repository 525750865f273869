"""Which of a .cast's aten kernels a compiled model's graph chooses, call by call, and why not.

``cast.compile`` chooses a kernel while AOTAutograd traces the graph, on the fake tensors inductor
hands it. Those can differ from the eager calls the cards were captured from: inductor's layout
optimisation, for one, makes convolution outputs channels-last, and a norm that reads one then
sees strides no card has. This compiles MODEL_SPEC with the cast, every aten kernel allowed into the
graph whatever its verdict, runs it once, and lists each traced call of an overridden op: shape,
strides, dtype, the card chosen, and every other card's reason for missing (``shape``, ``stride``,
...). Prints a table of distinct calls and writes ``compiled_choices.json``.

    .venv/bin/python bench/compiled_choices.py MODEL_SPEC CAST [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from capture_service.spec import load_model_spec  # noqa: E402
from packager import load_cast  # noqa: E402
from packager.kernel import KernelSet, LoadedKernel  # noqa: E402

Row = tuple[str, tuple[int, ...], tuple[int, ...], str, str, tuple[tuple[str, str], ...]]


def traced_calls(model_spec: str, cast_path: str) -> collections.Counter[Row]:
    """Each distinct traced call of an overridden op, counted: (op, shape, strides, dtype, chosen, misses)."""
    loaded = load_model_spec(model_spec)
    cast = load_cast(cast_path)
    seen: collections.Counter[Row] = collections.Counter()
    match_traced, serves_graphs = KernelSet.match_traced, LoadedKernel.serves_graphs

    def watched(self: KernelSet, args: Sequence[object], kwargs: Mapping[str, object]) -> Any:
        found = match_traced(self, args, kwargs)
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        misses = []
        for kernel in self.kernels:
            reason = kernel.trace_matcher.miss_reason(args, kwargs, [])
            if reason is not None:
                misses.append((kernel.card_id, str(reason)))
        seen[(self.kernels[0].record.op, tuple(first.shape) if first is not None else (),
              tuple(first.stride()) if first is not None else (), str(first.dtype) if first is not None else "",
              found[0].card_id if found else "", tuple(misses))] += 1
        return found

    def every_mode(self: LoadedKernel, mode: str | None = None) -> bool:
        return not self.mutated_inputs  # in-place ops' kernels never enter a graph

    KernelSet.match_traced = watched  # type: ignore[method-assign]
    LoadedKernel.serves_graphs = every_mode  # type: ignore[method-assign]
    try:
        with torch.inference_mode():
            compiled = cast.compile(loaded.model)
            compiled(*loaded.args, **loaded.kwargs)
    finally:
        KernelSet.match_traced, LoadedKernel.serves_graphs = match_traced, serves_graphs  # type: ignore[method-assign]
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_spec")
    parser.add_argument("cast")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    seen = traced_calls(args.model_spec, args.cast)
    print(f"{'calls':>5}  {'op':28} {'shape':22} {'strides':28} {'dtype':15} {'chosen':17} misses")
    for (op, shape, strides, dtype, chosen, misses), n in sorted(seen.items(), key=lambda item: -item[1]):
        why = ", ".join(f"{card[:8]} {reason}" for card, reason in misses)
        print(f"{n:>5}  {op:28} {shape!s:22} {strides!s:28} {dtype:15} {chosen or '—':17} {why}")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [{"calls": n, "op": op, "shape": shape, "strides": strides, "dtype": dtype, "chosen": chosen,
             "misses": dict(misses)} for (op, shape, strides, dtype, chosen, misses), n in seen.items()]
    (args.out / "compiled_choices.json").write_text(json.dumps(
        {"model": args.model_spec, "torch": torch.__version__, "calls": rows}, indent=1))
    print(f"wrote {args.out / 'compiled_choices.json'}")


if __name__ == "__main__":
    main()
