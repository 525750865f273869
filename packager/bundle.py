"""A run bundle: what ``packager build`` needs from a finished run, as a plain directory.

The forge exports it (``kforge export-bundle``), so the packager never reads the forge's run
store and stays installable with torch and the standard library alone. The bundle carries the
builder's own entries (:class:`~packager.format.KernelEntry`, :class:`~packager.format.FallbackEntry`,
:class:`~packager.manifest.ModelIdentity`), so their fields are defined once.

Layout::

    bundle.json                          format, version, model, kernels' figures, fallbacks, sha256 per file
    kernels/<card_id>/<arch>/card.json   the card (OperatorCard JSON)
    kernels/<card_id>/<arch>/source.cpp  the kernel's source (source.cu on cuda)
    kernels/<card_id>/<arch>/kernel.so   the compiled artifact

Reading checks everything before returning: format and version, every field's presence and
type, safe names, and every file's sha256, so a damaged or altered bundle is refused by name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packager.errors import CastError
from packager.format import FallbackEntry, KernelEntry
from packager.manifest import ModelIdentity, is_safe_name

BUNDLE_FILE = "bundle.json"
BUNDLE_FORMAT = "kforge-run-bundle"
BUNDLE_VERSION = 1
#: Where a run directory keeps its own bundle, so ``packager build RUN`` finds it.
RUN_BUNDLE_DIR = "bundle"
#: KernelEntry fields kept as files beside bundle.json rather than inside it.
FILE_FIELDS = ("card_json", "source", "artifact")


class BundleError(CastError):
    """A run bundle that is missing, malformed, or does not match its checksums."""


@dataclass(frozen=True)
class RunBundle:
    """A finished run's inputs to :func:`packager.format.build_cast`."""

    model: ModelIdentity
    kernels: tuple[KernelEntry, ...]
    fallbacks: tuple[FallbackEntry, ...]


def kernel_paths(card_id: str, arch: str, backend: str) -> tuple[str, str, str]:
    """Where a kernel's card, source and artifact lie inside the bundle."""
    folder = f"kernels/{card_id}/{arch}"
    return f"{folder}/card.json", f"{folder}/source.{'cu' if backend == 'cuda' else 'cpp'}", f"{folder}/kernel.so"


def kernel_files(entry: KernelEntry) -> dict[str, bytes]:
    """The files of one kernel, by path inside the bundle."""
    paths = kernel_paths(entry.card_id, entry.arch, entry.backend)
    return dict(zip(paths, (entry.card_json.encode(), entry.source.encode(), entry.artifact), strict=True))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_bundle(path: Path, bundle: RunBundle) -> None:
    """Write ``bundle`` as a directory at ``path``, replacing a bundle already there.

    The directory appears whole or not at all (written beside it, then renamed); a non-empty
    directory that is not a bundle is never replaced.
    """
    path = Path(path)
    if path.exists() and not (path / BUNDLE_FILE).is_file() and (not path.is_dir() or any(path.iterdir())):
        raise BundleError(f"{path} exists and is not a run bundle; not replacing it")
    files: dict[str, bytes] = {}
    for entry in bundle.kernels:
        if not (is_safe_name(entry.card_id) and is_safe_name(entry.arch)):
            raise BundleError(f"kernel {entry.card_id!r} on {entry.arch!r}: not a safe name for a file")
        own = kernel_files(entry)
        if own.keys() & files.keys():
            raise BundleError(f"a second kernel for card {entry.card_id} on {entry.arch}")
        files.update(own)
    manifest = {
        "format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "model": dataclasses.asdict(bundle.model),
        "kernels": [{k: v for k, v in dataclasses.asdict(e).items() if k not in FILE_FIELDS} for e in bundle.kernels],
        "fallbacks": [dataclasses.asdict(f) for f in bundle.fallbacks],
        "files": {name: _sha256(data) for name, data in sorted(files.items())},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        for name, data in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_bytes(data)
        (staging / BUNDLE_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        if path.exists():
            old = path.with_name(f"{staging.name}.old")
            path.rename(old)
            staging.rename(path)
            shutil.rmtree(old)
        else:
            staging.rename(path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def read_bundle(path: Path) -> RunBundle:
    """The run bundle at ``path``, every file checked against its recorded sha256."""
    path = Path(path)
    manifest = _read_manifest(path)
    checksums = _mapping(manifest.get("files"), "files")
    model = ModelIdentity(**_fields(ModelIdentity, manifest.get("model"), "model"))
    fallbacks = tuple(FallbackEntry(**_fields(FallbackEntry, f, f"fallback {i}"))
                      for i, f in enumerate(_list(manifest, "fallbacks")))
    kernels = []
    for i, value in enumerate(_list(manifest, "kernels")):
        figures = _fields(KernelEntry, value, f"kernel {i}", kept_apart=FILE_FIELDS)
        card_id, arch = figures["card_id"], figures["arch"]
        where = f"kernel {i} ({card_id} on {arch})"
        if not (is_safe_name(card_id) and is_safe_name(arch)):
            raise BundleError(f"{path}: {where}: card_id and arch must be safe names")
        card, source, artifact = (_checked_file(path, name, checksums, where)
                                  for name in kernel_paths(card_id, arch, figures["backend"]))
        try:
            figures.update(card_json=card.decode(), source=source.decode(), artifact=artifact)
        except UnicodeDecodeError as exc:
            raise BundleError(f"{path}: {where}: the card or source is not UTF-8 text") from exc
        kernels.append(KernelEntry(**figures))
    return RunBundle(model=model, kernels=tuple(kernels), fallbacks=fallbacks)


def _read_manifest(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise BundleError(f"{path} is not a directory (a run bundle is one)")
    try:
        text = (path / BUNDLE_FILE).read_text()
    except FileNotFoundError:
        raise BundleError(f"{path} holds no {BUNDLE_FILE}: not a run bundle") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"cannot read {path / BUNDLE_FILE}: {exc}") from exc
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path / BUNDLE_FILE} is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{path / BUNDLE_FILE} is not a {BUNDLE_FORMAT} manifest")
    if manifest.get("version") != BUNDLE_VERSION:
        raise BundleError(f"{path}: bundle version {manifest.get('version')!r}; this packager reads "
                          f"version {BUNDLE_VERSION}")
    return manifest


def _list(manifest: Mapping[str, Any], name: str) -> list[Any]:
    value = manifest.get(name)
    if not isinstance(value, list):
        raise BundleError(f"{BUNDLE_FILE}: {name!r} must be a list")
    return value


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BundleError(f"{BUNDLE_FILE}: {where} must be a JSON object")
    return value


def _fields(cls: type, value: Any, where: str, kept_apart: Sequence[str] = ()) -> dict[str, Any]:
    """``value``'s fields for dataclass ``cls`` (but ``kept_apart``): each present, known and of its type."""
    fields = _mapping(value, where)
    hints = typing.get_type_hints(cls)
    declared = [f.name for f in dataclasses.fields(cls) if f.name not in kept_apart]
    missing = [n for n in declared if n not in fields]
    unknown = sorted(fields.keys() - set(declared))
    if missing or unknown:
        raise BundleError(f"{BUNDLE_FILE}: {where}: missing fields {missing}, unknown fields {unknown}")
    for name in declared:
        if not _accepts(hints[name], fields[name]):
            raise BundleError(f"{BUNDLE_FILE}: {where}: {name} = {fields[name]!r} is not of type {hints[name]}")
    return {n: float(v) if hints[n] is float else v for n, v in fields.items()}


def _accepts(hint: Any, value: Any) -> bool:
    options = typing.get_args(hint)
    if options:  # X | None
        return any(_accepts(option, value) for option in options)
    if hint is type(None):
        return value is None
    if isinstance(value, bool):
        return hint is bool
    if hint is float:
        return isinstance(value, (int, float))
    return isinstance(value, hint)


def _checked_file(path: Path, name: str, checksums: Mapping[str, Any], where: str) -> bytes:
    if name not in checksums:
        raise BundleError(f"{path}: {where}: {name} is not in the bundle's checksum list")
    try:
        data = (path / name).read_bytes()
    except OSError as exc:
        raise BundleError(f"{path}: {where}: cannot read {name}: {exc.strerror or exc}") from exc
    if _sha256(data) != checksums[name]:
        raise BundleError(f"{path}: {name} does not match its sha256 in {BUNDLE_FILE} (altered or damaged)")
    return data
