"""The evaluator: audit, compile, then verify and time a candidate in an isolated process.

The server process only orchestrates: it never loads candidate code nor touches CUDA. Each
candidate runs in a process no earlier candidate ran in: forked from its slot's fork server
(:mod:`gpu_sandbox_service.forkserver`), or started cold when the fork server is turned off
(``KF_SANDBOX_FORK_SERVER=0``) or cannot start. A re-measure always starts cold, and with one run
slot before the slot is its own (:meth:`Evaluator._remeasure`). On a cuda
sandbox, where a slot is free while the candidate builds, its forked process is prepared meanwhile
(:mod:`gpu_sandbox_service.prepared`); ``KF_SANDBOX_PREPARE=0`` turns that off, ``=1`` turns it on
for a cpu sandbox too. On an H200 it takes a 256 MiB card from 2.13-2.17 to 1.70-1.82 s a candidate
(``bench/results/gpu_runs_2026-12-04_h200_run53_57.md``). A cpu sandbox leaves it off unless asked:
there the prepared process competes with the compiler for the same few cores, and on two idle
cores it gained nothing clear (0.47 against 0.41 s a candidate on a 1 MiB card, 0.66 against
0.72 s on a 4 MiB one, ``bench/results/throughput_2026-12-04_cpu*.json``).

A result's ``start_s`` runs from the library being ready to the process beginning its checks (a
wait for a slot included); ``prepared_ahead_s`` is how long before the library the process had
prepared everything else, time that counts in no phase of the candidate's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import platform
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError

from gpu_sandbox_service.audit import AuditReport, audit_source
from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.compiler import Compiler, detect_toolchain
from gpu_sandbox_service.device import describe_device, resolve_backend
from gpu_sandbox_service.forkserver import LIFETIME_S, ForkServer
from gpu_sandbox_service.harness.protocol import REQUEST_FILE, HarnessReport, HarnessRequest
from gpu_sandbox_service.isolation import (
    EXIT_LAUNCH_FAILED,
    ProcessOutcome,
    Profile,
    ResourceLimits,
    allowed_environment,
    detect_features,
    profiles,
    run_isolated,
)
from gpu_sandbox_service.kernel_isolation import choose_kernel_profile
from gpu_sandbox_service.models import CandidateStatus, Limits, Timing
from gpu_sandbox_service.pool import Slot, SlotLease, WorkerPool
from gpu_sandbox_service.prepared import Preparation, PreparedChild
from gpu_sandbox_service.pycommand import python_module_command
from gpu_sandbox_service.standby import Standby, Turn
from kforge_domain.device import DeviceInfo
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import BuildFailure
from kforge_torch.eviction import EvictionUnavailable, build_library
from servicekit.errors import FailedPrecondition, InvalidArgument, Unavailable

log = logging.getLogger(__name__)

HARNESS = python_module_command("gpu_sandbox_service.harness")
FORK_SERVER_SETTING = "KF_SANDBOX_FORK_SERVER"
PREPARE_SETTING = "KF_SANDBOX_PREPARE"
LIBRARY_FILE = "candidate.so"
#: The cpu timer's cache-line eviction helper (:mod:`kforge_torch.eviction`), staged beside the candidate.
EVICT_FILE = "evict.so"


def fork_server_default() -> bool:
    """On unless ``KF_SANDBOX_FORK_SERVER`` is ``0``."""
    return os.environ.get(FORK_SERVER_SETTING, "1").strip() != "0"


def prepare_default(backend: str) -> bool:
    """``KF_SANDBOX_PREPARE`` where set (``1`` on, ``0`` off); else on for cuda only (see the
    module's docstring for why)."""
    setting = os.environ.get(PREPARE_SETTING, "").strip()
    return setting == "1" if setting else backend == "cuda"


class Evaluator:
    """Evaluates candidates for one backend; ``work_dir`` holds the compile cache and run dirs."""

    def __init__(self, work_dir: Path, backend: str, blob_store: BlobStore, limits: Limits | None = None,
                 workers: int | None = None, fork_server: bool | None = None, prepare: bool | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.backend = resolve_backend(backend)
        self.blobs = blob_store
        self.limits = limits or Limits()
        self.workers = workers
        self.sandbox_id = f"{platform.node()}/{self.backend}/{uuid.uuid4().hex[:8]}"
        self.scratch = self.work_dir / "runs"
        self.scratch.mkdir(parents=True, exist_ok=True)
        self._device: DeviceInfo | None = None
        self._device_count = 0  # GPUs this sandbox sees (the pool's business; the wire carries candidate_slots)
        self._evict_library: Path | None = None
        self._compiler: Compiler | None = None
        self._pool: WorkerPool | None = None
        self._profile: Profile | None = None  # None: the strongest isolation (cpu); cuda picks its own
        self._ready = asyncio.Lock()
        self.fork_server_enabled = fork_server_default() if fork_server is None else fork_server
        self.prepare_enabled = prepare_default(self.backend) if prepare is None else prepare
        self._fork_servers: dict[int, ForkServer] = {}
        self._standby: Standby | None = None  # the next re-measure's process, waiting (one run slot only)

    async def device_info(self) -> DeviceInfo:
        """The device, described once (in a child process)."""
        await self._prepare()
        assert self._device is not None
        return self._device

    async def device_count(self) -> int:
        """How many devices the probe counted (cuda: visible GPUs; cpu: one)."""
        await self._prepare()
        return self._device_count

    @property
    def isolation(self) -> str:
        """How candidates are isolated here; for cuda, known once the device was described."""
        profile = self._profile or profiles(detect_features(), gpu=False)[0]
        return profile.describe()

    async def _prepare(self) -> None:
        async with self._ready:
            if self._device is not None:
                return
            probed = await asyncio.to_thread(describe_device, self.backend)
            device = probed.info
            toolchain = await asyncio.to_thread(detect_toolchain, self.backend, device.arch)
            self._compiler = Compiler(toolchain, self.work_dir / "cache", self.scratch, self.limits)
            self._pool = WorkerPool(self.backend, probed.device_count, self.workers)
            if self.backend == "cuda":
                self._profile = await choose_kernel_profile(
                    "cuda", self._compiler, self.scratch,
                    lambda argv, run_dir, profile: self._spawn(argv, run_dir, self.limits.run_timeout_s, profile))
            if self.backend == "cpu":
                self._evict_library = await asyncio.to_thread(_evict_library, self.work_dir / "evict")
            self._device_count = probed.device_count
            self._device = replace(device, sandbox_id=self.sandbox_id, candidate_slots=self._pool.candidate_slots)

    async def evaluate(self, request: EvaluateRequest) -> CandidateResult:
        """The verdict on one candidate. Bad requests raise; bad candidates get a status."""
        started = time.perf_counter()
        timing = self._validate(request)
        await self._prepare()
        assert self._device is not None and self._compiler is not None and self._pool is not None
        audit = audit_source(request.source, self.backend)
        evidence = CandidateResult(  # every way through _evaluate gives it its own verdict
            candidate_id=request.candidate_id, verdict=BuildFailure(CandidateStatus.REJECTED),
            audit_class=audit.audit_class, source_sha256=hashlib.sha256(request.source.encode()).hexdigest(),
            toolchain=self._device.toolchain, arch=self._device.arch, sandbox_id=self.sandbox_id,
            compiler_flags=" ".join(self._compiler.toolchain.flags(audit.link_libraries)),
        )
        result = await self._evaluate(request, timing, audit, evidence)
        return replace(result, total_s=time.perf_counter() - started)

    async def _evaluate(self, request: EvaluateRequest, timing: Timing, audit: AuditReport,
                        result: CandidateResult) -> CandidateResult:
        """``result`` (the evidence known before compiling) with the verdict and what was found on the way."""
        assert self._compiler is not None and self._pool is not None
        if self.limits.static_audit and not audit.allowed:
            return replace(result, verdict=BuildFailure(CandidateStatus.REJECTED, "forbidden by the kernel contract: "
                                                        + "; ".join(audit.violations[:10])))
        preparation = Preparation(self._pool, lambda lease: self._prepare_child(request, timing, lease)) \
            if self.fork_server_enabled and self.prepare_enabled else None
        if request.options.remeasure:
            await self._keep_standby(self._run_timeout(timing))
        try:
            async with self._pool.compile_slots:
                compiled = await self._compiler.compile(request.source, audit.link_libraries,
                                                        timing.compile_timeout_s)
            built_at = time.monotonic()
            result = replace(result, compile_s=compiled.compile_s, compiler_flags=compiled.flags)
            if compiled.library is None:
                return replace(result, verdict=BuildFailure(CandidateStatus.COMPILE_ERROR, compiled.error),
                               log_tail=compiled.log)
            prepared = await preparation.child() if preparation else None
            report, log = await self._run(request, timing, compiled.library, verify_fresh=True, prepared=prepared)
        finally:
            if preparation:
                await preparation.discard()
        result = replace(result, verdict=report.run_figures(), log_tail=log,
                         start_s=_since(report.checks_at_s, built_at),
                         prepared_ahead_s=_since(built_at, report.prepared_at_s))
        if result.passed and request.options.remeasure and _would_be_best(result, timing):
            again, log = await self._remeasure(request, timing, compiled.library)
            confirmed = again.status == CandidateStatus.PASSED
            verdict = again.run_figures() if confirmed else replace(
                again.run_figures(), error_message=f"re-measured in a fresh process: {again.error_message}")
            result = replace(result, verdict=verdict, log_tail=log, remeasured=confirmed)
        if result.passed:
            result = replace(result, artifact=compiled.library.read_bytes())
        return result

    def _validate(self, request: EvaluateRequest) -> Timing:
        """How ``request`` is to be timed; raises for a request this sandbox cannot serve."""
        timing = timing_of(request.options)
        if request.backend and request.backend != self.backend:
            raise InvalidArgument(f"this sandbox runs backend {self.backend!r}, not {request.backend!r}")
        if not request.source.strip():
            raise InvalidArgument("the candidate source is empty")
        if not request.card.outputs:
            raise InvalidArgument(f"card {request.card.id} declares no outputs")
        for digest in self._blob_digests(request):
            if not self.blobs.has(digest):
                raise FailedPrecondition(f"blob {digest} of card {request.card.id} is not uploaded")
        return timing

    @staticmethod
    def _blob_digests(request: EvaluateRequest) -> list[str]:
        digests = [s.inputs_blob for s in request.card.samples]
        if request.card.module_program_blob:
            digests.append(request.card.module_program_blob)
        return digests

    async def _prepare_child(self, request: EvaluateRequest, timing: Timing, lease: SlotLease
                             ) -> PreparedChild | None:
        """The candidate's process forked on the lent slot and preparing while the candidate builds;
        None where it cannot be (the slot is given back then)."""
        try:
            server = await self._fork_server(lease.slot)
            if server is None or lease.reclaimed.is_set():
                lease.end()
                return None
            staging = self.scratch / f"run-{uuid.uuid4().hex}"
            staging.mkdir()
            try:
                await asyncio.to_thread(self._stage_inputs, request, staging)
                run_dir = server.root / staging.name
                self._write_request(request, timing, run_dir, staging, verify_fresh=True)
                staging.rename(run_dir)
            finally:
                await asyncio.to_thread(shutil.rmtree, staging, True)
        except BaseException:
            lease.end()
            raise
        child = PreparedChild(lease, server, run_dir, run_dir / LIBRARY_FILE, self.scratch / f"{run_dir.name}.so")
        started = await child.start(self._run_timeout(timing), self.limits.output_cap_bytes,
                                    self.limits.log_tail_bytes)
        return child if started else None

    async def _run(self, request: EvaluateRequest, timing: Timing, library: Path, verify_fresh: bool,
                   cold: bool = False, prepared: PreparedChild | None = None) -> tuple[HarnessReport, str]:
        """One candidate process (``prepared``, forked, or ``cold``); its report (synthesised if it died)."""
        timeout = self._run_timeout(timing)
        slot = await prepared.claim() if prepared else None
        if prepared is not None and slot is not None:
            try:
                outcome, run_dir = await prepared.run(library, timeout), prepared.run_dir
                if outcome is None:  # its zygote was lost: a cold process, as a forked candidate's would be
                    outcome, run_dir = await self._staged_run(request, timing, library, verify_fresh, True, slot)
            finally:
                prepared.lease.end()
        else:
            outcome, run_dir = await self._staged_run(request, timing, library, verify_fresh, cold)
        return self._verdict(request, outcome, run_dir, timeout)

    async def _remeasure(self, request: EvaluateRequest, timing: Timing, library: Path) -> tuple[HarnessReport, str]:
        """The candidate timed again in a cold process, no fork server's child.

        Where the sandbox has one run slot, that process was started before it was needed
        (:mod:`gpu_sandbox_service.standby`), or else starts now; either way it runs its start
        while the slot serves other candidates, and takes the slot, in turn, when they are done.
        With several slots its GPU is not known before it has one, so it starts then.
        """
        assert self._pool is not None
        slot_env = self._pool.sole_slot_env()
        if slot_env is None:
            return await self._run(request, timing, library, verify_fresh=False, cold=True)
        timeout = self._run_timeout(timing)
        standby = await self._take_standby(timeout) or self._new_standby(slot_env, timeout)
        await self._keep_standby(timeout)
        try:
            await asyncio.to_thread(self._stage_files, request, library, standby.folder)
            self._write_request(request, timing, standby.folder, standby.folder, verify_fresh=False)
            outcome, ahead_s = await standby.run()
            report, log = self._verdict(request, outcome, standby.folder, timeout)
            return report, f"re-measured in a fresh process started {ahead_s:.1f} s before it was needed\n{log}"
        finally:
            await standby.discard()

    async def _take_standby(self, timeout_s: float) -> Standby | None:
        """The waiting re-measure process, if one waits and was started with this run limit."""
        standby, self._standby = self._standby, None
        if standby is not None and standby.available and standby.timeout_s == timeout_s:
            return standby
        if standby is not None:
            await standby.discard()
        return None

    async def _keep_standby(self, timeout_s: float) -> None:
        """Start the next re-measure's process where none waits (one run slot only)."""
        assert self._pool is not None
        slot_env = self._pool.sole_slot_env()
        if slot_env is None or (self._standby is not None and self._standby.available):
            return
        ended, self._standby = self._standby, self._new_standby(slot_env, timeout_s)  # before any await: one starts
        if ended is not None:
            await ended.discard()

    def _new_standby(self, slot_env: dict[str, str], timeout_s: float) -> Standby:
        """A gated cold harness process in a fresh folder of its own, for the one run slot."""
        assert self._pool is not None
        folder = self.scratch / f"standby-{uuid.uuid4().hex}"
        folder.mkdir()

        def spawn(run_dir: Path, turn: Turn) -> Coroutine[object, object, ProcessOutcome]:
            return self._spawn_with(slot_env, HARNESS, run_dir, timeout_s, self._profile, result_pipe=True, turn=turn)

        return Standby(folder, spawn, self._pool.run_slot, timeout_s)

    @contextlib.asynccontextmanager
    async def _staged(self, request: EvaluateRequest, library: Path) -> AsyncIterator[Path]:
        """A fresh folder holding the candidate's files, removed afterwards."""
        staging = self.scratch / f"run-{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            await asyncio.to_thread(self._stage_files, request, library, staging)
            yield staging
        finally:
            await asyncio.to_thread(shutil.rmtree, staging, True)

    async def _staged_run(self, request: EvaluateRequest, timing: Timing, library: Path, verify_fresh: bool,
                          cold: bool, slot: Slot | None = None) -> tuple[ProcessOutcome, Path]:
        """Stage the candidate, then run it in ``slot`` (else the next free one): forked from the
        slot's fork server unless ``cold``, else (or when that zygote is lost) a cold process."""
        assert self._pool is not None
        async with self._staged(request, library) as staging:
            if slot is not None:
                return await self._run_in(slot, staging, request, timing, library, verify_fresh, cold)
            async with self._pool.run_slot() as slot:
                return await self._run_in(slot, staging, request, timing, library, verify_fresh, cold)

    async def _run_in(self, slot: Slot, staging: Path, request: EvaluateRequest, timing: Timing, library: Path,
                      verify_fresh: bool, cold: bool) -> tuple[ProcessOutcome, Path]:
        """``staging`` run in ``slot``; the outcome and the folder it ran in."""
        timeout = self._run_timeout(timing)
        server = None if cold else await self._fork_server(slot)
        if server is not None:
            run_dir = server.root / staging.name
            self._write_request(request, timing, run_dir, staging, verify_fresh)
            staging.rename(run_dir)
            try:
                outcome = await server.run(run_dir, timeout, self.limits.output_cap_bytes, self.limits.log_tail_bytes)
            finally:
                if not await asyncio.to_thread(server.scrub):
                    await server.stop()
            if outcome is not None:
                return outcome, run_dir
            staging.mkdir()
            await asyncio.to_thread(self._stage_files, request, library, staging)
        self._write_request(request, timing, staging, staging, verify_fresh)
        return await self._spawn_in(slot, HARNESS, staging, timeout, self._profile, result_pipe=True), staging

    def _run_timeout(self, timing: Timing) -> float:
        """How long a candidate's process may run: the request's limit, else the sandbox's."""
        return timing.run_timeout_s or self.limits.run_timeout_s

    def _verdict(self, request: EvaluateRequest, outcome: ProcessOutcome, run_dir: Path, timeout: float
                 ) -> tuple[HarnessReport, str]:
        """The report of the process that ended as ``outcome``, synthesised if it reported none; its log."""
        log = outcome.log_tail.replace(str(run_dir) + "/", "")
        if outcome.timed_out:
            return HarnessReport(status=CandidateStatus.TIMEOUT,
                                 error_message=f"the run exceeded its {timeout:g} s limit"), log
        if outcome.output_overflow:
            return HarnessReport(status=CandidateStatus.RUNTIME_ERROR, error_message=(
                f"the process wrote more than {self.limits.output_cap_bytes} bytes to stdout/stderr")), log
        if outcome.result:
            try:
                report = HarnessReport.model_validate_json(outcome.result)
            except ValidationError:
                return HarnessReport(status=CandidateStatus.RUNTIME_ERROR,
                                     error_message="the process wrote a malformed report"), log
            if report.setup_error:
                raise InvalidArgument(f"card {request.card.id} cannot be replayed: {report.setup_error}")
            if outcome.returncode == 0:
                return report, log
        if outcome.returncode == EXIT_LAUNCH_FAILED and "launcher:" in log:
            raise Unavailable(f"the sandbox cannot isolate a candidate here: {log.strip()[-500:]}")
        signal_name = outcome.signal_name
        how = f"was killed by {signal_name}" if signal_name else f"exited with status {outcome.returncode}"
        return HarnessReport(status=CandidateStatus.RUNTIME_ERROR,
                             error_message=f"the candidate process {how} before reporting a verdict"), log

    async def _spawn(self, argv: list[str], run_dir: Path, timeout_s: float, profile: Profile | None,
                     result_pipe: bool = False) -> ProcessOutcome:
        """Run ``argv`` isolated in one of the pool's slots, with a candidate run's limits."""
        assert self._pool is not None
        async with self._pool.run_slot() as slot:
            return await self._spawn_in(slot, argv, run_dir, timeout_s, profile, result_pipe)

    async def _spawn_in(self, slot: Slot, argv: list[str], run_dir: Path, timeout_s: float, profile: Profile | None,
                        result_pipe: bool = False) -> ProcessOutcome:
        return await self._spawn_with(slot.env, argv, run_dir, timeout_s, profile, result_pipe)

    async def _spawn_with(self, slot_env: dict[str, str], argv: list[str], run_dir: Path, timeout_s: float,
                          profile: Profile | None, result_pipe: bool = False,
                          turn: Callable[[], contextlib.AbstractAsyncContextManager[object]] | None = None
                          ) -> ProcessOutcome:
        """``argv`` isolated in a run slot's environment (``turn``: see :func:`run_isolated`)."""
        if self.backend == "cpu":
            # Eager's and the candidate's OpenMP pools share the cores; spinning idle
            # threads of one would bill their time to the other.
            slot_env = {**slot_env, "OMP_WAIT_POLICY": "PASSIVE"}
        return await run_isolated(
            argv, run_dir=run_dir, limits=ResourceLimits.for_run(self.limits, self.backend), timeout_s=timeout_s,
            output_cap_bytes=self.limits.output_cap_bytes, log_tail_bytes=self.limits.log_tail_bytes,
            env=allowed_environment(run_dir, slot_env), gpu=self.backend == "cuda", result_pipe=result_pipe,
            profile=profile, turn=turn,
        )

    async def _fork_server(self, slot: Slot) -> ForkServer | None:
        """The slot's fork server, (re)started when needed; None (cold processes) when it is off
        or cannot start here."""
        if not self.fork_server_enabled:
            return None
        server = self._fork_servers.get(slot.index)
        if server is not None and server.usable:
            return server
        if server is not None:
            await server.stop()
        features = detect_features()
        # The profile run_isolated will give the zygote, whose user must own the socket it connects to.
        profile = self._profile or profiles(features, gpu=self.backend == "cuda", work_dir=self.scratch)[0]
        # bubblewrap, or the launcher's read-only view, gives the zygote a /tmp of its own (and on cpu
        # bubblewrap a /dev), emptied between children
        private = (["/tmp"] if profile.read_only_fs else []) + (
            ["/dev/shm"] if profile.bubblewrap and self.backend == "cpu" else [])
        owner = features.user if profile.unprivileged else None
        server = ForkServer(self.scratch / f"zygote-{slot.index}-{uuid.uuid4().hex[:8]}", private, owner)
        problem = await server.start(
            lambda argv, root: self._spawn_in(slot, argv, root, LIFETIME_S, self._profile))
        if problem is not None:
            log.warning("no fork server here (%s): every candidate starts a cold process", problem)
            self.fork_server_enabled = False
            self._fork_servers.pop(slot.index, None)
            return None
        self._fork_servers[slot.index] = server
        return server

    async def close(self) -> None:
        """Stop the fork servers and the waiting re-measure process; the next candidate would start
        them again."""
        standby, self._standby = self._standby, None
        if standby is not None:
            await standby.discard()
        servers, self._fork_servers = list(self._fork_servers.values()), {}
        for server in servers:
            await server.stop()

    def _stage_files(self, request: EvaluateRequest, library: Path, folder: Path) -> None:
        shutil.copyfile(library, folder / LIBRARY_FILE)
        self._stage_inputs(request, folder)

    def _stage_inputs(self, request: EvaluateRequest, folder: Path) -> None:
        """The card's samples and program: all of a run folder but the library."""
        for i, sample in enumerate(request.card.samples):
            _copy_private(self.blobs.path(sample.inputs_blob), folder / f"sample{i}.safetensors")
        if request.card.module_program_blob:
            _copy_private(self.blobs.path(request.card.module_program_blob), folder / "module.pt2")
        if self._evict_library is not None:
            shutil.copyfile(self._evict_library, folder / EVICT_FILE)

    def _write_request(self, request: EvaluateRequest, timing: Timing, run_dir: Path, folder: Path,
                       verify_fresh: bool) -> None:
        """``folder``'s request, naming its files where the harness will find them: in ``run_dir``."""
        harness_request = self._harness_request(request, timing, run_dir, verify_fresh)
        (folder / REQUEST_FILE).write_text(harness_request.model_dump_json())

    def _harness_request(self, request: EvaluateRequest, timing: Timing, run_dir: Path,
                         verify_fresh: bool) -> HarnessRequest:
        assert self._device is not None
        program = run_dir / "module.pt2" if request.card.module_program_blob else None
        return HarnessRequest(
            card=request.card, backend=self.backend, library=str(run_dir / LIBRARY_FILE),
            sample_inputs=[str(run_dir / f"sample{i}.safetensors") for i in range(len(request.card.samples))],
            module_program=str(program) if program else None, fresh_input_sets=timing.fresh_input_sets,
            timing_runs=timing.timing_runs, warmup_runs=timing.warmup_runs, verify_fresh=verify_fresh,
            best_speedup=timing.best_speedup,
            copy_bandwidth_gbps=self._device.copy_bandwidth_gbps,
            copy_bandwidth_by_size=list(self._device.copy_bandwidth_by_size), l2_bytes=self._device.l2_bytes,
            floor_slack=self.limits.floor_slack, seed=int.from_bytes(os.urandom(4), "little"),
            evict_library=str(run_dir / EVICT_FILE) if self._evict_library else None,
        )


def _evict_library(folder: Path) -> Path | None:
    """The cpu timer's eviction helper, built once; None (every timed call flushes the whole
    cache, tens of ms on a large one) where it cannot be built."""
    try:
        return build_library(folder)
    except EvictionUnavailable as exc:
        log.warning("cpu timing flushes the whole cache before every call: %s", exc)
        return None


def _since(later: float | None, earlier: float | None) -> float:
    """Seconds from ``earlier`` to ``later`` (0 when either is unknown or ``later`` is earlier)."""
    return max(0.0, later - earlier) if later is not None and earlier is not None else 0.0


def _would_be_best(result: CandidateResult, timing: Timing) -> bool:
    """Whether the candidate beats the card's best so far, so its figure is worth a fresh process."""
    return result.speedup is not None and result.speedup > timing.best_speedup


def _copy_private(source: Path, target: Path) -> None:
    """A private copy: a hard link would let the candidate rewrite the blob store's file."""
    shutil.copyfile(source, target)


def timing_of(options: EvaluationOptions) -> Timing:
    """The timing ``options`` ask for (zero: the default); :class:`InvalidArgument` when out of range."""
    defaults = Timing()
    try:
        return Timing(fresh_input_sets=options.fresh_input_sets or defaults.fresh_input_sets,
                      timing_runs=options.timing_runs or defaults.timing_runs,
                      compile_timeout_s=options.compile_timeout_s or None, run_timeout_s=options.run_timeout_s or None,
                      best_speedup=options.best_speedup)
    except ValidationError as exc:
        raise InvalidArgument(f"invalid evaluation options: {exc.errors()[:3]}") from exc
