"""Run reports: per card and end to end, as JSON, Markdown and a plot.

End-to-end figures come from running the model with the ``.cast`` applied (guards on) in a
child process (:mod:`forge_service.e2e`); per-card gains are never summed into a model figure.
A ``.cast`` must not make the model slower or change its outputs: when the model runs slower
with it, or its output departs from eager past the parity tolerance, the op whose kernels save
the least is left on eager and the model measured again, a few times at most; a .cast whose
output still departs then keeps no kernel.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from forge_service.config import RunConfig
from forge_service.store import RunStore, audit_class, best_candidate, package_inputs
from kforge_domain.card import OperatorCard
from servicekit.terminal import COLUMNS

if TYPE_CHECKING:
    from packager.manifest import CastManifest

log = logging.getLogger(__name__)

E2E_TIMEOUT_S = 900
MAX_PRUNED_OPS = 4
#: Relative difference below which two end-to-end medians count as equal (measurement noise).
SLOWER_TOLERANCE = 0.005


class CardReport(BaseModel):
    card_id: str
    op: str
    kind: str
    time_share: float
    status: str
    reason: str
    eager_us: float | None
    best_us: float | None
    speedup: float | None
    floor_us: float | None
    pct_of_floor: float | None   # floor / best: 100% means the kernel runs at the memory-bandwidth floor
    audit_class: str
    evaluations: int
    cost_usd: float


class EndToEnd(BaseModel):
    """Model latency (ms) and parity per deployment mode, from one process: eager and the .cast
    applied (guards on); torch.compile and ``cast.compile``; with CUDA graphs, the same pair
    compiled with ``mode="reduce-overhead"``. Speedups are against eager."""

    measured: bool
    error: str = ""
    eager_ms: float | None = None
    cast_ms: float | None = None
    compile_ms: float | None = None
    cast_compile_ms: float | None = None
    cuda_graphs_ms: float | None = None
    cast_cuda_graphs_ms: float | None = None
    cast_speedup: float | None = None
    compile_speedup: float | None = None
    cast_compile_speedup: float | None = None
    cuda_graphs_speedup: float | None = None
    cast_cuda_graphs_speedup: float | None = None
    cast_error: str = ""  # the model raised with the .cast applied
    failing_ops: dict[str, str] = {}  # ops whose kernels alone make the model raise or depart from eager
    cast_compile_kernels: int | None = None  # kernels cast.compile put in the graphs
    cast_compile_parity_rel_error: float | None = None
    cast_compile_parity_ok: bool | None = None
    cast_compile_error: str = ""
    cast_cuda_graphs_kernels: int | None = None
    cast_cuda_graphs_parity_rel_error: float | None = None
    cast_cuda_graphs_parity_ok: bool | None = None
    cast_cuda_graphs_error: str = ""
    parity_max_rel_error: float | None = None
    parity_tolerance: float | None = None
    parity_ok: bool | None = None  # None: not judged (parity_note says why)
    parity_note: str = ""
    eager_repeat_rel_error: float | None = None  # eager against itself, same inputs, buffers and seed
    compile_parity_rel_error: float | None = None  # torch.compile's own departure from eager
    cast_kernels: int | None = None  # kernels the .cast loaded for this device; none: cast_ms is not timed
    compile_error: str = ""
    kernel_stats: dict[str, dict[str, object]] = {}
    cast_compile_kernel_stats: dict[str, dict[str, object]] = {}
    cast_cuda_graphs_kernel_stats: dict[str, dict[str, object]] = {}


RUNS_AS_EAGER = "the .cast holds no kernel for this device, so the model runs as eager"


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
    pruned_compiled_ops: dict[str, str] = {}  # op -> why compiled graphs leave it to inductor
    compiled_measured: bool = False  # compiled verdicts come from a measurement (not --no-compile-baseline)

    def summary_line(self) -> str:
        found = [c for c in self.cards if c.speedup]
        e2e = self.end_to_end
        model = f"; model x{e2e.cast_speedup:.2f} end to end" if e2e.cast_speedup else ""
        return f"{len(found)} cards with kernels, {self.kernels_packaged} packaged{model}"

    def markdown(self) -> str:
        lines = [
            f"# Run {self.run_id}", "",
            f"Model `{self.model_spec}` on {self.backend} ({self.device}).", "",
            "| card | op | share | eager µs | best µs | speedup | % of floor | class | status |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for c in self.cards:
            lines.append(
                f"| {c.card_id} | `{c.op}` | {c.time_share:.1%} | {_num(c.eager_us)} | {_num(c.best_us)} | "
                f"{_num(c.speedup, 'x')} | {_num(c.pct_of_floor, '%')} | {c.audit_class} | {c.status} |"
            )
        e = self.end_to_end
        lines += ["", "## End to end", ""]
        # Each reason says where the op was left ("left on eager: ...", "left to inductor: ...").
        lines += [f"Eager calls: `{op}` {why}." for op, why in self.pruned_ops.items()]
        lines += [f"Compiled graphs: `{op}` {why}." for op, why in self.pruned_compiled_ops.items()]
        lines += [""] if self.pruned_ops or self.pruned_compiled_ops else []
        if not e.measured:
            lines.append(f"Not measured: {e.error}")
        else:
            lines += ["| variant | ms | speedup over eager | parity |", "| --- | ---: | ---: | --- |"]
            lines += [f"| {name} | {_num(ms)} | {_num(speedup, 'x')} | {parity} |"
                      for name, ms, speedup, parity in mode_rows(e)]
            lines += [
                "", f"Eager output parity: max relative error {_sci(e.parity_max_rel_error)} against a tolerance of "
                f"{_sci(e.parity_tolerance)} ({parity_word(e)}); torch.compile departs from "
                f"eager by {_sci(e.compile_parity_rel_error)}.",
            ]
            if e.parity_note:
                lines.append(f"Parity {e.parity_note}.")
            if e.cast_kernels == 0:
                lines.append(f"{RUNS_AS_EAGER.capitalize()}.")
            if e.cast_error:
                lines.append(f"With the .cast applied the model raised: {e.cast_error}")
            if e.compile_error:
                lines.append(f"torch.compile: {e.compile_error}")
        return "\n".join(lines) + "\n"


def mode_rows(e: EndToEnd) -> list[tuple[str, float | None, float | None, str]]:
    """(variant, ms, speedup over eager, parity) per measured deployment mode."""
    rows = [("eager", e.eager_ms, 1.0, "reference"),
            (".cast (eager, guards on)", e.cast_ms, e.cast_speedup, parity_word(e))]
    if e.compile_ms is not None or e.cast_compile_ms is not None:
        rows += [("torch.compile", e.compile_ms, e.compile_speedup, _sci_word(e.compile_parity_rel_error)),
                 ("cast.compile", e.cast_compile_ms if e.cast_compile_kernels else e.compile_ms,
                  e.cast_compile_speedup if e.cast_compile_kernels else e.compile_speedup,
                  _compiled_parity(e.cast_compile_kernels, e.cast_compile_parity_ok))]
    if e.cuda_graphs_ms is not None:
        rows += [("torch.compile reduce-overhead", e.cuda_graphs_ms, e.cuda_graphs_speedup, "—"),
                 ("cast.compile reduce-overhead",
                  e.cast_cuda_graphs_ms if e.cast_cuda_graphs_kernels else e.cuda_graphs_ms,
                  e.cast_cuda_graphs_speedup if e.cast_cuda_graphs_kernels else e.cuda_graphs_speedup,
                  _compiled_parity(e.cast_cuda_graphs_kernels, e.cast_cuda_graphs_parity_ok))]
    return rows


def _compiled_parity(kernels: int | None, ok: bool | None) -> str:
    if not kernels:
        return "no kernel: as torch.compile"
    return "not judged" if ok is None else "ok" if ok else "MISMATCH"


def _sci_word(value: float | None) -> str:
    return "—" if value is None else f"departs {value:.1e}"


def end_to_end_line(e: EndToEnd, width: int = COLUMNS) -> str:
    """For the terminal: eager against the .cast and the parity verdict, then a line per compiled pair,
    each wrapped at ``width`` with its continuation indented under it."""
    if e.cast_kernels == 0:
        cast = f"eager {_num(e.eager_ms, 'ms')}; {RUNS_AS_EAGER}"
    else:
        cast = f"eager {_num(e.eager_ms, 'ms')}, .cast {_num(e.cast_ms, 'ms')} (x{e.cast_speedup or 0:.2f})"
    parity = (f"parity {parity_word(e)} (max rel error {_sci(e.parity_max_rel_error)}, "
              f"tolerance {_sci(e.parity_tolerance)})")
    note = f"; {e.parity_note}" if e.parity_note else ""
    lines = [f"end to end (guards on): {cast}, {parity}{note}"]
    rows = mode_rows(e)
    for plain, with_cast in zip(rows[2::2], rows[3::2], strict=True):
        lines.append(f"  {plain[0]} {_num(plain[1], 'ms')} (x{plain[2] or 0:.2f}), {with_cast[0]} "
                     f"{_num(with_cast[1], 'ms')} (x{with_cast[2] or 0:.2f}), parity {with_cast[3]}")
    return "\n".join(textwrap.fill(line, width, subsequent_indent=" " * (len(line) - len(line.lstrip()) + 4),
                                    break_on_hyphens=False) for line in lines)


def parity_word(e2e: EndToEnd) -> str:
    return "not judged" if e2e.parity_ok is None else "ok" if e2e.parity_ok else "MISMATCH"


def _sci(value: float | None) -> str:
    return "—" if value is None else f"{value:.2e}"


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    if unit == "%":
        return f"{value:.0f}%"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "ms":
        return f"{value:.3f} ms"
    return f"{value:.4g}"


def card_reports(store: RunStore) -> list[CardReport]:
    reports = []
    for row in store.cards():
        card = OperatorCard.from_json(row.card_json)
        best = best_candidate(store, row.id)
        result = best[1] if best else None
        best_us = result.latency_us if result else None
        eager = result.eager_latency_us if result else card.eager_us
        reports.append(CardReport(
            card_id=row.id, op=card.op, kind=card.kind, time_share=card.time_share, status=row.status,
            reason=row.reason, eager_us=eager, best_us=best_us, speedup=result.speedup if result else None,
            floor_us=row.floor_us,
            pct_of_floor=100.0 * row.floor_us / best_us if best_us and row.floor_us else None,
            audit_class=audit_class(result),
            evaluations=store.evaluation_count(row.id), cost_usd=store.total_cost(row.id).usd,
        ))
    return reports


def write_cast(store: RunStore, min_speedup: float | None, path: Path,
               excluded_ops: Mapping[str, str] | None = None,
               compiled_excluded: Mapping[str, str] | None = None,
               compiled_measured: bool | None = None) -> CastManifest:
    """Build the run's .cast at ``path`` from its best kernels, with their verdicts per mode.

    ``excluded_ops`` are the ops eager calls leave on eager, ``compiled_excluded`` those compiled
    graphs leave to inductor; ``compiled_measured`` says whether compiled use was measured at all
    (a kernel serves compiled graphs only where it was, and kept). All three default to what the
    run's report found, so an exported .cast is the one that was measured.
    """
    from packager.format import FallbackEntry, build_cast
    from packager.manifest import KEPT, PRUNED, UNMEASURED, ModeVerdict

    report = _stored_report(store)
    if excluded_ops is None:
        excluded_ops = dict(report.get("pruned_ops") or {})
    if compiled_excluded is None:
        compiled_excluded = dict(report.get("pruned_compiled_ops") or {})
    if compiled_measured is None:
        compiled_measured = bool(report.get("compiled_measured"))
    model, kernels, fallbacks = package_inputs(store.run_dir)
    config = RunConfig.model_validate_json(store.run_row()["config_json"])
    verdicts: dict[tuple[str, str], ModeVerdict] = {}
    for k in kernels:
        eager_reason = excluded_ops.get(k.op)
        verdicts[(k.card_id, "eager")] = ModeVerdict(PRUNED, eager_reason) if eager_reason else ModeVerdict(KEPT)
        compiled_reason = compiled_excluded.get(k.op)
        verdicts[(k.card_id, "compiled")] = (
            ModeVerdict(PRUNED, compiled_reason) if compiled_reason
            else ModeVerdict(KEPT) if compiled_measured else ModeVerdict(UNMEASURED))
    kept = [k for k in kernels if k.op not in excluded_ops or (compiled_measured and k.op not in compiled_excluded)]
    kept_ids = {k.card_id for k in kept}
    fallbacks = fallbacks + [
        FallbackEntry(k.card_id, k.op, excluded_ops[k.op], calls=OperatorCard.from_json(k.card_json).call_count)
        for k in kernels if k.card_id not in kept_ids
    ]
    return build_cast(path, model, kept, fallbacks, verdicts=verdicts,
                      min_speedup=config.min_speedup if min_speedup is None else min_speedup)


def _stored_report(store: RunStore) -> dict[str, Any]:
    report_json = store.run_row()["report_json"]
    return dict(json.loads(report_json)) if report_json else {}


def least_saving_op(manifest: CastManifest, mode: str = "eager", excluded: Collection[str] = ()) -> str | None:
    """Of the ops whose kernels serve ``mode``, the one estimated to save the least over its calls."""
    from packager.format import saving_us
    from packager.manifest import PRUNED

    saving: dict[str, float] = {}
    for k in manifest.kernels:
        verdict = k.eager if mode == "eager" else k.compiled
        if verdict.verdict == PRUNED or k.op in excluded:
            continue
        guard_us = k.guard_cost_us if mode == "eager" else 0.0
        saving[k.op] = saving.get(k.op, 0.0) + saving_us(k.card, k.eager_latency_us, k.latency_us, guard_us)
    return min(saving, key=lambda op: saving[op]) if saving else None


def is_slower(e2e: EndToEnd) -> bool:
    """Slower with the .cast by more than two medians of the same model differ run to run."""
    return bool(e2e.measured and e2e.eager_ms and e2e.cast_ms
                and e2e.cast_ms > e2e.eager_ms * (1 + SLOWER_TOLERANCE))


def breaks_parity(e2e: EndToEnd) -> bool:
    """The model's output with the .cast departed from eager past the parity tolerance, or it raised."""
    return bool(e2e.measured and (e2e.parity_ok is False or e2e.cast_error))


def compiled_fails(e2e: EndToEnd) -> str:
    """Why ``cast.compile`` is worse than torch.compile alone, in the default mode or with CUDA
    graphs: it raised, moved the output, or ran slower (empty when none of these, or unmeasured)."""
    if not e2e.measured:
        return ""
    pairs = (("", e2e.cast_compile_kernels, e2e.cast_compile_error, e2e.cast_compile_parity_ok,
              e2e.cast_compile_parity_rel_error, e2e.cast_compile_ms, e2e.compile_ms),
             (" with CUDA graphs", e2e.cast_cuda_graphs_kernels, e2e.cast_cuda_graphs_error,
              e2e.cast_cuda_graphs_parity_ok, e2e.cast_cuda_graphs_parity_rel_error, e2e.cast_cuda_graphs_ms,
              e2e.cuda_graphs_ms))
    for where, kernels, error, parity_ok, departure, cast_ms, plain_ms in pairs:
        if not kernels:
            continue
        if error:
            return f"the compiled model{where} raised with the kernels: {error}"
        if parity_ok is False:
            return f"the compiled model's output{where} with the kernels departed from eager by {departure:.2e}"
        if cast_ms and plain_ms and cast_ms > plain_ms * (1 + SLOWER_TOLERANCE):
            return (f"the compiled model{where} ran slower with the kernels ({cast_ms:.3f} ms against "
                    f"{plain_ms:.3f} ms for torch.compile alone)")
    return ""


def package_and_measure(store: RunStore, config: RunConfig, path: Path, backend: str
                        ) -> tuple[CastManifest, EndToEnd, dict[str, str], dict[str, str], bool]:
    """The .cast, its end-to-end figures, the ops left on eager in eager mode and in compiled
    graphs after measuring the model, and whether compiled use was measured.

    Per mode, kernels are pruned one op at a time while the model in that mode raises, departs
    from eager or runs slower with them (an op found to break the model on its own goes first);
    a mode still failing after that keeps no kernel, so the .cast never fails its own check.
    """
    excluded: dict[str, str] = {}
    compiled_excluded: dict[str, str] = {}
    modes = [] if config.skip_compile_baseline else ["compiled"] + (["cuda_graphs"] if config.cuda_graphs else [])
    compiled = bool(modes)
    manifest = write_cast(store, None, path, excluded, compiled_excluded, compiled)
    e2e = measure_end_to_end(config, path, backend, modes)
    if not e2e.measured and manifest.kernels:
        manifest, e2e = _without_kernels(store, config, path, backend, modes, excluded, compiled_excluded, e2e)
        return manifest, e2e, excluded, compiled_excluded, compiled
    noise = e2e.compile_parity_rel_error
    first = e2e  # its compiled figures stand until compiled use changes
    while (is_slower(e2e) or breaks_parity(e2e)) and len(excluded) < MAX_PRUNED_OPS:
        culprits = dict(e2e.failing_ops) or {op: prune_reason(e2e)
                                             for op in [least_saving_op(manifest, "eager", excluded)] if op}
        if not culprits:
            break
        for op, why in culprits.items():
            excluded[op] = f"left on eager: {why}" if e2e.failing_ops else why
            log.info("pruning %s from eager use: %s", op, excluded[op])
        manifest = write_cast(store, None, path, excluded, compiled_excluded, compiled)
        e2e = measure_end_to_end(config, path, backend, [], noise_rel_error=noise)
    if breaks_parity(e2e):
        for kernel in manifest.kernels:
            excluded.setdefault(kernel.op, prune_reason(e2e))
        log.info("eager output parity still broken: eager calls use no kernel")
    # The last measurement of every mode, and the exclusions it was made with.
    e2e_state: tuple[dict[str, str], dict[str, str]] = ({}, {})
    e2e = first
    while compiled and (why := compiled_fails(e2e)) and len(compiled_excluded) < MAX_PRUNED_OPS:
        worst = least_saving_op(manifest, "compiled", compiled_excluded)
        if worst is None:
            break
        op = worst
        compiled_excluded[op] = f"left to inductor: {why}; this op's kernels were estimated to save the least"
        log.info("pruning %s from compiled use: %s", op, compiled_excluded[op])
        manifest = write_cast(store, None, path, excluded, compiled_excluded, compiled)
        e2e = measure_end_to_end(config, path, backend, modes, noise_rel_error=noise)
        e2e_state = (dict(excluded), dict(compiled_excluded))
    if compiled and (why := compiled_fails(e2e)):
        for kernel in manifest.kernels:
            compiled_excluded.setdefault(kernel.op, f"left to inductor: {why}")
        log.info("compiled graphs still worse with the kernels: they use none")
    if e2e_state != (excluded, compiled_excluded):  # the .cast changed since every mode was last measured
        manifest = write_cast(store, None, path, excluded, compiled_excluded, compiled)
        e2e = measure_end_to_end(config, path, backend, modes, noise_rel_error=noise)
    # The final measurement decides: a mode that still loses there keeps no kernel, measured once more.
    eager_loses = prune_reason(e2e) if is_slower(e2e) or breaks_parity(e2e) else ""
    compiled_loses = f"left to inductor: {why}" if (why := compiled_fails(e2e)) else ""
    still = {mode: why for mode, why in (("eager", eager_loses), ("compiled", compiled_loses)) if why}
    if still and e2e.measured:
        for kernel in manifest.kernels:
            for mode, why in still.items():
                target = excluded if mode == "eager" else compiled_excluded
                target.setdefault(kernel.op, f"{why} (in the final check)")
        log.info("the final check still finds the .cast worse (%s): those modes use no kernel", ", ".join(still))
        manifest = write_cast(store, None, path, excluded, compiled_excluded, compiled)
        e2e = measure_end_to_end(config, path, backend, modes, noise_rel_error=noise)
    if not e2e.measured and manifest.kernels:
        manifest, e2e = _without_kernels(store, config, path, backend, modes, excluded, compiled_excluded, e2e)
    return manifest, e2e, excluded, compiled_excluded, compiled


def _without_kernels(store: RunStore, config: RunConfig, path: Path, backend: str, modes: list[str],
                     excluded: dict[str, str], compiled_excluded: dict[str, str], failed: EndToEnd
                     ) -> tuple[CastManifest, EndToEnd]:
    """A check that could not complete with the kernels (the child crashed or timed out) ships none of them."""
    manifest = write_cast(store, None, path, excluded, compiled_excluded, bool(modes))
    why = f"left out: the end-to-end check did not complete with the kernels: {failed.error}"
    for kernel in manifest.kernels:
        excluded.setdefault(kernel.op, why)
        compiled_excluded.setdefault(kernel.op, why)
    log.info("end-to-end check failed with the kernels; the .cast keeps none: %s", failed.error)
    manifest = write_cast(store, None, path, excluded, compiled_excluded, bool(modes))
    return manifest, measure_end_to_end(config, path, backend, modes)


def prune_reason(e2e: EndToEnd) -> str:
    if e2e.cast_error:
        return f"left on eager: the model raised with the .cast applied: {e2e.cast_error}"
    if breaks_parity(e2e):
        return (f"left on eager: the model's output with the .cast departed from eager by "
                f"{e2e.parity_max_rel_error:.2e} (tolerance {e2e.parity_tolerance:.2e})")
    return (f"left on eager: the model ran slower with the .cast ({e2e.cast_ms:.3f} ms against "
            f"{e2e.eager_ms:.3f} ms eager) and this op's kernels were estimated to save the least")


def measure_end_to_end(config: RunConfig, cast_path: Path, backend: str, modes: Collection[str] = ("compiled",),
                       noise_rel_error: float | None = None) -> EndToEnd:
    """Run :mod:`forge_service.e2e` in a child process; a failure is reported, not raised.

    ``modes`` are measured besides eager (``compiled``, ``cuda_graphs``); ``noise_rel_error`` is
    torch.compile's departure from eager from an earlier measurement, for the parity verdict of
    a measurement that does not compile.
    """
    cmd = [sys.executable, "-m", "forge_service.e2e", "--model", config.model_spec, "--cast", str(cast_path),
           "--device", backend, "--grad-mode", config.grad_mode, "--modes", ",".join(["eager", *modes])]
    if noise_rel_error is not None:
        cmd += ["--noise-rel-error", repr(noise_rel_error)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=E2E_TIMEOUT_S,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        return EndToEnd(measured=False, error=f"end-to-end measurement exceeded {E2E_TIMEOUT_S} s")
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return EndToEnd(measured=False, error=" | ".join(tail) or f"exit code {proc.returncode}")
    e2e = EndToEnd.model_validate_json(proc.stdout.strip().splitlines()[-1])
    log.info("measured %s (%d kernels): %s", cast_path.name, e2e.cast_kernels or 0, end_to_end_line(e2e))
    return e2e


def build_report(store: RunStore, config: RunConfig) -> RunReport:
    run = store.run_row()
    device = json.loads(run["device_json"] or "{}")
    cast_path = store.run_dir / "model.cast"
    kernels_packaged = 0
    pruned: dict[str, str] = {}
    pruned_compiled: dict[str, str] = {}
    compiled_measured = False
    try:
        manifest, e2e, pruned, pruned_compiled, compiled_measured = package_and_measure(
            store, config, cast_path, device.get("backend", "cpu"))
        kernels_packaged = len(manifest.kernels)
    except Exception as exc:  # a report is still written when packaging fails
        log.exception("packaging failed")
        e2e = EndToEnd(measured=False, error=f"packaging failed: {exc}")
    report = RunReport(
        run_id=run["id"], model_spec=config.model_spec, backend=device.get("backend", config.backend),
        device=device.get("name", ""), cards=card_reports(store), end_to_end=e2e,
        cast_path=str(cast_path) if cast_path.is_file() else None, kernels_packaged=kernels_packaged,
        pruned_ops=pruned, pruned_compiled_ops=pruned_compiled, compiled_measured=compiled_measured,
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
    left.barh([r + 0.2 for r in rows], [c.eager_us or 0 for c in cards], height=0.4, label="eager")
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
