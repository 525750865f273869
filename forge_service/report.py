"""Run reports: per card and end to end, as JSON, Markdown and a plot.

The end-to-end figures and the per-mode pruning come from packaging the run
(:mod:`forge_service.packaging`); per-card gains are never summed into a model figure.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import BaseModel

from forge_service.config import RunConfig
from forge_service.end_to_end import (
    DRAWS_RANDOM,
    GRAPH_MODE_FIELDS,
    RUNS_AS_EAGER,
    EndToEnd,
    carried_figures_words,
    graph_noise_words,
    mode_rows,
    number,
    parity_word,
    scientific,
    spread_number,
)
from forge_service.packaging import Pruning, package_and_measure
from forge_service.store import RunStore, audit_class, best_candidate
from kforge_domain.card import OperatorCard

__all__ = ["CardReport", "EndToEnd", "RunReport", "build_report", "card_reports", "plot_report"]

log = logging.getLogger(__name__)


class CardReport(BaseModel):
    card_id: str
    op: str
    kind: str
    time_share: float
    status: str
    reason: str
    eager_us: float | None
    eager_spread_us: float | None = None  # interquartile range of eager_us's timed calls; None: not recorded
    best_us: float | None
    speedup: float | None
    floor_us: float | None
    pct_of_floor: float | None   # floor / best: 100% means the kernel runs at the memory-bandwidth floor
    audit_class: str
    evaluations: int
    cost_usd: float
    not_packaged: str = ""  # why the .cast left this card's faster kernel out; empty: packaged, or none to package
    compiled_only: bool = False  # a layout only torch.compile's graphs give the call (capture's trace_compiled)


class RunReport(BaseModel):
    run_id: str
    model_spec: str
    backend: str
    device: str
    cards: list[CardReport]
    end_to_end: EndToEnd
    cast_path: str | None
    kernels_packaged: int
    pruned_ops: dict[str, str] = {}  # op -> why eager calls leave it on eager after measuring the model
    pruned_compiled_ops: dict[str, str] = {}  # "op (card id)" or op -> why compiled graphs use inductor
    pruned_cuda_graphs_ops: dict[str, str] = {}  # the same for graphs captured in CUDA graphs
    compiled_measured: bool = False  # compiled verdicts come from a measurement (not --no-compile-baseline)
    cuda_graphs_measured: bool = False  # so do the CUDA-graph verdicts (--cuda-graphs)

    def summary_line(self) -> str:
        found = [c for c in self.cards if c.speedup]
        e2e = self.end_to_end
        model = f"; model x{e2e.cast_speedup:.2f} end to end" if e2e.cast_speedup else ""
        return f"{len(found)} cards with kernels, {self.kernels_packaged} packaged{model}"

    def markdown(self) -> str:
        lines = [
            f"# Run {self.run_id}", "",
            f"Model `{self.model_spec}` on {self.backend} ({self.device}).", "",
            "| card | op | share | eager µs ± IQR | best µs | speedup | % of floor | class | status |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for c in self.cards:
            eager = spread_number(c.eager_us, c.eager_spread_us)
            only = " (compiled only)" if c.compiled_only else ""
            lines.append(
                f"| {c.card_id} | `{c.op}`{only} | {c.time_share:.1%} | {eager} | {number(c.best_us)} | "
                f"{number(c.speedup, 'x')} | {number(c.pct_of_floor, '%')} | {c.audit_class} | {c.status} |"
            )
        e = self.end_to_end
        lines += ["", "## End to end", ""]
        # Each reason says where the op was left ("left on eager: ...", "left to inductor: ...").
        lines += [f"Not packaged: `{c.op}` ({c.card_id}), {c.speedup:.2f}x on its own: {c.not_packaged}."
                  for c in self.cards if c.not_packaged and c.speedup]
        lines += [f"Eager calls: `{op}` {why}." for op, why in self.pruned_ops.items()]
        lines += [f"Compiled graphs: `{op}` {why}." for op, why in self.pruned_compiled_ops.items()]
        lines += [f"CUDA graphs: `{op}` {why}." for op, why in self.pruned_cuda_graphs_ops.items()]
        if self.pruned_ops or self.pruned_compiled_ops or self.pruned_cuda_graphs_ops or any(
                c.not_packaged for c in self.cards):
            lines.append("")
        if not e.measured:
            lines.append(f"Not measured: {e.error}")
        else:
            lines += ["| variant | ms | speedup over eager | parity |", "| --- | ---: | ---: | --- |"]
            lines += [f"| {name} | {number(ms)} | {number(speedup, 'x')} | {parity} |"
                      for name, ms, speedup, parity in mode_rows(e)]
            lines += [
                "", f"Eager output parity: max relative error {scientific(e.parity_max_rel_error)} against a "
                f"tolerance of {scientific(e.parity_tolerance)} ({parity_word(e)}); {_rounding_noise_words(e)}.",
            ]
            if e.graph_figures_carried:
                lines.append(f"{carried_figures_words(e)}.")
            if e.parity_note:
                lines.append(f"Parity {e.parity_note}.")
            if e.cast_speedup_interval:
                low, high = e.cast_speedup_interval
                lines.append(f"The .cast's speedup over eager, {number(e.cast_speedup, 'x')}, comes from "
                             f"{e.speedup_rounds} interleaved rounds; its 95% interval is {low:.2f}x to {high:.2f}x.")
            if e.noisy:
                lines.append(f"Noisy figure: {e.noisy}.")
            for mode in GRAPH_MODE_FIELDS:
                if within := graph_noise_words(e, mode):
                    lines.append(f"Within noise: {within}.")
            if e.draws_random:
                lines.append(f"Random draws: {DRAWS_RANDOM}.")
            if e.cast_kernels == 0:
                lines.append(f"{RUNS_AS_EAGER.capitalize()}.")
            if e.cast_error:
                lines.append(f"With the .cast applied the model raised: {e.cast_error}")
            if e.compile_error:
                lines.append(f"torch.compile: {e.compile_error}")
        return "\n".join(lines) + "\n"


def _rounding_noise_words(e: EndToEnd) -> str:
    """The model's own rounding noise the tolerance follows, as measured."""
    ulp = (f"eager with its weights and inputs one ulp apart departs by {scientific(e.rounding_rel_error)}"
           if e.rounding_rel_error is not None else "eager one ulp apart was not measured")
    compiled = (f"torch.compile departs by {scientific(e.compile_parity_rel_error)}"
                if e.compile_parity_rel_error is not None else "torch.compile was not measured")
    return f"{ulp}, {compiled}"


def card_reports(store: RunStore) -> list[CardReport]:
    reports = []
    for row in store.cards():
        card = OperatorCard.from_json(row.card_json)
        best = best_candidate(store, row.id)
        result = best[1] if best else None
        best_us = result.latency_us if result else None
        # With a kernel, eager time and its spread come from the series its speedup was timed in.
        eager, spread = (result.eager_latency_us, result.eager_spread_us) if result else (
            card.eager_us, card.eager_spread_us)
        reports.append(CardReport(
            card_id=row.id, op=card.op, kind=card.kind, time_share=card.time_share, status=row.status,
            reason=row.reason, compiled_only=card.compiled_only, eager_us=eager, eager_spread_us=spread,
            best_us=best_us,
            speedup=result.speedup if result else None, floor_us=row.floor_us,
            pct_of_floor=100.0 * row.floor_us / best_us if best_us and row.floor_us else None,
            audit_class=audit_class(result),
            evaluations=store.evaluation_count(row.id), cost_usd=store.total_cost(row.id).usd,
        ))
    return reports


def _with_packaging(cards: list[CardReport], left_out: dict[str, str]) -> list[CardReport]:
    """``cards``, each whose faster kernel the .cast left out saying why (its fallback's reason)."""
    return [c.model_copy(update={"not_packaged": left_out[c.card_id]})
            if c.speedup and c.speedup > 1.0 and c.card_id in left_out else c for c in cards]


def build_report(store: RunStore, config: RunConfig) -> RunReport:
    run = store.run_row()
    device = json.loads(run["device_json"] or "{}")
    cast_path = store.run_dir / "model.cast"
    kernels_packaged = 0
    pruning = Pruning()
    left_out: dict[str, str] = {}
    try:
        manifest, e2e, pruning = package_and_measure(store, config, cast_path, device.get("backend", "cpu"))
        kernels_packaged = len(manifest.kernels)
        left_out = {f.card_id: f.reason for f in manifest.fallbacks}
    except Exception as exc:  # a report is still written when packaging fails
        log.exception("packaging failed")
        e2e = EndToEnd(measured=False, error=f"packaging failed: {exc}")
    report = RunReport(
        run_id=run["id"], model_spec=config.model_spec, backend=device.get("backend", config.backend),
        device=device.get("name", ""), cards=_with_packaging(card_reports(store), left_out), end_to_end=e2e,
        cast_path=str(cast_path) if cast_path.is_file() else None, kernels_packaged=kernels_packaged,
        **pruning.report_fields(),
    )
    (store.run_dir / "report.json").write_text(report.model_dump_json(indent=1))
    (store.run_dir / "report.md").write_text(report.markdown())
    try:
        plot_report(report, store.run_dir / "report.png")
    except ImportError:
        log.info("matplotlib is not installed: no report.png")
    return report


def plot_report(report: RunReport, path: Path) -> None:
    """Eager and best time per searched card, and the model end to end, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cards = [c for c in report.cards if c.status != "skipped" and c.eager_us]
    e2e = report.end_to_end
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 0.5 * max(len(cards), 4) + 1.5),
                                      gridspec_kw={"width_ratios": [3, 1]})
    labels = [f"{c.op.split('.')[-2] if c.kind == 'module' else c.op} ({c.time_share:.0%})" for c in cards]
    rows = range(len(cards))
    # A whisker as wide as the timed calls' interquartile range, centred on the median.
    eager_whiskers = [(c.eager_spread_us or 0.0) / 2 for c in cards]
    left.barh([r + 0.2 for r in rows], [c.eager_us or 0 for c in cards], height=0.4, xerr=eager_whiskers,
              error_kw={"elinewidth": 1, "capsize": 2}, label="eager (whisker: IQR)")
    left.barh([r - 0.2 for r in rows], [c.best_us or 0 for c in cards], height=0.4, label="best kernel")
    left.set_yticks(list(rows), labels, fontsize=8)
    left.set_xlabel("µs per call")
    left.set_title("searched cards")
    left.legend()
    variants = [("eager", e2e.eager_ms), (".cast", e2e.cast_ms), ("compile", e2e.compile_ms),
                (".cast+compile", e2e.cast_compile_ms)]
    shown = [(name, ms) for name, ms in variants if ms is not None]
    right.bar([n for n, _ in shown], [ms for _, ms in shown])
    right.set_ylabel("ms per forward")
    right.set_title("end to end, guards on" if e2e.measured else "end to end: not measured")
    right.tick_params(axis="x", labelrotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
