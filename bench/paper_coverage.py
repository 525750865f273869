"""The offline proposer's coverage of the paper models, captured on this machine's CPU at test sizes.

Each paper configuration (``gpu/paper_models.CONFIGURATIONS``) is captured with ``kforge
capture --device cpu`` at ``KF_EXAMPLE_SIZE=tiny`` and read by ``gpu/_coverage.card_table``: the
share of captured eager time the offline proposer's templates cover, the same counting cards
served by a covered module card, both also as a share of the time outside vendor ops (the
issue's target), and the non-vendor ops left uncovered. CPU shares at tiny sizes are not the
GPU's: read them as which cards are covered, not as the H200's time split
(``gpu/paper_models.py`` measures that).

``--captures DIR`` keeps the captures there and reuses those already present, so a later run
against a changed catalog reads the same cards (a before/after comparison on one capture).

    .venv/bin/python bench/paper_coverage.py [--captures DIR] [--models resnet50,qwen35_moe:decode] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench" / "gpu"))

from _coverage import card_table, offline_refusal  # noqa: E402
from paper_models import CONFIGURATIONS  # noqa: E402

from kforge_domain.card import CardSet  # noqa: E402

HEADER = ("CPU captures at the tiny test sizes (KF_EXAMPLE_SIZE=tiny): shares are of CPU eager time, "
          "where vendor ops (convolution, matmul, attention) and host-bound small ops weigh differently "
          "than on a GPU; they say which cards are covered, not the H200's split.")


def capture(name: str, variant: str, out: Path) -> CardSet:
    """The configuration's cards, captured into ``out`` unless a capture is already there."""
    if not (out / "cards.json").exists():
        env = {**os.environ, "KF_EXAMPLE_SIZE": "tiny", "KF_EXAMPLE_DEVICE": "cpu"}
        env.pop("KF_EXAMPLE_VARIANT", None)
        env.update({"KF_EXAMPLE_VARIANT": variant} if variant else {})
        proc = subprocess.run([sys.executable, "-m", "forge_service.cli", "capture",
                               str(ROOT / "examples" / "paper" / f"{name}.py"), "--out", str(out), "--device", "cpu",
                               "--samples", "1"], capture_output=True, text=True, cwd=ROOT, env=env)
        if proc.returncode != 0:
            raise RuntimeError((proc.stderr or proc.stdout)[-2000:])
    return CardSet.load(out)


def _selected(wanted: str) -> list[tuple[str, str]]:
    names = [w.strip() for w in wanted.split(",") if w.strip()]
    if not names:
        return list(CONFIGURATIONS)
    return [(n, v) for w in names for n, v in CONFIGURATIONS if w in (n, f"{n}:{v}")]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| model | aten cards | vendor | covered (aten templates) | covered (with modules) | "
             "of non-vendor (aten) | of non-vendor (with modules) | non-vendor left in views, in-place, factories |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        name = f"{r['model']}{':' + r['variant'] if r['variant'] else ''}"
        c = r.get("cards")
        if c is None:
            lines.append(f"| {name} | {r.get('error', 'failed')[:80]} | | | | | | |")
            continue
        lines.append(f"| {name} | {c['n_aten_cards']} | {_pct(c['vendor_share'])} | {_pct(c['offline_covered_share'])} "
                     f"| {_pct(c['offline_covered_share_with_modules'])} "
                     f"| {_pct(c['offline_covered_non_vendor_share'])} "
                     f"| {_pct(c['offline_covered_non_vendor_share_with_modules'])} "
                     f"| {_pct(c['uncovered_not_optimisable_non_vendor_share'])} |")
    return "\n".join(lines)


def uncovered(results: list[dict[str, Any]], top: int = 8) -> str:
    lines = []
    for r in results:
        c = r.get("cards")
        if c is None:
            continue
        lines.append(f"{r['model']}{':' + r['variant'] if r['variant'] else ''} uncovered, share of non-vendor time:")
        lines += [f"  {_pct(e['non_vendor_share']):>6} {e['cards']:3d} x {e['op']}: {e['reasons'][0][:90]}"
                  for e in c["uncovered_top"][:top]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", type=Path, help="keep captures here and reuse those present")
    parser.add_argument("--models", default="", help="comma-separated spec or spec:variant (default: all)")
    parser.add_argument("--out", type=Path, help="write the JSON here")
    args = parser.parse_args()
    refusal = offline_refusal()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        where = args.captures or Path(scratch)
        for name, variant in _selected(args.models):
            result: dict[str, Any] = {"model": name, "variant": variant or None}
            started = time.perf_counter()
            try:
                cards = capture(name, variant, where / f"{name}_{variant or 'default'}")
                result["cards"] = card_table(cards, refusal)
            except Exception as exc:
                result["error"] = f"{type(exc).__name__}: {exc}"
            result["seconds"] = round(time.perf_counter() - started, 1)
            results.append(result)
    print(HEADER + "\n\n" + table(results) + "\n\n" + uncovered(results))
    if args.out:
        args.out.write_text(json.dumps({"header": HEADER, "results": results}, indent=1, default=str))
    return 0 if all("cards" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
