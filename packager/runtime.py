"""``load_cast`` and ``Cast``: verify a .cast, load the kernels built for this machine, apply them.

Loading verifies the whole archive first (see :mod:`packager.archive`) and refuses a damaged or
tampered file. Kernels built for another architecture, for an op this torch build lacks, or
whose library does not load are reported in ``Cast.skipped`` and never run; eager PyTorch
serves those calls. So are kernels that write eager's order of ties (sort, argsort, topk)
when this process runs another torch release than the one they were proved against: that order
is the algorithm of one release's kernels, not a property of the op.

Three ways to deploy, as users serve models:

* ``cast.apply(model)``: eager, with guarded dispatch: aten cards process-wide (aten overrides
  are global to the process), module cards on the matching module instances of ``model``.
  Applying a cast that is already applied raises :class:`~packager.errors.CastApplyError`;
  ``remove()`` restores everything and a later ``apply`` installs it afresh.
* ``cast.compile(model, **torch_compile_kwargs)``: torch.compile with the kernels in its graphs
  (:mod:`packager.compiled`), any ``mode`` (``"reduce-overhead"`` captures them in CUDA graphs).
* ``torch.compile(model, backend=cast.backend(model))``: the same, for a compile call of one's own.

Each mode uses the kernels whose manifest verdict for it allows them (see
:class:`~packager.manifest.ModeVerdict`).
"""

from __future__ import annotations

import contextlib
import platform
import shutil
import tempfile
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from packager.abi import AbiError, KernelLibrary
from packager.archive import read_archive
from packager.aten_dispatch import AtenOverride, UnsupportedOp, resolve_overload
from packager.compiled import AtenGraphKernels, CastBackend, graph_mode, inductor_config
from packager.errors import CastApplyError, CastCorruptError
from packager.inplace import aliased_outputs
from packager.kernel import LoadedKernel, card_mutates
from packager.launcher import CallDescriptors, KernelLauncher
from packager.manifest import MANIFEST_FILE, CastManifest, FallbackRecord, KernelRecord
from packager.module_dispatch import ModuleOverride
from packager.variant import qualified_class_name


def host_cpu_arch() -> str:
    """``cpu-x86_64`` / ``cpu-aarch64``: the arch name CPU kernels are built and loaded under."""
    machine = platform.machine().lower()
    return "cpu-" + {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def device_archs() -> list[str]:
    """Architectures this process can run kernels for: the CPU, and the current GPU if any."""
    archs = [host_cpu_arch()]
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        archs.append(f"sm_{major}{minor}")
    return archs


@dataclass(frozen=True)
class SkippedKernel:
    """A packaged kernel this process will not run, and why."""

    card_id: str
    op: str
    arch: str
    reason: str


class Cast:
    """A verified .cast with the kernels loaded for this device."""

    def __init__(
        self, path: Path, manifest: CastManifest, kernels: list[LoadedKernel], skipped: list[SkippedKernel],
        *, signed: bool, signature_verified: bool, workdir: Path,
    ) -> None:
        self.path = path
        self.manifest = manifest
        self.kernels = {k.card_id: k for k in kernels}
        self.skipped = skipped
        self.signed = signed
        self.signature_verified = signature_verified
        self._lock = threading.Lock()
        self._aten: list[AtenOverride] = []
        self._modules: dict[int, ModuleOverride] = {}
        self._applied = False
        self._graph_kernels: AtenGraphKernels | None = None
        self._cleanup = weakref.finalize(self, shutil.rmtree, workdir, True)

    @property
    def fallbacks(self) -> tuple[FallbackRecord, ...]:
        return self.manifest.fallbacks

    @property
    def applied(self) -> bool:
        return self._applied

    def apply(self, model: torch.nn.Module | None = None) -> Cast:
        """Install guarded dispatch: aten cards for the whole process, module cards on ``model``'s modules."""
        with self._lock:
            if self._applied:
                raise CastApplyError(f"{self.path.name} is already applied; call remove() first")
            aten = self._aten_overrides()
            installed: list[AtenOverride] = []
            try:
                for override in aten:
                    override.install()
                    installed.append(override)
            except Exception as exc:
                for override in reversed(installed):
                    override.uninstall()
                raise CastApplyError(f"cannot override {override.op}: {exc}") from exc
            if model is not None:
                self._install_modules(model)
            self._aten, self._applied = installed, True
        return self

    def backend(self, model: torch.nn.Module | None = None, *, mode: str | None = None,
                options: dict[str, Any] | None = None) -> CastBackend:
        """A torch.compile backend: inductor, with this cast's aten kernels chosen as graphs are traced.

        Module cards replace a module's forward, so they need the model: pass it here (or apply
        the cast to it) for its module kernels to be traced into the graph too. Dynamo traces
        those forwards before the backend hears torch.compile's ``mode`` and ``options``: pass the
        same ones here so module cards use the kernels kept for that mode (without them, only
        kernels that no compiled mode pruned). Aten cards follow what torch.compile passes.
        """
        with self._lock:
            if model is not None:
                self._install_modules(model)
            declared = graph_mode(inductor_config(mode, options)) if mode or options else None
            for module_override in self._modules.values():
                module_override.graph_mode = declared
            if self._graph_kernels is None:
                self._graph_kernels = AtenGraphKernels(
                    [k for k in self.kernels.values() if k.record.kind == "aten" and k.serves_compiled])
            self._graph_kernels.active = True
            for owner in (self._graph_kernels, *self._modules.values()):
                owner.prepare_native()
            return CastBackend(self._graph_kernels)

    def compile(self, model: torch.nn.Module, **torch_compile_kwargs: Any) -> Any:
        """``torch.compile(model, backend=self.backend(model), **torch_compile_kwargs)``.

        Takes torch.compile's arguments (``mode="default" | "reduce-overhead" | "max-autotune"``,
        ``fullgraph``, ``dynamic``, ``options``); the kernels add no graph break and no recompilation.
        """
        if "backend" in torch_compile_kwargs:
            raise CastApplyError("cast.compile chooses the backend; for another one, "
                                 "use torch.compile(model, backend=cast.backend(model))")
        backend = self.backend(model, mode=torch_compile_kwargs.get("mode") or "default",
                               options=torch_compile_kwargs.get("options"))
        return torch.compile(model, backend=backend, **torch_compile_kwargs)

    def remove(self) -> None:
        """Restore every overridden op and module forward. Removing an unapplied cast does nothing.

        Graphs compiled with the cast keep its op, which then runs the original computation.
        """
        with self._lock:
            for module_override in reversed(list(self._modules.values())):
                module_override.uninstall()
            for override in reversed(self._aten):
                override.uninstall()
            if self._graph_kernels is not None:
                self._graph_kernels.active = False
            self._aten, self._modules, self._applied = [], {}, False

    @contextlib.contextmanager
    def applied_to(self, model: torch.nn.Module | None = None) -> Iterator[Cast]:
        """``with cast.applied_to(model): ...`` applies for the block and removes afterwards."""
        self.apply(model)
        try:
            yield self
        finally:
            self.remove()

    def restricted_to(self, ops: Collection[str]) -> contextlib.AbstractContextManager[Cast]:
        """Only the kernels of ``ops`` are applied or compiled while the block runs (to find which
        op's kernels change a model). Apply inside the block, not before it."""
        return self._restricted(lambda k: k.record.op in ops)

    def without(self, card_ids: Collection[str]) -> contextlib.AbstractContextManager[Cast]:
        """The kernels of ``card_ids`` are neither applied nor compiled while the block runs (to
        find which kernels a compiled model is better without). Apply inside the block."""
        return self._restricted(lambda k: k.card_id not in card_ids)

    @contextlib.contextmanager
    def _restricted(self, keep: Callable[[LoadedKernel], bool]) -> Iterator[Cast]:
        with self._lock:
            if self._applied:
                raise CastApplyError(f"{self.path.name} is applied; restrict it before applying")
            every = self.kernels
            self.kernels = {card: k for card, k in every.items() if keep(k)}
            self._graph_kernels = None
        try:
            yield self
        finally:
            with self._lock:
                self.kernels = every
                self._graph_kernels = None

    def stats(self) -> dict[str, dict[str, object]]:
        """``{kernel_id: {"calls": n, "hits": n, "fallbacks": {reason: n}}}`` for every loaded kernel."""
        return {card_id: kernel.stats.snapshot() for card_id, kernel in self.kernels.items()}

    def reset_stats(self) -> None:
        for kernel in self.kernels.values():
            kernel.stats.reset()

    def close(self) -> None:
        """Remove the overrides and delete the extracted artifacts."""
        self.remove()
        self._cleanup()

    def _aten_overrides(self) -> list[AtenOverride]:
        groups: dict[tuple[str, str], list[LoadedKernel]] = defaultdict(list)
        for kernel in self.kernels.values():
            if kernel.record.kind == "aten" and kernel.serves_eager:
                groups[(kernel.record.op, kernel.record.backend)].append(kernel)
        return [AtenOverride(op, backend, kernels) for (op, backend), kernels in sorted(groups.items())]

    def _install_modules(self, model: torch.nn.Module) -> None:
        """Guarded forwards on ``model``'s modules that have cards, once per module instance."""
        by_class: dict[str, list[LoadedKernel]] = defaultdict(list)
        for kernel in self.kernels.values():
            if kernel.record.kind == "module":
                by_class[kernel.record.op].append(kernel)
        if not by_class:
            return
        for module in model.modules():
            name = qualified_class_name(module)
            known = self._modules.get(id(module))
            if name in by_class and (known is None or not known.belongs_to(module)):
                override = ModuleOverride(module, by_class[name])
                override.install()
                self._modules[id(module)] = override


def _load_kernel(record: KernelRecord, files: dict[str, bytes], workdir: Path) -> LoadedKernel:
    """Write the artifact to the private directory and load it; raises ValueError with the reason."""
    aliased: dict[int, int] = {}
    if record.kind == "aten":
        AtenOverride(record.op, record.backend, [])  # resolves the overload and its return types
        aliased = aliased_outputs(record.card, resolve_overload(record.op))
    elif card_mutates(record.card):
        raise ValueError("kernels for modules that mutate their inputs are not run by this runtime")
    artifact = workdir / f"{record.card_id}-{record.arch}.so"
    artifact.write_bytes(files[record.artifact_path])
    artifact.chmod(0o500)
    library = KernelLibrary(artifact)
    launcher = KernelLauncher(library, CallDescriptors(record.card["inputs"], record.card["outputs"],
                                                       aliased=aliased))
    return LoadedKernel(record, launcher)


#: Ops whose kernels reproduce the order in which one torch release's eager kernels leave ties.
TIE_ORDER_OPS = ("sort", "argsort", "topk")


def _release(version: str) -> str:
    """``"2.11.0+cu130"`` -> ``"2.11"``: the release whose kernels a torch build runs."""
    return ".".join(version.split("+")[0].split(".")[:2])


def _release_mismatch(record: KernelRecord, built_with: str) -> str | None:
    """Why a kernel cannot serve this torch release, or None."""
    base = record.op.removeprefix("aten::").split(".")[0]
    if record.kind != "aten" or base not in TIE_ORDER_OPS or not built_with:
        return None
    if _release(built_with) == _release(torch.__version__):
        return None
    return (f"writes eager's order of ties as torch {_release(built_with)} orders them; this process runs "
            f"torch {torch.__version__}")


def load_cast(path: Path | str, *, key: bytes | None = None) -> Cast:
    """Verify ``path`` (checksums, format version, signature when ``key`` is given) and load its kernels.

    Raises a :class:`~packager.errors.CastError` subclass naming the problem for a damaged,
    tampered or unsupported file. Kernels that cannot run here are listed in ``Cast.skipped``.
    """
    path = Path(path)
    archive = read_archive(path, key=key)
    if MANIFEST_FILE not in archive.files:
        raise CastCorruptError(f"{path}: {MANIFEST_FILE} is missing")
    manifest = CastManifest.from_json(archive.files[MANIFEST_FILE])
    archs = device_archs()
    workdir = Path(tempfile.mkdtemp(prefix="kforge-cast-"))
    kernels: dict[str, LoadedKernel] = {}
    skipped: list[SkippedKernel] = []
    for record in sorted(manifest.kernels, key=lambda r: -r.effective_speedup):
        if record.arch not in archs:
            reason = f"built for {record.arch}; this process runs {', '.join(archs)}"
        elif mismatch := _release_mismatch(record, manifest.torch_version):
            reason = mismatch
        elif record.card_id in kernels:
            reason = f"card already served by the {kernels[record.card_id].record.arch} kernel"
        else:
            try:
                kernels[record.card_id] = _load_kernel(record, archive.files, workdir)
                continue
            except (AbiError, UnsupportedOp, ValueError, KeyError, OSError) as exc:
                reason = f"not loadable: {exc}"
        skipped.append(SkippedKernel(record.card_id, record.op, record.arch, reason))
    return Cast(
        path, manifest, list(kernels.values()), skipped,
        signed=archive.signed, signature_verified=archive.signature_verified, workdir=workdir,
    )
