"""``manifest.json``: what a .cast holds and how each kernel earned its place.

Per kernel: the card (its key is the guard), audit class, backend and architecture, where its
source and compiled artifact lie in the archive, eager and kernel latency with spread, the
guard's per-call cost, the speedup that survives it, numerical error, and provenance. Cards
left on eager are listed as fallbacks with the reason. Plain dataclasses and JSON: the runtime
reads this with the standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packager.archive import FORMAT_VERSION
from packager.errors import CastCorruptError, CastVersionError

MANIFEST_FILE = "manifest.json"
KERNEL_KINDS = ("aten", "module")
AUDIT_CLASSES = ("custom", "backend_wrapper")
FALLBACK_CLASS = "fallback"
# A kernel's verdict in one deployment mode, from measuring the whole model in that mode.
KEPT = "kept"
PRUNED = "pruned"
UNMEASURED = "unmeasured"
VERDICTS = (KEPT, PRUNED, UNMEASURED)
#: The deployment modes a kernel has a verdict for: eager calls, torch.compile graphs, and
#: torch.compile graphs captured in CUDA graphs (``mode="reduce-overhead"`` or ``"max-autotune"``).
MODES = ("eager", "compiled", "cuda_graphs")
GRAPH_MODES = MODES[1:]
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_CUDA_ARCH = re.compile(r"^sm_[0-9]{2,3}[a-z]?$")
_CPU_ARCH = re.compile(r"^cpu-[a-z0-9_]+$")


def is_safe_name(name: str) -> bool:
    """Names that become archive paths and file names: no separators, no ``..``."""
    return bool(_SAFE_NAME.match(name)) and name not in (".", "..")


def arch_matches_backend(arch: str, backend: str) -> bool:
    """``cpu-x86_64`` goes with backend ``cpu``, ``sm_90`` with ``cuda``."""
    pattern = _CPU_ARCH if backend == "cpu" else _CUDA_ARCH if backend == "cuda" else None
    return bool(pattern and pattern.match(arch))


@dataclass(frozen=True)
class ModelIdentity:
    """Which model and which forge run a cast was made for."""

    model_spec: str
    name: str
    run_id: str


@dataclass(frozen=True)
class ModeVerdict:
    """Whether the model, measured end to end in one deployment mode, ran better with a kernel.

    ``kept``: faster with it and outputs at parity; ``pruned``: left out of that mode, ``reason``
    says why; ``unmeasured``: the mode was not measured. Eager calls use every kernel not pruned
    (each already beat eager with its guard's cost added); compiled graphs, with or without CUDA
    graphs, use only kept ones: inductor's fusion around a kernel, and the launch cost CUDA graphs
    remove, change the kernel's worth, so each compiled mode is measured on its own.
    """

    verdict: str = UNMEASURED
    reason: str = ""


@dataclass(frozen=True)
class KernelRecord:
    """One packaged kernel: one card on one architecture."""

    card_id: str
    kind: str
    op: str
    backend: str
    arch: str
    audit_class: str
    card: dict[str, Any]
    source_path: str
    artifact_path: str
    eager_latency_us: float
    eager_spread_us: float | None
    latency_us: float
    latency_spread_us: float | None
    speedup: float
    guard_cost_us: float
    effective_speedup: float
    rel_l2_error: float | None
    max_scaled_error: float | None
    source_sha256: str
    compiler_flags: str
    toolchain: str
    candidate_id: str
    eager: ModeVerdict = field(default_factory=ModeVerdict)
    compiled: ModeVerdict = field(default_factory=ModeVerdict)
    cuda_graphs: ModeVerdict = field(default_factory=ModeVerdict)

    def mode_verdict(self, mode: str) -> ModeVerdict:
        """The verdict for one of :data:`MODES`."""
        verdict: ModeVerdict = getattr(self, mode)
        return verdict


@dataclass(frozen=True)
class FallbackRecord:
    """A card that stays on eager PyTorch, and why."""

    card_id: str
    op: str
    reason: str
    audit_class: str = FALLBACK_CLASS


@dataclass(frozen=True)
class CastManifest:
    """The parsed ``manifest.json``."""

    model: ModelIdentity
    producer: str
    created_at: str
    min_speedup: float
    kernels: tuple[KernelRecord, ...]
    fallbacks: tuple[FallbackRecord, ...]
    format_version: int = FORMAT_VERSION
    archs: tuple[str, ...] = field(default=())
    toolchains: tuple[str, ...] = field(default=())
    #: ``torch.__version__`` of the eager PyTorch every kernel was proved against ("" if not recorded).
    torch_version: str = ""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> CastManifest:
        """Parse and type-check a manifest; a malformed one raises CastCorruptError naming the field."""
        try:
            data = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CastCorruptError(f"{MANIFEST_FILE} is not valid JSON: {exc}") from exc
        reader = _Reader(data, MANIFEST_FILE)
        version = reader.get("format_version", int)
        if version != FORMAT_VERSION:
            raise CastVersionError(
                f"{MANIFEST_FILE}: format version {version} is not supported (this runtime reads {FORMAT_VERSION})"
            )
        model = _Reader(reader.get("model", dict), f"{MANIFEST_FILE}: model")
        kernels = tuple(
            _kernel_record(_Reader(k, f"{MANIFEST_FILE}: kernels[{i}]"))
            for i, k in enumerate(reader.get("kernels", list))
        )
        fallbacks = tuple(
            FallbackRecord(**_Reader(f, f"{MANIFEST_FILE}: fallbacks[{i}]").fields(FallbackRecord))
            for i, f in enumerate(reader.get("fallbacks", list))
        )
        return cls(
            model=ModelIdentity(**model.fields(ModelIdentity)),
            producer=reader.get("producer", str),
            created_at=reader.get("created_at", str),
            min_speedup=reader.get("min_speedup", float),
            kernels=kernels,
            fallbacks=fallbacks,
            format_version=version,
            archs=tuple(reader.get("archs", list)),
            toolchains=tuple(reader.get("toolchains", list)),
            torch_version=reader.get("torch_version", str) if "torch_version" in reader.data else "",
        )


def _mode_verdict(reader: _Reader, mode: str) -> ModeVerdict:
    if mode not in reader.data:
        return ModeVerdict()
    verdict = ModeVerdict(**_Reader(reader.data[mode], f"{reader.where}: {mode}").fields(ModeVerdict))
    if verdict.verdict not in VERDICTS:
        raise CastCorruptError(f"{reader.where}: {mode} verdict {verdict.verdict!r} is not one of {VERDICTS}")
    return verdict


def _kernel_record(reader: _Reader) -> KernelRecord:
    fields = reader.fields(KernelRecord)
    fields.update({mode: _mode_verdict(reader, mode) for mode in MODES})
    record = KernelRecord(**fields)
    where = reader.where
    if not is_safe_name(record.card_id):
        raise CastCorruptError(f"{where}: card_id {record.card_id!r} is not a safe name")
    if record.kind not in KERNEL_KINDS:
        raise CastCorruptError(f"{where}: kind {record.kind!r} is not one of {KERNEL_KINDS}")
    if not arch_matches_backend(record.arch, record.backend):
        raise CastCorruptError(f"{where}: arch {record.arch!r} does not fit backend {record.backend!r}")
    if record.card.get("id") != record.card_id:
        raise CastCorruptError(f"{where}: the card's id does not match card_id {record.card_id!r}")
    for name in ("key", "outputs"):
        if name not in record.card:
            raise CastCorruptError(f"{where}: the card has no {name!r}")
    return record


_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (float, int), "dict[str, Any]": (dict,),
    "float | None": (float, int, type(None)),
}


class _Reader:
    """Typed access to one JSON object, with errors that say where."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise CastCorruptError(f"{where}: expected a JSON object")
        self.data: Mapping[str, Any] = data
        self.where = where

    def get(self, name: str, kind: type) -> Any:
        if name not in self.data:
            raise CastCorruptError(f"{self.where}: missing field {name!r}")
        value: Any = self.data[name]
        allowed: tuple[type, ...] = (float, int) if kind is float else (kind,)
        if not isinstance(value, allowed) or (kind is not bool and isinstance(value, bool)):
            raise CastCorruptError(f"{self.where}: field {name!r} should be {kind.__name__}")
        return float(self.data[name]) if kind is float else value

    def fields(self, cls: type) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in self.data:
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                    continue
                raise CastCorruptError(f"{self.where}: missing field {f.name!r}")
            value = self.data[f.name]
            allowed = _TYPES.get(str(f.type), (object,))
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                raise CastCorruptError(f"{self.where}: field {f.name!r} should be {f.type}")
            out[f.name] = float(value) if isinstance(value, int) and float in allowed else value
        return out
