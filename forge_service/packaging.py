"""The run's ``.cast``: its best kernels, each kept in a deployment mode only where the model gains.

A kernel's worth differs by mode: eager calls pay a guard on every call; in a compiled graph it
stands between inductor's fused kernels; captured in CUDA graphs (``mode="reduce-overhead"``) it
no longer saves launch costs that the graph already removed. So each mode (``eager``,
``compiled``, ``cuda_graphs``) is measured end to end and pruned on its own while the model in
that mode raises, departs from eager or runs slower with the kernels. Eager use is pruned one op
at a time (an op found to break the model on its own goes first), since a guard serves all of an
op's kernels; compiled graphs choose a kernel per call as they are traced, so there one kernel
leaves at a time, the least faster than eager first, and an op's winners stay where its losers go
(the first measurement's child does this itself, compiling the model again in one process);
kernels of pointwise work, which inductor fuses, are left out of them before measuring.
A mode still failing after that keeps no kernel, so a .cast never fails its own check. The
manifest records every verdict.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_service.config import RunConfig
from forge_service.end_to_end import (
    GRAPH_MODE_FIELDS,
    EndToEnd,
    breaks_parity,
    carry_graph_figures,
    graph_mode_fails,
    is_slower,
    measure_end_to_end,
    prune_reason,
)
from forge_service.inductor_fusion import FUSED_REASON, fused_by_inductor
from forge_service.phase_events import announce
from forge_service.store import RunStore, package_inputs
from kforge_domain.card import OperatorCard

if TYPE_CHECKING:
    from packager.manifest import CastManifest

log = logging.getLogger(__name__)

MAX_PRUNED_OPS = 4
#: Why a compiled mode's pruning chose the kernel it left out.
WEAKEST = "of the kernels left, this one was the least faster than eager"
GRAPH_MODES = tuple(GRAPH_MODE_FIELDS)
#: The report's field of the ops each mode left out.
PRUNED_FIELDS = {"eager": "pruned_ops", "compiled": "pruned_compiled_ops", "cuda_graphs": "pruned_cuda_graphs_ops"}
#: The report's field saying a compiled mode's verdicts come from a measurement.
MEASURED_FIELDS = {"compiled": "compiled_measured", "cuda_graphs": "cuda_graphs_measured"}


def kernel_key(op: str, card_id: str) -> str:
    """How a compiled mode names the one kernel it leaves out, where eager names the whole op."""
    return f"{op} (card {card_id})"


@dataclass
class Pruning:
    """Per mode, the ops left out of it and why; and which compiled modes were measured (a kernel
    serves a compiled mode only where that mode was measured and kept it)."""

    measured: tuple[str, ...] = ()
    excluded: dict[str, dict[str, str]] = field(default_factory=lambda: {m: {} for m in PRUNED_FIELDS})

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> Pruning:
        return cls(measured=tuple(m for m, name in MEASURED_FIELDS.items() if report.get(name)),
                   excluded={m: dict(report.get(name) or {}) for m, name in PRUNED_FIELDS.items()})

    def report_fields(self) -> dict[str, Any]:
        """The :class:`~forge_service.report.RunReport` fields that record this pruning."""
        return ({name: dict(self.excluded[m]) for m, name in PRUNED_FIELDS.items()}
                | {name: m in self.measured for m, name in MEASURED_FIELDS.items()})

    def reason(self, mode: str, op: str, card_id: str) -> str:
        """Why ``mode`` leaves out the kernel of card ``card_id`` (for ``op``); empty if it keeps it."""
        excluded = self.excluded[mode]
        return excluded.get(op) or excluded.get(kernel_key(op, card_id), "")

    def measured_exclusions(self, mode: str) -> int:
        """How many exclusions from ``mode`` a measurement decided (pointwise work leaves unmeasured)."""
        return sum(why != FUSED_REASON for why in self.excluded[mode].values())

    def leave_to_inductor(self, mode: str, key: str, why: str) -> None:
        """A measurement found compiled ``mode`` worse with the kernel ``key`` (:func:`kernel_key`),
        the weakest of those left: the mode leaves it out."""
        self.excluded[mode][key] = f"left to inductor: {why}; {WEAKEST}"
        announce(f"pruning {key} from {mode} use: {self.excluded[mode][key]}", log)

    def snapshot(self) -> dict[str, dict[str, str]]:
        return {m: dict(ops) for m, ops in self.excluded.items()}

    def leave_out_everything(self, manifest: CastManifest, modes: Collection[str], why: str) -> None:
        """Every kernel of ``manifest`` leaves ``modes`` (ops already out keep their first reason)."""
        for kernel in manifest.kernels:
            for mode in modes:
                self.excluded[mode].setdefault(kernel.op, why)


def write_cast(store: RunStore, min_speedup: float | None, path: Path, pruning: Pruning | None = None
               ) -> CastManifest:
    """Build the run's .cast at ``path`` from its best kernels, with their verdicts per mode.

    ``pruning`` defaults to what the run's report found, so an exported .cast is the one that
    was measured.
    """
    from packager.format import FallbackEntry, build_cast
    from packager.manifest import KEPT, PRUNED, UNMEASURED, ModeVerdict

    if pruning is None:
        pruning = Pruning.from_report(_stored_report(store))
    model, kernels, fallbacks = package_inputs(store.run_dir)
    config = RunConfig.model_validate_json(store.run_row()["config_json"])
    verdicts: dict[tuple[str, str], ModeVerdict] = {}
    for k in kernels:
        for mode in pruning.excluded:
            reason = pruning.reason(mode, k.op, k.card_id)
            verdicts[(k.card_id, mode)] = (
                ModeVerdict(PRUNED, reason) if reason
                else ModeVerdict(KEPT) if mode == "eager" or mode in pruning.measured else ModeVerdict(UNMEASURED))
    eager_out = pruning.excluded["eager"]
    kept = [k for k in kernels
            if k.op not in eager_out or any(verdicts[(k.card_id, m)].verdict == KEPT for m in GRAPH_MODES)]
    kept_ids = {k.card_id for k in kept}
    fallbacks = fallbacks + [
        FallbackEntry(k.card_id, k.op, eager_out[k.op], calls=OperatorCard.from_json(k.card_json).call_count)
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
        if k.mode_verdict(mode).verdict == PRUNED or k.op in excluded:
            continue
        guard_us = k.guard_cost_us if mode == "eager" else 0.0
        saving[k.op] = saving.get(k.op, 0.0) + saving_us(k.card, k.eager_latency_us, k.latency_us, guard_us)
    return min(saving, key=lambda op: saving[op]) if saving else None


def weakest_graph_kernel(manifest: CastManifest, mode: str, excluded: Collection[str] = ()) -> str | None:
    """Of the kernels serving compiled ``mode``, the :func:`kernel_key` of the one least faster than
    eager: the likeliest to lose to what inductor makes of the same call."""
    from packager.manifest import PRUNED

    serving = [k for k in manifest.kernels if k.mode_verdict(mode).verdict != PRUNED
               and k.op not in excluded and kernel_key(k.op, k.card_id) not in excluded]
    weakest = min(serving, key=lambda k: k.speedup, default=None)
    return kernel_key(weakest.op, weakest.card_id) if weakest is not None else None


def _losing_modes(e2e: EndToEnd, graph_modes: Collection[str]) -> dict[str, str]:
    """Per mode, why the model in it is worse with the kernels than without (empty: it is not)."""
    losing = {"eager": prune_reason(e2e) if is_slower(e2e) or breaks_parity(e2e) else ""}
    for mode in graph_modes:
        why = graph_mode_fails(e2e, mode)
        losing[mode] = f"left to inductor: {why}" if why else ""
    return losing


def package_and_measure(store: RunStore, config: RunConfig, path: Path, backend: str
                        ) -> tuple[CastManifest, EndToEnd, Pruning]:
    """The .cast, its end-to-end figures, and the pruning per mode that measuring the model found."""
    modes = [] if config.skip_compile_baseline else ["compiled"] + (["cuda_graphs"] if config.cuda_graphs else [])
    pruning = Pruning(measured=tuple(modes))
    manifest = write_cast(store, None, path, pruning)
    if _leave_pointwise_to_inductor(manifest, modes, pruning):
        manifest = write_cast(store, None, path, pruning)
    e2e = measure_end_to_end(config, path, backend, modes, prune_graphs=MAX_PRUNED_OPS)
    if not e2e.measured and manifest.kernels:
        return (*_without_kernels(store, config, path, backend, modes, pruning, e2e), pruning)
    noise = e2e.compile_parity_rel_error
    first = e2e  # its compiled figures stand until compiled use changes
    if _take_graph_pruning(manifest, e2e, modes, pruning):
        manifest = write_cast(store, None, path, pruning)
    measured_with = pruning.snapshot()  # the exclusions the last measurement of every mode was made with
    manifest, e2e = _prune_eager(store, config, path, backend, pruning, manifest, e2e, noise)
    e2e = first
    while failing := {m: why for m in modes if (why := graph_mode_fails(e2e, m))}:
        pruned = []
        for mode, why in failing.items():
            key = weakest_graph_kernel(manifest, mode, pruning.excluded[mode])
            if key is None or pruning.measured_exclusions(mode) >= MAX_PRUNED_OPS:
                continue
            pruning.leave_to_inductor(mode, key, why)
            pruned.append(mode)
        if not pruned:
            break
        manifest = write_cast(store, None, path, pruning)
        e2e = _measure_serving(config, path, backend, manifest, modes, noise, first)
        measured_with = pruning.snapshot()
    for mode in modes:
        if why := graph_mode_fails(e2e, mode):
            pruning.leave_out_everything(manifest, [mode], f"left to inductor: {why}")
            announce(f"{mode} graphs still worse with the kernels: they use none", log)
    if measured_with != pruning.snapshot():  # the .cast changed since every mode was last measured
        manifest = write_cast(store, None, path, pruning)
        e2e = _measure_serving(config, path, backend, manifest, modes, noise, first)
    # The final measurement decides: a mode that still loses there keeps no kernel, measured once more.
    still = {m: why for m, why in _losing_modes(e2e, modes).items() if why}
    if still and e2e.measured:
        for mode, why in still.items():
            pruning.leave_out_everything(manifest, [mode], f"{why} (in the final check)")
        announce(f"the final check still finds the .cast worse ({', '.join(still)}): those modes use no kernel", log)
        manifest = write_cast(store, None, path, pruning)
        e2e = _measure_serving(config, path, backend, manifest, modes, noise, first)
    if not e2e.measured and manifest.kernels:
        manifest, e2e = _without_kernels(store, config, path, backend, modes, pruning, e2e)
    return manifest, e2e, pruning


#: Per compiled mode, the end-to-end field naming the kernels the check's child left out of it.
CHILD_PRUNED_FIELDS = {"compiled": "cast_compile_pruned", "cuda_graphs": "cast_cuda_graphs_pruned"}


def _take_graph_pruning(manifest: CastManifest, e2e: EndToEnd, modes: Collection[str], pruning: Pruning) -> bool:
    """Records the kernels the measurement's child left out of compiled ``modes`` (it compiled the
    model again without each, weakest first, while the model was worse with it); whether any."""
    ops = {k.card_id: k.op for k in manifest.kernels}
    taken = False
    for mode in modes:
        for card_id, why in getattr(e2e, CHILD_PRUNED_FIELDS[mode]).items():
            pruning.leave_to_inductor(mode, kernel_key(ops.get(card_id, "?"), card_id), why)
            taken = True
    return taken


def _leave_pointwise_to_inductor(manifest: CastManifest, modes: Collection[str], pruning: Pruning) -> bool:
    """Leaves every kernel of pointwise work out of compiled ``modes`` (:mod:`inductor_fusion`);
    whether any left."""
    fused = [k for k in manifest.kernels if fused_by_inductor(k.card)]
    for kernel in fused:
        for mode in modes:
            pruning.excluded[mode][kernel_key(kernel.op, kernel.card_id)] = FUSED_REASON
    if fused and modes:
        announce(f"{len(fused)} kernels of pointwise work left to inductor in compiled graphs", log)
    return bool(fused and modes)


def _measure_serving(config: RunConfig, path: Path, backend: str, manifest: CastManifest, modes: Collection[str],
                     noise: float | None, first: EndToEnd) -> EndToEnd:
    """The .cast at ``path`` measured end to end in eager and in each of ``modes`` that some kernel
    of it still serves; torch.compile's figures in the others are the ``first`` measurement's."""
    from packager.manifest import KEPT

    serving = [m for m in modes if any(k.mode_verdict(m).verdict == KEPT for k in manifest.kernels)]
    e2e = measure_end_to_end(config, path, backend, serving, noise_rel_error=noise)
    return carry_graph_figures(e2e, first, [m for m in modes if m not in serving])


def _prune_eager(store: RunStore, config: RunConfig, path: Path, backend: str, pruning: Pruning,
                 manifest: CastManifest, e2e: EndToEnd, noise: float | None) -> tuple[CastManifest, EndToEnd]:
    """Eager use pruned one op at a time (those that break the model on their own first), measured
    in eager mode only; a departure that survives it leaves every kernel out of eager calls."""
    excluded = pruning.excluded["eager"]
    while (is_slower(e2e) or breaks_parity(e2e)) and len(excluded) < MAX_PRUNED_OPS:
        culprits = dict(e2e.failing_ops) or {op: prune_reason(e2e)
                                             for op in [least_saving_op(manifest, "eager", excluded)] if op}
        if not culprits:
            break
        for op, why in culprits.items():
            excluded[op] = f"left on eager: {why}" if e2e.failing_ops else why
            announce(f"pruning {op} from eager use: {excluded[op]}", log)
        manifest = write_cast(store, None, path, pruning)
        e2e = measure_end_to_end(config, path, backend, [], noise_rel_error=noise)
    if breaks_parity(e2e):
        pruning.leave_out_everything(manifest, ["eager"], prune_reason(e2e))
        announce("eager output parity still broken: eager calls use no kernel", log)
    return manifest, e2e


def _without_kernels(store: RunStore, config: RunConfig, path: Path, backend: str, modes: list[str],
                     pruning: Pruning, failed: EndToEnd) -> tuple[CastManifest, EndToEnd]:
    """A check that could not complete with the kernels (the child crashed or timed out) ships none of them."""
    manifest = write_cast(store, None, path, pruning)
    why = f"left out: the end-to-end check did not complete with the kernels: {failed.error}"
    pruning.leave_out_everything(manifest, list(PRUNED_FIELDS), why)
    announce(f"end-to-end check failed with the kernels; the .cast keeps none: {failed.error}", log)
    manifest = write_cast(store, None, path, pruning)
    return manifest, measure_end_to_end(config, path, backend, modes)
