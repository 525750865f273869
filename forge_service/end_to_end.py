"""The model measured end to end: eager against the ``.cast``, and torch.compile against ``cast.compile``.

The figures come from running the model in a child process (:mod:`forge_service.e2e`), so a
kernel that crashes harms nothing here; per-card gains are never summed into a model figure.
This module holds the figures, the verdicts read from them (slower, parity broken, a compiled
mode worse with the kernels) and their lines for the terminal.
"""

from __future__ import annotations

import logging
import os
import sys
import textwrap
from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel

from forge_service.child_progress import run_reporting
from forge_service.config import RunConfig
from forge_service.phase_events import announce
from servicekit.terminal import COLUMNS

log = logging.getLogger(__name__)

E2E_TIMEOUT_S = 900
#: The child starts no compilation that would likely carry it past this (forge_service.e2e.Deadline):
#: the rest of the timeout is left for its last timings and its report.
CHILD_DEADLINE_S = E2E_TIMEOUT_S - 120
#: What a measurement of each mode compares, as a run's progress names it.
MODE_PAIRS = {"eager": "eager against the .cast", "compiled": "torch.compile against cast.compile",
              "cuda_graphs": "both with CUDA graphs (reduce-overhead)"}
#: Relative difference below which two end-to-end medians count as equal (measurement noise).
SLOWER_TOLERANCE = 0.005
#: How a compiled pair reads when the kernels did not beat torch.compile alone (at parity).
NO_FASTER = "ran no faster with the kernels"
#: Per compiled mode: its name in lines and the figures of torch.compile alone and of cast.compile.
GRAPH_MODE_FIELDS = {"compiled": ("", "compile", "cast_compile"),
                     "cuda_graphs": (" with CUDA graphs", "cuda_graphs", "cast_cuda_graphs")}


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
    cast_speedup_interval: list[float] | None = None  # 95% interval of cast_speedup, from interleaved rounds
    speedup_rounds: int | None = None
    noisy: str = ""  # why cast_speedup's interval stayed wide (load, spread); empty when tight
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
    cast_compile_pruned: dict[str, str] = {}  # card id -> why the check left its kernel to inductor
    cast_cuda_graphs_kernels: int | None = None
    cast_cuda_graphs_parity_rel_error: float | None = None
    cast_cuda_graphs_parity_ok: bool | None = None
    cast_cuda_graphs_error: str = ""
    cast_cuda_graphs_pruned: dict[str, str] = {}
    # 95% interval of cast.compile's speedup over torch.compile, where the two alternated round by round.
    cast_compile_interval: list[float] | None = None
    cast_cuda_graphs_interval: list[float] | None = None
    # Otherwise torch.compile alone's relative move between its timings before and after
    # cast.compile's: the noise the compiled pair's difference is read against.
    compile_drift: float | None = None
    cuda_graphs_drift: float | None = None
    parity_max_rel_error: float | None = None
    parity_tolerance: float | None = None
    parity_ok: bool | None = None  # None: not judged (parity_note says why)
    parity_note: str = ""
    eager_repeat_rel_error: float | None = None  # eager against itself, same inputs, buffers and seed
    draws_random: bool = False  # the model draws from torch's random generators (dropout in training mode)
    compile_parity_rel_error: float | None = None  # torch.compile's own departure from eager
    rounding_rel_error: float | None = None  # eager's departure with its weights and inputs one ulp apart
    cast_kernels: int | None = None  # kernels the .cast loaded for this device; none: cast_ms is not timed
    compile_error: str = ""
    # Compiled modes whose torch.compile figures come from an earlier measurement of the run: no
    # kernel served them any more, so the model was not compiled for them again.
    graph_figures_carried: list[str] = []
    graph_figures_eager_ms: float | None = None  # the eager timed beside the carried figures
    kernel_stats: dict[str, dict[str, object]] = {}
    cast_compile_kernel_stats: dict[str, dict[str, object]] = {}
    cast_cuda_graphs_kernel_stats: dict[str, dict[str, object]] = {}


RUNS_AS_EAGER = "the .cast holds no kernel for eager use on this device, so the model runs as eager"
DRAWS_RANDOM = ("the model draws random numbers (dropout left in training mode, torch.rand*): eager and the "
                ".cast are compared from the same seed, and cast.compile against torch.compile alone, whose "
                "draws differ from eager's; call model.eval() in get_model() unless the randomness is meant")


def mode_rows(e: EndToEnd) -> list[tuple[str, float | None, float | None, str]]:
    """(variant, ms, speedup over eager, parity) per measured deployment mode."""
    rows = [("eager", e.eager_ms, 1.0, "reference"),
            (".cast (eager, guards on)", e.cast_ms, e.cast_speedup, parity_word(e))]
    graph_modes = measured_graph_modes(e)
    if "compiled" in graph_modes:
        rows += [("torch.compile", e.compile_ms, e.compile_speedup, _sci_word(e.compile_parity_rel_error)),
                 ("cast.compile", e.cast_compile_ms if e.cast_compile_kernels else e.compile_ms,
                  e.cast_compile_speedup if e.cast_compile_kernels else e.compile_speedup,
                  _compiled_parity(e.cast_compile_kernels, e.cast_compile_parity_ok))]
    if "cuda_graphs" in graph_modes:
        rows += [("torch.compile reduce-overhead", e.cuda_graphs_ms, e.cuda_graphs_speedup, "—"),
                 ("cast.compile reduce-overhead",
                  e.cast_cuda_graphs_ms if e.cast_cuda_graphs_kernels else e.cuda_graphs_ms,
                  e.cast_cuda_graphs_speedup if e.cast_cuda_graphs_kernels else e.cuda_graphs_speedup,
                  _compiled_parity(e.cast_cuda_graphs_kernels, e.cast_cuda_graphs_parity_ok))]
    return rows


def measured_graph_modes(e: EndToEnd) -> list[str]:
    """The compiled modes (:data:`GRAPH_MODE_FIELDS`) with figures, in their rows' order."""
    modes = ["compiled"] if e.compile_ms is not None or e.cast_compile_ms is not None else []
    return modes + (["cuda_graphs"] if e.cuda_graphs_ms is not None else [])


def _compiled_parity(kernels: int | None, ok: bool | None) -> str:
    if not kernels:
        return "no kernel: as torch.compile"
    return "not judged" if ok is None else "ok" if ok else "MISMATCH"


def _sci_word(value: float | None) -> str:
    return "—" if value is None else f"departs {value:.1e}"


def carried_figures_words(e: EndToEnd) -> str:
    """Where torch.compile's figures come from an earlier measurement, and the eager they were timed against."""
    eager = "" if e.graph_figures_eager_ms is None else f" ({number(e.graph_figures_eager_ms, 'ms')})"
    return (f"torch.compile's figures ({', '.join(e.graph_figures_carried)}) are from the first measurement, each "
            f"speedup against the eager timed beside it{eager}: no kernel served those graphs afterwards")


def end_to_end_line(e: EndToEnd, width: int = COLUMNS) -> str:
    """For the terminal: eager against the .cast and the parity verdict, then a line per compiled pair,
    each wrapped at ``width`` with its continuation indented under it."""
    if e.cast_kernels == 0:
        cast = f"eager {number(e.eager_ms, 'ms')}; {RUNS_AS_EAGER}"
    else:
        cast = (f"eager {number(e.eager_ms, 'ms')}, .cast {number(e.cast_ms, 'ms')} (x{e.cast_speedup or 0:.2f}"
                f"{speedup_interval_words(e)}, same interleaved series)")
    parity = (f"parity {parity_word(e)} (max rel error {scientific(e.parity_max_rel_error)}, "
              f"tolerance {scientific(e.parity_tolerance)})")
    note = f"; {e.parity_note}" if e.parity_note else ""
    lines = [f"end to end (guards on): {cast}, {parity}{note}"]
    if e.noisy:
        lines.append(f"  noisy: {e.noisy}")
    if e.draws_random:
        lines.append(f"  random: {DRAWS_RANDOM}")
    rows = mode_rows(e)
    for plain, with_cast, mode in zip(rows[2::2], rows[3::2], measured_graph_modes(e), strict=True):
        lines.append(f"  {plain[0]} {number(plain[1], 'ms')} (x{plain[2] or 0:.2f}), {with_cast[0]} "
                     f"{number(with_cast[1], 'ms')} (x{with_cast[2] or 0:.2f}{graph_interval_words(e, mode)}), "
                     f"parity {with_cast[3]}")
        if within := graph_noise_words(e, mode):
            lines.append(f"    within noise: {within}")
    if e.graph_figures_carried:
        lines.append(f"  {carried_figures_words(e)}")
    return "\n".join(textwrap.fill(line, width, subsequent_indent=" " * (len(line) - len(line.lstrip()) + 4),
                                    break_on_hyphens=False) for line in lines)


def graph_noise_words(e: EndToEnd, mode: str) -> str:
    """Why cast.compile's difference from torch.compile in ``mode`` says nothing (empty where it
    does, or no kernel served the mode): where the two alternated, the 95% interval of the speedup
    holds 1; where they were timed one after the other, torch.compile alone, timed before and
    after, moved at least as far as the difference."""
    pair = _timed_pair(e, mode)
    if pair is None:
        return ""
    _, plain, cast = GRAPH_MODE_FIELDS[mode]
    plain_ms, cast_ms = pair
    interval, drift = getattr(e, f"{cast}_interval"), getattr(e, f"{plain}_drift")
    if interval:
        low, high = interval
        return (f"cast.compile's speedup over torch.compile, {plain_ms / cast_ms:.2f}x, has a 95% interval of "
                f"{low:.2f}x to {high:.2f}x over interleaved rounds") if low <= 1 <= high else ""
    difference = abs(cast_ms / plain_ms - 1)
    if drift is None or difference > drift:
        return ""
    return (f"cast.compile differs from torch.compile by {difference:.1%}, and torch.compile alone moved "
            f"{drift:.1%} between its timings before and after cast.compile's")


def graph_interval_words(e: EndToEnd, mode: str) -> str:
    """``", 1.08x torch.compile (95% CI 1.05-1.11, interleaved)"`` where the pair alternated."""
    pair, interval = _timed_pair(e, mode), getattr(e, f"{GRAPH_MODE_FIELDS[mode][2]}_interval")
    if pair is None or not interval:
        return ""
    return f", {pair[0] / pair[1]:.2f}x torch.compile (95% CI {interval[0]:.2f}-{interval[1]:.2f}, interleaved)"


def _timed_pair(e: EndToEnd, mode: str) -> tuple[float, float] | None:
    """torch.compile alone's ms and cast.compile's in ``mode``, where kernels served it and both were timed."""
    _, plain, cast = GRAPH_MODE_FIELDS[mode]
    plain_ms, cast_ms = getattr(e, f"{plain}_ms"), getattr(e, f"{cast}_ms")
    if not getattr(e, f"{cast}_kernels") or not plain_ms or not cast_ms:
        return None
    return plain_ms, cast_ms


def speedup_interval_words(e: EndToEnd) -> str:
    """``", 95% CI 1.07-1.11"`` where the interleaved rounds gave an interval."""
    if not e.cast_speedup_interval:
        return ""
    low, high = e.cast_speedup_interval
    return f", 95% CI {low:.2f}-{high:.2f}"


def parity_word(e2e: EndToEnd) -> str:
    return "not judged" if e2e.parity_ok is None else "ok" if e2e.parity_ok else "MISMATCH"


def scientific(value: float | None) -> str:
    """An error figure for tables and lines; "—" where it was not measured."""
    return "—" if value is None else f"{value:.2e}"


def number(value: float | None, unit: str = "") -> str:
    """A figure in its unit (``%``, ``x``, ``ms``) for tables and lines; "—" where it was not measured."""
    if value is None:
        return "—"
    if unit == "%":
        return f"{value:.0f}%"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "ms":
        return f"{value:.3f} ms"
    return f"{value:.4g}"


def spread_number(median: float | None, spread: float | None) -> str:
    """A timed median and its interquartile range, ``500 ± 5``; "—" for either one not measured."""
    if median is None:
        return number(None)
    return f"{number(median)} ± {number(spread)}"


def is_slower(e2e: EndToEnd) -> bool:
    """Slower with the .cast by more than two medians of the same model differ run to run."""
    return bool(e2e.measured and e2e.eager_ms and e2e.cast_ms
                and e2e.cast_ms > e2e.eager_ms * (1 + SLOWER_TOLERANCE))


def breaks_parity(e2e: EndToEnd) -> bool:
    """The model's output with the .cast departed from eager past the parity tolerance, or it raised."""
    return bool(e2e.measured and (e2e.parity_ok is False or e2e.cast_error))


def graph_mode_fails(e2e: EndToEnd, mode: str) -> str:
    """Why ``cast.compile`` in ``mode`` (``compiled``: torch.compile's default, ``cuda_graphs``:
    ``mode="reduce-overhead"``) does not earn its kernels against torch.compile alone in the same
    mode: it raised, moved the output, or ran no faster (empty when it beat it, was not measured,
    or no kernel served)."""
    where, plain, cast = GRAPH_MODE_FIELDS[mode]
    if not e2e.measured or not getattr(e2e, f"{cast}_kernels"):
        return ""
    return compiled_worse(getattr(e2e, f"{cast}_error"), getattr(e2e, f"{cast}_parity_rel_error"),
                          getattr(e2e, f"{cast}_parity_ok"), getattr(e2e, f"{cast}_ms"), getattr(e2e, f"{plain}_ms"),
                          where, getattr(e2e, f"{cast}_interval"))


def compiled_worse(error: str, departure: float | None, parity_ok: bool | None, cast_ms: float | None,
                   plain_ms: float | None, where: str = "", interval: list[float] | None = None) -> str:
    """Why a model compiled with the kernels is not better than compiled without them: it raised,
    its output departed from eager past the tolerance (``parity_ok`` False), it ran slower than
    torch.compile alone, or no faster past measurement noise (where the two alternated, the 95%
    ``interval`` of the speedup reaches 1; else the medians differ by less than
    :data:`SLOWER_TOLERANCE`). Empty when the kernels earn their place in the graphs."""
    if error:
        return f"the compiled model{where} raised with the kernels: {error}"
    if parity_ok is False:
        return f"the compiled model's output{where} with the kernels departed from eager by {departure:.2e}"
    if not cast_ms or not plain_ms:
        return ""
    against = f"{cast_ms:.3f} ms against {plain_ms:.3f} ms for torch.compile alone"
    if cast_ms > plain_ms * (1 + SLOWER_TOLERANCE):
        return f"the compiled model{where} ran slower with the kernels ({against})"
    beats = interval[0] > 1.0 if interval else cast_ms * (1 + SLOWER_TOLERANCE) < plain_ms
    if not beats:
        spread = f"; the speedup's 95% interval {interval[0]:.2f}x-{interval[1]:.2f}x holds 1" if interval else ""
        return f"the compiled model{where} {NO_FASTER} ({against}{spread})"
    return ""


#: Per compiled mode, the figures of torch.compile alone, which no kernel changes.
PLAIN_FIGURES = {"compiled": ("compile_ms", "compile_speedup", "compile_parity_rel_error", "compile_error",
                              "compile_drift"),
                 "cuda_graphs": ("cuda_graphs_ms", "cuda_graphs_speedup", "cuda_graphs_drift")}


def carry_graph_figures(e2e: EndToEnd, earlier: EndToEnd, modes: Collection[str]) -> EndToEnd:
    """``e2e`` with torch.compile's figures in ``modes`` taken from ``earlier`` (where no kernel
    serves those modes any more, compiling the model again would only measure torch.compile again)."""
    carried = [m for m in modes if getattr(earlier, PLAIN_FIGURES[m][0]) is not None]
    if not e2e.measured or not carried:
        return e2e
    update: dict[str, object] = {name: getattr(earlier, name) for m in carried for name in PLAIN_FIGURES[m]}
    return e2e.model_copy(update=update | {"graph_figures_carried": carried,
                                           "graph_figures_eager_ms": earlier.eager_ms})


def prune_reason(e2e: EndToEnd) -> str:
    if e2e.cast_error:
        return f"left on eager: the model raised with the .cast applied: {e2e.cast_error}"
    if breaks_parity(e2e):
        return (f"left on eager: the model's output with the .cast departed from eager by "
                f"{e2e.parity_max_rel_error:.2e} (tolerance {e2e.parity_tolerance:.2e})")
    return (f"left on eager: the model ran slower with the .cast ({e2e.cast_ms:.3f} ms against "
            f"{e2e.eager_ms:.3f} ms eager) and this op's kernels were estimated to save the least")


def measure_end_to_end(config: RunConfig, cast_path: Path, backend: str, modes: Collection[str] = ("compiled",),
                       noise_rel_error: float | None = None, prune_graphs: int = 0) -> EndToEnd:
    """Run :mod:`forge_service.e2e` in a child process; a failure is reported, not raised.

    ``modes`` are measured besides eager (``compiled``, ``cuda_graphs``); ``noise_rel_error`` is
    torch.compile's departure from eager from an earlier measurement, for the parity verdict of
    a measurement that does not compile. With ``prune_graphs`` the child leaves up to that many
    kernels out of each compiled mode, weakest first, while the compiled model is worse with them
    (``cast_compile_pruned``, ``cast_cuda_graphs_pruned``), and starts no compilation that would
    likely carry it past :data:`CHILD_DEADLINE_S` (the kernels it would have judged leave that mode).
    """
    checked = ", ".join(MODE_PAIRS[m] for m in ["eager", *modes] if m in MODE_PAIRS)
    announce(f"measuring the model end to end with {cast_path.name}: {checked}", log)
    cmd = [sys.executable, "-m", "forge_service.e2e", "--model", config.model_spec, "--cast", str(cast_path),
           "--device", backend, "--grad-mode", config.grad_mode, "--modes", ",".join(["eager", *modes]),
           "--deadline-s", str(CHILD_DEADLINE_S)]
    if noise_rel_error is not None:
        cmd += ["--noise-rel-error", repr(noise_rel_error)]
    if prune_graphs and modes:
        cmd += ["--prune-graphs", str(prune_graphs)]
    outcome = run_reporting(cmd, E2E_TIMEOUT_S, lambda step: announce(f"end to end: {step}", log),
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if outcome.timed_out:
        e2e = EndToEnd(measured=False, error=f"end-to-end measurement exceeded {E2E_TIMEOUT_S} s")
    elif outcome.returncode == 0 and outcome.stdout.strip():
        e2e = EndToEnd.model_validate_json(outcome.stdout.strip().splitlines()[-1])
    else:
        tail = outcome.stderr_tail or outcome.stdout.strip().splitlines()[-3:]
        e2e = EndToEnd(measured=False, error=" | ".join(tail) or f"exit code {outcome.returncode}")
    if e2e.measured:
        count = e2e.cast_kernels or 0
        announce(f"measured {cast_path.name} ({count} kernel{'' if count == 1 else 's'}): {end_to_end_line(e2e)}", log)
    else:
        announce(f"the end-to-end check of {cast_path.name} did not complete: {e2e.error}", log)
    return e2e
