"""One harness session: references first, then the candidate verified, then timed against eager."""

from __future__ import annotations

import contextlib
import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file

from gpu_sandbox_service.harness.checks import check_invariants, compare
from gpu_sandbox_service.harness.mutation import check_mutated_inputs, same_values
from gpu_sandbox_service.harness.protocol import HarnessReport, HarnessRequest
from gpu_sandbox_service.harness.reference import CardError, Reference
from gpu_sandbox_service.harness.tensors import (
    allocate,
    assign,
    draw_like,
    poison,
    poison_workspace,
    storage_bytes,
    storage_range,
)
from gpu_sandbox_service.harness.timing import escaped_work
from gpu_sandbox_service.models import CandidateStatus
from kforge_domain.blobs import INPUT_PREFIX, sample_key
from kforge_domain.floor import CopyBandwidth, memory_floor_us
from kforge_torch.eviction import EvictionUnavailable, Evictor
from kforge_torch.timing import Summary, Timer, median_settled
from packager.abi import AbiError, KernelLibrary, allocate_workspace, pack_tensors
from packager.variant import decode_call

TIMING_SETS = 3
#: Timed pairs before a candidate may stop early, and how far below the card's best speedup its
#: fastest quartile must stay: clearly slower, not a noisy start.
EARLY_STOP_PAIRS = 10
EARLY_STOP_MARGIN = 0.8
#: Timed pairs before a series may stop because both medians are settled, and how settled: each
#: median's 95% interval within this fraction of it. A quiet GPU settles at the minimum; a busy
#: machine runs the whole series.
SETTLED_PAIRS = 16
SETTLED_TOLERANCE = 0.01


class CandidateFailure(Exception):
    """The candidate failed a check; carries its verdict."""

    def __init__(self, status: CandidateStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Buffers:
    """Kernel arguments laid out exactly as the card says; mutated inputs double as outputs.

    ``workspace`` is the kernel's scratch (``kf_workspace_bytes``), passed after the outputs and
    never checked; None when the kernel exports none.
    """

    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]
    aliased_outputs: dict[int, int] = field(default_factory=dict)  # output index -> input index
    workspace: torch.Tensor | None = None

    def load(self, values: Sequence[torch.Tensor]) -> None:
        for tensor, value in zip(self.inputs, values, strict=True):
            assign(tensor, value)

    def refill(self, values: Sequence[torch.Tensor]) -> None:
        """The inputs an in-place call wrote (outputs aliasing them) set back to ``values``, so the
        next call, candidate or eager, starts from the same pre-fill."""
        for i in set(self.aliased_outputs.values()):
            assign(self.inputs[i], values[i])

    def operands(self) -> list[torch.Tensor]:
        """Every tensor a candidate's call reads or writes."""
        workspace = [] if self.workspace is None else [self.workspace]
        return [*self.inputs, *self.outputs, *workspace]

    def poison(self, variant: int) -> None:
        """Outputs made detectable if left unwritten, and the workspace filled with garbage."""
        for j, out in enumerate(self.outputs):
            if j not in self.aliased_outputs:
                poison(out, variant)
        if self.workspace is not None:
            poison_workspace(self.workspace, variant)


class Session:
    def __init__(self, request: HarnessRequest) -> None:
        self.request = request
        self.card = request.card
        self.device = "cuda" if request.backend == "cuda" else "cpu"
        self.generator = torch.Generator(device=self.device).manual_seed(request.seed)
        self.stream = torch.cuda.Stream() if self.device == "cuda" else None
        self.reference = Reference(self.card, Path(request.module_program) if request.module_program else None)
        self.input_sets = self._input_sets()
        self.references, self.aliases = self._references()
        self.timer = Timer(request.backend, request.l2_bytes, self.stream, _evictor(request.evict_library))
        self.worst_rel_l2 = 0.0
        self.worst_max_scaled = 0.0

    def _input_sets(self) -> list[list[torch.Tensor]]:
        """Captured samples first, then fresh draws like the first sample."""
        n_inputs = len(self.card.inputs)
        sets: list[list[torch.Tensor]] = []
        for path in self.request.sample_inputs:
            tensors = load_file(path)
            try:
                sets.append([tensors[sample_key(INPUT_PREFIX, i)] for i in range(n_inputs)])
            except KeyError as exc:
                raise CardError(f"sample blob {Path(path).name} lacks {exc.args[0]}") from exc
        like = sets[0] if sets else [None] * n_inputs
        fresh = self.request.fresh_input_sets if self.request.verify_fresh else min(1, self.request.fresh_input_sets)
        for _ in range(fresh if sets else max(fresh, 1)):
            sets.append([draw_like(spec, sample, self.generator) for spec, sample in zip(self.card.inputs, like,
                                                                                           strict=True)])
        return sets

    def _references(self) -> tuple[list[list[torch.Tensor]], dict[int, int]]:
        """Eager's outputs on each input set, run on the harness's own copies (in place for an op
        that mutates an input: the kernel's buffers never hold a reference), and which outputs are
        inputs (output index -> input index)."""
        references: list[list[torch.Tensor]] = []
        aliases: dict[int, int] = {}
        changes: set[int] = set()
        for values in self.input_sets:
            inputs = [allocate(spec, self.device) for spec in self.card.inputs]
            for tensor, value in zip(inputs, values, strict=True):
                assign(tensor, value)
            prefilled = {i: inputs[i].clone() for i in self.card.mutated_inputs}
            outputs = self.reference(inputs)
            pointers = {t.data_ptr(): i for i, t in enumerate(inputs)}
            aliases = {j: pointers[o.data_ptr()] for j, o in enumerate(outputs) if o.data_ptr() in pointers}
            changes |= {i for i, before in prefilled.items() if not same_values(inputs[i], before)}
            references.append([o.detach().clone() for o in outputs])
        check_mutated_inputs(self.card.mutated_inputs, aliases, changes)
        for j, (spec, ref) in enumerate(zip(self.card.outputs, references[0], strict=True)):
            if list(ref.shape) != spec.shape or str(ref.dtype).removeprefix("torch.") != spec.dtype:
                raise CardError(f"eager output {j} is {tuple(ref.shape)} {ref.dtype}; the card declares "
                                f"{tuple(spec.shape)} {spec.dtype}")
        return references, aliases

    def buffers(self, workspace_bytes: int = 0) -> Buffers:
        """One set of kernel arguments, with a workspace of ``workspace_bytes`` when > 0."""
        inputs = [allocate(spec, self.device) for spec in self.card.inputs]
        outputs = [inputs[self.aliases[j]] if j in self.aliases else allocate(spec, self.device)
                   for j, spec in enumerate(self.card.outputs)]
        workspace = allocate_workspace(workspace_bytes, self.device) if workspace_bytes else None
        buffers = Buffers(inputs, outputs, dict(self.aliases), workspace)
        for j, out in enumerate(outputs):
            if j in buffers.aliased_outputs:
                continue
            start, end = storage_range(out)
            for i, tensor in enumerate(inputs):
                other_start, other_end = storage_range(tensor)
                if start < other_end and other_start < end:
                    raise CardError(f"harness bug: output {j} overlaps input {i}")
        return buffers

    # -- running the candidate --------------------------------------------------------------

    def launch(self, library: KernelLibrary, buffers: Buffers, what: str) -> None:
        if self.stream is not None:
            torch.cuda.synchronize()
        try:
            code = library.launch(buffers.inputs, buffers.outputs, self.stream.cuda_stream if self.stream else None,
                                  buffers.workspace)
        except AbiError as exc:
            raise CardError(str(exc)) from exc
        if self.stream is not None:
            # The contract puts all device work on the harness's stream: only that stream is
            # awaited before the outputs are read, so work launched elsewhere is caught unfinished.
            self.stream.synchronize()
        if code != 0:
            raise CandidateFailure(CandidateStatus.RUNTIME_ERROR, f"kf_launch returned {code} on {what}")

    @staticmethod
    def packed_call(buffers: Buffers) -> tuple[bytes, int, bytes, int]:
        """kf_launch's descriptor arrays for ``buffers`` (the workspace after the outputs) and their counts."""
        outputs = [*buffers.outputs, *([] if buffers.workspace is None else [buffers.workspace])]
        try:
            return pack_tensors(buffers.inputs), len(buffers.inputs), pack_tensors(outputs), len(outputs)
        except AbiError as exc:
            raise CardError(str(exc)) from exc

    def verify(self, library: KernelLibrary) -> None:
        buffers = self.buffers(library.workspace_bytes)
        for k, (values, refs) in enumerate(zip(self.input_sets, self.references, strict=True)):
            what = f"input set {k} ({'captured' if k < len(self.request.sample_inputs) else 'fresh'})"
            buffers.load(values)
            buffers.poison(0)
            before = {i: storage_bytes(t).clone() for i, t in enumerate(buffers.inputs)
                      if i not in buffers.aliased_outputs.values()}
            self.launch(library, buffers, what)
            for i, snapshot in before.items():
                if not torch.equal(storage_bytes(buffers.inputs[i]), snapshot):
                    raise CandidateFailure(CandidateStatus.WRONG_RESULT, f"input {i} was modified on {what}")
            self.check_outputs(buffers, refs, what)
            first = [storage_bytes(o).clone() for o in buffers.outputs]
            buffers.load(values)
            buffers.poison(1)
            self.launch(library, buffers, f"{what}, second call")
            for j, (out, previous) in enumerate(zip(buffers.outputs, first, strict=True)):
                if not torch.equal(storage_bytes(out), previous):
                    raise CandidateFailure(CandidateStatus.WRONG_RESULT, f"output {j} differs between two calls on "
                                           f"the same inputs ({what}): not deterministic, or elements left unwritten")

    def check_outputs(self, buffers: Buffers, refs: Sequence[torch.Tensor], what: str) -> None:
        for j, (out, ref) in enumerate(zip(buffers.outputs, refs, strict=True)):
            result = compare(out, ref, f"output {j}")
            self.worst_rel_l2 = max(self.worst_rel_l2, result.rel_l2_error)
            self.worst_max_scaled = max(self.worst_max_scaled, result.max_scaled_error)
            if result.problem:
                raise CandidateFailure(CandidateStatus.WRONG_RESULT, f"{result.problem} on {what}")
        args, _ = decode_call(self.card.template, buffers.inputs)
        broken = check_invariants(self.card.op, args, buffers.outputs)
        if broken:
            raise CandidateFailure(CandidateStatus.WRONG_RESULT, f"invariant violated on {what}: {broken}")

    def time(self, library: KernelLibrary) -> tuple[Summary, Summary, str | None]:
        """Candidate and eager, interleaved, inputs rotated among separate buffers, outputs
        poisoned before each candidate call and checked after the last. Each set has its own
        workspace, allocated here and poisoned with the outputs, outside the timed window; so is the
        pre-fill of an input the op mutates, before every call, candidate's or eager's.

        On cuda both then run a back-to-back series against the host clock; the third value says
        what device work the candidate's timed median missed (None: nothing)."""
        n_sets = min(TIMING_SETS, len(self.input_sets))
        sets = [self.buffers(library.workspace_bytes) for _ in range(n_sets)]
        for buffers, values in zip(sets, self.input_sets, strict=False):
            buffers.load(values)
        if self.stream is not None:
            torch.cuda.synchronize()
        print(f"timing: each call starts cold by {self.timer.cold_start_words}", flush=True)
        bound = [self.reference.bind(b.inputs) for b in sets]
        eager = [b.call for b in bound]
        stream = self.stream.cuda_stream if self.stream else None
        failures: list[int] = []

        # Each set's descriptors are packed once, as the .cast runtime keeps a card's: a timed call
        # then costs the kernel and one foreign call, not the ctypes structures built per call
        # (about 4 µs on the cpu, more than many small kernels take).
        packed = [self.packed_call(b) for b in sets]

        def candidate(s: int) -> None:
            code = library.launch_packed(*packed[s], stream)
            if code:
                failures.append(code)

        for i in range(self.request.warmup_runs):
            candidate(i % n_sets)
            eager[i % n_sets]()
        candidate_us: list[float] = []
        eager_us: list[float] = []
        for i, order in zip(range(self.request.timing_runs), itertools.cycle([(0, 1), (1, 0)]), strict=False):
            s = i % n_sets
            for which in order:
                with self.on_harness_stream():  # outside the timed call: pre-fill and poison
                    sets[s].refill(self.input_sets[s])
                    if which == 0:
                        sets[s].poison(0)
                if which == 0:
                    candidate_us.append(self.timer.time_us(lambda s=s: candidate(s),  # type: ignore[misc]
                                                           sets[s].operands()))
                else:
                    eager_us.append(self.timer.time_us(eager[s], [*sets[s].inputs, *bound[s].state]))
            if self.clearly_slower(candidate_us, eager_us):
                print(f"timing stopped after {len(candidate_us)} of {self.request.timing_runs} calls: clearly "
                      f"slower than the card's best speedup of {self.request.best_speedup:.3g}", flush=True)
                break
            if self.settled(candidate_us, eager_us):
                print(f"timing stopped after {len(candidate_us)} of {self.request.timing_runs} calls: both medians "
                      f"settled within {SETTLED_TOLERANCE:.0%}", flush=True)
                break
        candidate_summary, eager_summary = Summary.of(candidate_us), Summary.of(eager_us)
        escaped = None
        if self.stream is not None:
            candidate_series = self.timer.series(lambda k: candidate(k % n_sets))
            eager_series = self.timer.series(lambda k: eager[k % n_sets]())
            escaped = escaped_work(candidate_summary.median_us, candidate_series, eager_series)
            torch.cuda.synchronize()
        if [self.packed_call(b) for b in sets] != packed:
            raise CandidateFailure(CandidateStatus.WRONG_RESULT, "the kernel wrote into the kf_tensor descriptors it "
                                   "was given: later calls would read the shapes and pointers it left there")
        if failures:
            raise CandidateFailure(CandidateStatus.RUNTIME_ERROR, f"kf_launch returned {failures[0]} while timed")
        for s, buffers in enumerate(sets):
            if self.aliases:  # eager and the series wrote the shared buffers after the candidate's last call
                buffers.refill(self.input_sets[s])
                buffers.poison(0)
                self.launch(library, buffers, f"timed input set {s}, once more")
            self.check_outputs(buffers, self.references[s], f"timed input set {s}")
        return candidate_summary, eager_summary, escaped

    def clearly_slower(self, candidate_us: list[float], eager_us: list[float]) -> bool:
        """Whether the pairs timed so far show the candidate far below the card's best speedup: even
        its fastest quartile, against eager's median, stays under :data:`EARLY_STOP_MARGIN` of it."""
        best = self.request.best_speedup
        pairs = min(len(candidate_us), len(eager_us))
        if best <= 0 or pairs < EARLY_STOP_PAIRS or pairs % 2:  # whole (candidate, eager) + (eager, candidate) rounds
            return False
        fast_quartile = statistics.quantiles(candidate_us, n=4)[0]
        return fast_quartile > 0 and statistics.median(eager_us) / fast_quartile < EARLY_STOP_MARGIN * best

    @staticmethod
    def settled(candidate_us: list[float], eager_us: list[float]) -> bool:
        """Whether, after whole rounds of at least :data:`SETTLED_PAIRS` pairs, both medians are
        settled (:func:`kforge_torch.timing.median_settled`): the rest of the series would only
        confirm them. On a cpu every call pays a flush of the whole last-level cache (tens of ms)."""
        pairs = min(len(candidate_us), len(eager_us))
        if pairs < SETTLED_PAIRS or pairs % 2:
            return False
        return median_settled(candidate_us, SETTLED_TOLERANCE) and median_settled(eager_us, SETTLED_TOLERANCE)

    def on_harness_stream(self) -> contextlib.AbstractContextManager[object]:
        """Device work of the harness itself goes on the candidate's stream, ordered with it."""
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def floor_us(self, eager_us: float | None) -> float | None:
        """The card's memory-bandwidth floor at its working set's size; an output eager writes into
        an input is counted once. None where eager, timed here alongside the candidate, beats it."""
        bandwidth = CopyBandwidth(self.request.copy_bandwidth_gbps, tuple(self.request.copy_bandwidth_by_size))
        return memory_floor_us(self.card.inputs, self.card.outputs, bandwidth, self.aliases, eager_us)


def _evictor(library: str | None) -> Evictor | None:
    """The eviction helper the sandbox staged (cpu), None where it staged none or it does not load:
    the timer then flushes the whole cache before every call."""
    if library is None:
        return None
    try:
        return Evictor(Path(library))
    except EvictionUnavailable as exc:
        print(f"timing flushes the whole cache: {exc}", flush=True)
        return None


def run_session(request: HarnessRequest, prepared: Callable[[], None] = lambda: None) -> HarnessReport:
    """Verify and time the candidate of ``request``; failures raise :class:`CandidateFailure`.
    ``prepared`` runs once all that does not need the candidate is done (a process prepared while
    its candidate builds waits there for the library)."""
    session = Session(request)
    prepared()
    try:
        library = KernelLibrary(request.library)
    except AbiError as exc:
        raise CandidateFailure(CandidateStatus.RUNTIME_ERROR, str(exc)) from exc
    session.verify(library)
    candidate, eager, escaped = session.time(library)
    floor = session.floor_us(eager.median_us)
    report = HarnessReport(
        status=CandidateStatus.PASSED, checked_sets=len(session.input_sets),
        rel_l2_error=session.worst_rel_l2, max_scaled_error=session.worst_max_scaled,
        latency_us=candidate.median_us, latency_spread_us=candidate.spread_us,
        eager_latency_us=eager.median_us, eager_spread_us=eager.spread_us, floor_us=floor,
        workspace_bytes=library.workspace_bytes,
    )
    if escaped is not None:
        report.status = CandidateStatus.REJECTED
        report.error_message = f"suspect timing: {escaped}"
    elif floor is not None and candidate.median_us < request.floor_slack * floor:
        report.status = CandidateStatus.REJECTED
        report.error_message = (f"suspect timing: {candidate.median_us:.3g} us is under the memory-bandwidth floor "
                                f"of {floor:.3g} us")
    return report
