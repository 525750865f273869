"""The audit of a ``.cast``: which cards run custom kernels, backend wrappers or eager, and why.

Reads the archive with the packager's own verification (checksums, format version), so the
dashboard never shows a manifest the runtime would refuse.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from packager.archive import read_archive
from packager.errors import CastError
from packager.manifest import MANIFEST_FILE, CastManifest, KernelRecord

CLASS_MEANING = {
    "custom": "its own kernel",
    "backend_wrapper": "a vendor library call (cuBLAS, cuDNN, CUTLASS, ...)",
    "fallback": "eager PyTorch",
}


class CastAuditError(Exception):
    """The file is not a .cast the runtime would accept; the message says why."""


@dataclass(frozen=True)
class AuditRow:
    """One card of the package and what runs for it."""

    card_id: str
    op: str
    audit_class: str
    backend: str
    arch: str
    speedup: float | None
    effective_speedup: float | None
    why: str


@dataclass(frozen=True)
class CastAudit:
    """A package's identity and one row per card it mentions."""

    model_name: str
    model_spec: str
    run_id: str
    producer: str
    created_at: str
    min_speedup: float
    archs: tuple[str, ...]
    toolchains: tuple[str, ...]
    signed: bool
    rows: tuple[AuditRow, ...]

    def count(self, audit_class: str) -> int:
        return sum(r.audit_class == audit_class for r in self.rows)


def _kernel_reason(k: KernelRecord) -> str:
    error = f"; rel. error {k.rel_l2_error:.1e}" if k.rel_l2_error is not None else ""
    return (
        f"{CLASS_MEANING.get(k.audit_class, k.audit_class)}: eager {k.eager_latency_us:.2f} µs → "
        f"{k.latency_us:.2f} µs (×{k.speedup:.2f}), ×{k.effective_speedup:.2f} with the guard's "
        f"{k.guard_cost_us:.2f} µs per call{error}"
    )


def audit_manifest(manifest: CastManifest, signed: bool = False) -> CastAudit:
    """Rows for every packaged kernel, then every card left on eager with its reason."""
    rows = [
        AuditRow(card_id=k.card_id, op=k.op, audit_class=k.audit_class, backend=k.backend, arch=k.arch,
                 speedup=k.speedup, effective_speedup=k.effective_speedup, why=_kernel_reason(k))
        for k in manifest.kernels
    ]
    rows += [
        AuditRow(card_id=f.card_id, op=f.op, audit_class=f.audit_class, backend="", arch="", speedup=None,
                 effective_speedup=None, why=f.reason or "no kernel beat eager")
        for f in manifest.fallbacks
    ]
    return CastAudit(
        model_name=manifest.model.name, model_spec=manifest.model.model_spec, run_id=manifest.model.run_id,
        producer=manifest.producer, created_at=manifest.created_at, min_speedup=manifest.min_speedup,
        archs=manifest.archs, toolchains=manifest.toolchains, signed=signed, rows=tuple(rows),
    )


def audit_cast(path: Path) -> CastAudit:
    """Verify and read the .cast at ``path``."""
    try:
        archive = read_archive(path)
        if MANIFEST_FILE not in archive.files:
            raise CastAuditError(f"{path}: {MANIFEST_FILE} is missing")
        manifest = CastManifest.from_json(archive.files[MANIFEST_FILE])
    except CastError as exc:
        raise CastAuditError(str(exc)) from exc
    return audit_manifest(manifest, signed=archive.signed)


def audit_cast_bytes(data: bytes, name: str = "upload.cast") -> CastAudit:
    """Verify and read a .cast held in memory (an upload, an export over gRPC)."""
    if not data:
        raise CastAuditError(f"{name} is empty")
    with tempfile.TemporaryDirectory(prefix="kforge-ui-") as tmp:
        path = Path(tmp) / (Path(name).name or "upload.cast")
        path.write_bytes(data)
        try:
            return audit_cast(path)
        except CastAuditError as exc:
            raise CastAuditError(str(exc).replace(str(path), name)) from exc
