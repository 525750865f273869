"""What the forge hands the packager, and ``build_cast`` which turns it into a .cast archive.

Archive layout::

    index.json                          format version, sha256 of every file, of the list, signature
    manifest.json                       CastManifest: model, archs, toolchains, kernels, fallbacks
    kernels/<card_id>/<arch>/source.cpp (or .cu) the kernel's source
    kernels/<card_id>/<arch>/kernel.so  the compiled artifact exporting kf_launch

A kernel is packaged only if it is faster than eager *with the guard's cost added*:
``eager_latency_us / (latency_us + guard_cost_us)`` must exceed 1 and reach ``min_speedup``;
otherwise its card is listed as a fallback with the numbers that ruled it out.

The dispatch is installed per op, so every call of that op pays for a look at the guard, the
calls of cards left on eager too. Per op (and arch), the time the kernels save over their
calls must exceed what the misses cost (the other cards' calls times the guard's cost);
otherwise every kernel of that op becomes a fallback, and the op keeps running untouched.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import torch

from kforge_domain.verdict import RunFigures
from packager.archive import FORMAT_VERSION, write_archive
from packager.errors import CastBuildError
from packager.guard_cost import guard_cost_us
from packager.manifest import (
    AUDIT_CLASSES,
    GRAPH_MODES,
    KEPT,
    KERNEL_KINDS,
    MANIFEST_FILE,
    PRUNED,
    CastManifest,
    FallbackRecord,
    KernelRecord,
    ModelIdentity,
    ModeVerdict,
    arch_matches_backend,
    is_safe_name,
)
from packager.variant import VariantKey

__all__ = ["FallbackEntry", "KernelEntry", "ModeVerdict", "ModelIdentity", "build_cast"]


@dataclass(frozen=True)
class KernelEntry:
    """One winning kernel of a run, for one card on one architecture."""

    card_id: str
    kind: str  # "aten" | "module"
    op: str
    card_json: str  # kforge_domain.card.OperatorCard JSON
    backend: str  # "cpu" | "cuda"
    arch: str  # "cpu-x86_64" | "sm_90" ...
    audit_class: str  # "custom" | "backend_wrapper"
    source: str
    artifact: bytes  # compiled shared object exporting kf_launch
    eager_latency_us: float
    eager_spread_us: float | None
    latency_us: float
    latency_spread_us: float | None
    speedup: float
    rel_l2_error: float | None
    max_scaled_error: float | None
    source_sha256: str
    compiler_flags: str
    toolchain: str
    candidate_id: str
    workspace_bytes: int = 0  # what the kernel's kf_workspace_bytes returns; the guard's cost includes it

    @classmethod
    def from_run(cls, run: RunFigures, *, card_id: str, kind: str, op: str, card_json: str, backend: str, arch: str,
                 audit_class: str, source: str, artifact: bytes, source_sha256: str, compiler_flags: str,
                 toolchain: str, candidate_id: str) -> KernelEntry:
        """The entry of a passing run's kernel: the verdict's figures, with the kernel's identity.

        A figure the run did not measure becomes 0, which :func:`build_cast` refuses.
        """
        return cls(
            card_id=card_id, kind=kind, op=op, card_json=card_json, backend=backend, arch=arch,
            audit_class=audit_class, source=source, artifact=artifact,
            eager_latency_us=run.eager_latency_us or 0.0, eager_spread_us=run.eager_spread_us,
            latency_us=run.latency_us or 0.0, latency_spread_us=run.latency_spread_us, speedup=run.speedup or 0.0,
            rel_l2_error=run.rel_l2_error, max_scaled_error=run.max_scaled_error, source_sha256=source_sha256,
            compiler_flags=compiler_flags, toolchain=toolchain, candidate_id=candidate_id,
            workspace_bytes=run.workspace_bytes,
        )


@dataclass(frozen=True)
class FallbackEntry:
    """A card the run leaves on eager PyTorch."""

    card_id: str
    op: str
    reason: str
    calls: int = 0  # the card's captured call count: each of its calls meets the op's guard


def _producer() -> str:
    try:
        return f"kernel-forge {metadata.version('kernel-forge')}"
    except metadata.PackageNotFoundError:
        return "kernel-forge (unknown version)"


def _parse_card(entry: KernelEntry, where: str) -> dict[str, Any]:
    try:
        card = json.loads(entry.card_json)
    except json.JSONDecodeError as exc:
        raise CastBuildError(f"{where}: card_json is not valid JSON: {exc}") from exc
    if not isinstance(card, dict):
        raise CastBuildError(f"{where}: card_json is not a JSON object")
    for name in ("id", "kind", "op", "key", "inputs", "outputs"):
        if name not in card:
            raise CastBuildError(f"{where}: the card has no {name!r}")
    if (card["id"], card["kind"], card["op"]) != (entry.card_id, entry.kind, entry.op):
        raise CastBuildError(f"{where}: the card's id/kind/op do not match the entry's")
    try:
        key_id = VariantKey.from_json(card["key"]).id
    except (KeyError, TypeError, ValueError) as exc:
        raise CastBuildError(f"{where}: the card's key is malformed: {exc}") from exc
    if key_id != entry.card_id:
        raise CastBuildError(f"{where}: the card's key has id {key_id}, not {entry.card_id}")
    return card


def _check_entry(entry: KernelEntry, where: str) -> dict[str, Any]:
    if not is_safe_name(entry.card_id):
        raise CastBuildError(f"{where}: card_id {entry.card_id!r} is not a safe name")
    if entry.kind not in KERNEL_KINDS:
        raise CastBuildError(f"{where}: kind {entry.kind!r} is not one of {KERNEL_KINDS}")
    if entry.audit_class not in AUDIT_CLASSES:
        raise CastBuildError(f"{where}: audit class {entry.audit_class!r} is not one of {AUDIT_CLASSES}")
    if not arch_matches_backend(entry.arch, entry.backend):
        raise CastBuildError(f"{where}: arch {entry.arch!r} does not fit backend {entry.backend!r}")
    if hashlib.sha256(entry.source.encode()).hexdigest() != entry.source_sha256:
        raise CastBuildError(f"{where}: source_sha256 does not match the source")
    if not entry.artifact:
        raise CastBuildError(f"{where}: the compiled artifact is empty")
    for name in ("eager_latency_us", "latency_us", "speedup"):
        value = getattr(entry, name)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise CastBuildError(f"{where}: {name} must be a positive finite number, got {value!r}")
    return _parse_card(entry, where)


def _record(entry: KernelEntry, card: dict[str, Any], guard_us: float, effective: float,
            verdicts: Mapping[str, ModeVerdict]) -> KernelRecord:
    folder = f"kernels/{entry.card_id}/{entry.arch}"
    return KernelRecord(
        card_id=entry.card_id, kind=entry.kind, op=entry.op, backend=entry.backend, arch=entry.arch,
        audit_class=entry.audit_class, card=card,
        source_path=f"{folder}/source.{'cu' if entry.backend == 'cuda' else 'cpp'}",
        artifact_path=f"{folder}/kernel.so",
        eager_latency_us=entry.eager_latency_us, eager_spread_us=entry.eager_spread_us,
        latency_us=entry.latency_us, latency_spread_us=entry.latency_spread_us, speedup=entry.speedup,
        guard_cost_us=round(guard_us, 3), effective_speedup=round(effective, 4),
        rel_l2_error=entry.rel_l2_error, max_scaled_error=entry.max_scaled_error,
        source_sha256=entry.source_sha256, compiler_flags=entry.compiler_flags, toolchain=entry.toolchain,
        candidate_id=entry.candidate_id, **verdicts,
    )


class _Candidate(NamedTuple):
    entry: KernelEntry
    card: dict[str, Any]
    guard_us: float
    effective: float


def _calls(card: Mapping[str, Any]) -> int:
    """A card's captured call count (at least 1: a card exists because it was called)."""
    count = card.get("call_count", 0)
    return max(int(count), 1) if isinstance(count, (int, float)) else 1


def saving_us(card: Mapping[str, Any], eager_us: float, kernel_us: float, guard_us: float) -> float:
    """What a card's kernel is estimated to save over the card's captured calls, guard included."""
    return _calls(card) * (eager_us - kernel_us - guard_us)


def _unprofitable_ops(candidates: Sequence[_Candidate], missed_calls: Mapping[str, int]) -> dict[tuple[str, str], str]:
    """``(arch, op)`` -> why its kernels cost the model more than they save, for each such op.

    Saved: per kernel, calls x (eager - kernel - guard). Lost: the op's calls that stay on eager
    (``missed_calls``) x the guard's cost, which a miss pays too (matching, then handing the
    call back to the original kernel).
    """
    groups: dict[tuple[str, str], list[_Candidate]] = defaultdict(list)
    for candidate in candidates:
        groups[(candidate.entry.arch, candidate.entry.op)].append(candidate)
    reasons: dict[tuple[str, str], str] = {}
    for (arch, op), members in groups.items():
        saved_us = sum(saving_us(c.card, c.entry.eager_latency_us, c.entry.latency_us, c.guard_us) for c in members)
        misses = missed_calls.get(op, 0)
        lost_us = misses * max(c.guard_us for c in members)
        if saved_us <= lost_us:
            reasons[(arch, op)] = (
                f"{arch}: the kernels of {op} save {saved_us:.1f} us over their captured calls, but its {misses} "
                f"calls left on eager would pay {lost_us:.1f} us for the guard; the op stays on eager")
    return reasons


def _fallback_reason(eager: ModeVerdict, graphs: Mapping[str, ModeVerdict]) -> str:
    """Why no mode uses a kernel: eager's reason, then each compiled mode's that says more."""
    modes_by_reason: dict[str, list[str]] = defaultdict(list)
    for mode, verdict in graphs.items():
        if verdict.verdict == PRUNED and verdict.reason != eager.reason:
            modes_by_reason[verdict.reason].append(mode)
    return "; ".join([eager.reason, *(f"{' and '.join(modes)}: {why}" for why, modes in modes_by_reason.items())])


def build_cast(
    path: Path,
    model: ModelIdentity,
    kernels: Sequence[KernelEntry],
    fallbacks: Sequence[FallbackEntry],
    *,
    min_speedup: float = 1.0,
    signing_key: bytes | None = None,
    verdicts: Mapping[tuple[str, str], ModeVerdict] | None = None,
) -> CastManifest:
    """Write the .cast for a run's winning kernels to ``path`` and return its manifest.

    Every entry is checked first (a bad one raises CastBuildError naming it; nothing is
    written). ``verdicts`` gives, per ``(card_id, mode)`` with a mode of
    :data:`~packager.manifest.MODES`, what measuring the model end to end found (unmeasured where absent). Eager
    calls do not use a kernel whose speedup does not survive the guard's measured per-call cost
    or falls below ``min_speedup``, nor the kernels of an op whose calls left on eager would pay
    more for the guard than the kernels save: compiled graphs pay no guard, so such a kernel is
    still packaged when a compiled mode's verdict is kept. A kernel no mode uses becomes a fallback.
    """
    if not (math.isfinite(min_speedup) and min_speedup > 0):
        raise CastBuildError(f"min_speedup must be a positive number, got {min_speedup!r}")
    checked: list[tuple[KernelEntry, dict[str, Any]]] = []
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(kernels):
        where = f"kernel {i} ({entry.card_id} on {entry.arch})"
        if (entry.card_id, entry.arch) in seen:
            raise CastBuildError(f"{where}: a second kernel for the same card and arch")
        seen.add((entry.card_id, entry.arch))
        checked.append((entry, _check_entry(entry, where)))

    dropped = [FallbackRecord(f.card_id, f.op, f.reason) for f in fallbacks]
    missed_calls: dict[str, int] = defaultdict(int)
    for fallback in fallbacks:
        missed_calls[fallback.op] += max(fallback.calls, 0)
    given = verdicts or {}
    guard_costs: dict[tuple[str, int], float] = {}  # (card_id, workspace_bytes) -> us
    candidates: list[_Candidate] = []
    eager_pruned: dict[str, str] = {}  # card_id -> why eager calls do not use the kernel
    for entry, card in checked:
        cost_key = (entry.card_id, entry.workspace_bytes)
        if cost_key not in guard_costs:
            guard_costs[cost_key] = guard_cost_us(card, entry.workspace_bytes)
        guard_us = guard_costs[cost_key]
        effective = entry.eager_latency_us / (entry.latency_us + guard_us)
        measured = given.get((entry.card_id, "eager"))
        if measured is not None and measured.verdict == PRUNED:
            eager_pruned[entry.card_id] = measured.reason
        elif effective <= 1.0 or effective < min_speedup:
            eager_pruned[entry.card_id] = (
                f"{entry.arch}: speedup {entry.speedup:.3f}x becomes {effective:.3f}x with the guard's "
                f"{guard_us:.2f} us per call (eager {entry.eager_latency_us:.2f} us, kernel "
                f"{entry.latency_us:.2f} us); needs more than 1x and at least {min_speedup:g}x"
            )
        if entry.card_id in eager_pruned:
            missed_calls[entry.op] += _calls(card)
        candidates.append(_Candidate(entry, card, guard_us, effective))
    unprofitable = _unprofitable_ops([c for c in candidates if c.entry.card_id not in eager_pruned], missed_calls)

    records: list[KernelRecord] = []
    files: dict[str, bytes] = {}
    for candidate in candidates:
        entry, card, guard_us, effective = candidate
        reason = eager_pruned.get(entry.card_id) or unprofitable.get((entry.arch, entry.op))
        eager = ModeVerdict(PRUNED, reason) if reason else given.get((entry.card_id, "eager"), ModeVerdict())
        graphs = {mode: given.get((entry.card_id, mode), ModeVerdict()) for mode in GRAPH_MODES}
        if entry.speedup <= 1.0 or entry.speedup < min_speedup:  # slower than eager even without a guard
            slower = ModeVerdict(PRUNED, f"{entry.arch}: speedup {entry.speedup:.3f}x on its own; needs more "
                                         f"than 1x and at least {min_speedup:g}x")
            graphs = dict.fromkeys(GRAPH_MODES, slower)
        if eager.verdict == PRUNED and all(v.verdict != KEPT for v in graphs.values()):
            dropped.append(FallbackRecord(entry.card_id, entry.op, _fallback_reason(eager, graphs)))
            continue
        record = _record(entry, card, guard_us, effective, {"eager": eager, **graphs})
        files[record.source_path] = entry.source.encode()
        files[record.artifact_path] = entry.artifact
        records.append(record)

    manifest = CastManifest(
        model=model,
        producer=_producer(),
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        min_speedup=float(min_speedup),
        kernels=tuple(records),
        fallbacks=tuple(dropped),
        format_version=FORMAT_VERSION,
        archs=tuple(sorted({r.arch for r in records})),
        toolchains=tuple(sorted({r.toolchain for r in records})),
        torch_version=torch.__version__,
    )
    files[MANIFEST_FILE] = manifest.to_json().encode()
    try:
        write_archive(Path(path), files, signing_key=signing_key)
    except (OSError, ValueError) as exc:
        raise CastBuildError(f"cannot write {path}: {exc}") from exc
    return manifest
