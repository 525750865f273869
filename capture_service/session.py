"""One capture, in the current process: run, group, export, time, write.

This is the domain core that :mod:`capture_service.worker` runs in a child process. It never
loses work: a forward that fails mid-way or a sample budget that is too small still leaves the
cards captured so far in ``out_dir`` before the error is raised.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map

from capture_service.blobs import BlobStore
from capture_service.compiled_variants import compiled_variant_records
from capture_service.errors import DeviceUnavailable, ForwardError, SampleBudgetExceeded
from capture_service.layout import clone_exact, to_spec
from capture_service.modules import ModuleRecorder, ModuleVariant, export_program
from capture_service.options import CaptureOptions
from capture_service.progress import CaptureProgress, ProgressFn, ignore_progress
from capture_service.recorder import OperatorRecorder
from capture_service.records import CallSample, SamplePolicy, VariantRecord
from capture_service.spec import LoadedModel, describe_exception
from capture_service.timing import DEFAULT_TIMING, EagerTimer, TimingPolicy, Watched
from capture_service.traced import trace_compiled
from kforge_domain.blobs import INPUT_PREFIX, OUTPUT_PREFIX, PROGRAM_SUFFIX
from kforge_domain.card import CardSet, OperatorCard, Sample
from packager.variant import ATTRIBUTES_KWARG, decode_value

SAMPLE_WRITERS = min(4, os.cpu_count() or 1)
"""Threads writing reference samples at once (each holds about two host copies of one sample)."""


def capture_loaded(
    model_spec: str,
    loaded: LoadedModel,
    options: CaptureOptions,
    out_dir: Path,
    progress: ProgressFn = ignore_progress,
    timing: TimingPolicy = DEFAULT_TIMING,
) -> CardSet:
    """Capture ``loaded`` under ``options`` and write ``cards.json`` and blobs to ``out_dir``."""
    options = options.validated()
    device = _device(options.device)
    model = loaded.model.to(device)
    args, kwargs = tree_map(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v, (loaded.args, loaded.kwargs))

    progress(CaptureProgress("capturing", f"running the model on {device} under {options.grad_mode}", 0.1))
    policy = SamplePolicy(options.samples, options.budget_bytes)
    operators = OperatorRecorder(policy)
    modules = ModuleRecorder(model, operators, policy)
    operators.observer = modules
    failure: BaseException | None = None
    with options.grad_context():
        try:
            with modules, operators:
                model(*args, **kwargs)
        except Exception as exc:
            failure = exc
    module_variants = list(modules.card_variants())
    records = [*operators.records.values(), *(v.record for v in module_variants)]
    if options.trace_compiled and failure is None:
        records += _compiled_layouts(model, args, kwargs, records, policy, options, progress)

    store = BlobStore(out_dir)
    _export_programs(module_variants, store, progress)
    _time_records(records, device, options, timing, progress)
    progress(CaptureProgress("writing", f"writing samples of {len(records)} variants", 0.45, len(records)))
    samples, missing = _write_samples(records, store, options.budget_bytes)
    if options.allow_unsampled:
        for record in missing:
            record.mark_not_optimisable(
                f"no reference sample: its first sample did not fit the {options.budget_bytes >> 20} MiB sample budget")
        missing = []
    cards = [_card(r, samples.get(id(r), []), device.type) for r in records]
    total = _set_time_shares(cards)
    card_set = CardSet(
        model_spec=model_spec, device=device.type, grad_mode=options.grad_mode, total_eager_us=total, cards=cards
    )
    card_set.save(out_dir)
    if failure is not None:
        raise ForwardError(
            f"the model failed during its forward: {describe_exception(failure)}; the {len(cards)} cards "
            f"captured before the failure are in {out_dir}"
        ) from failure
    if missing:
        raise SampleBudgetExceeded(_budget_message(missing, options, out_dir))
    return card_set


def _device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailable("device cuda requested but no CUDA device is available in the capture process")
    return torch.device(name)


def _compiled_layouts(
    model: torch.nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    records: Sequence[VariantRecord],
    policy: SamplePolicy,
    options: CaptureOptions,
    progress: ProgressFn,
) -> list[VariantRecord]:
    """Records of the layouts torch.compile's graphs give captured calls that eager never ran; none,
    with the reason said, where the model does not trace."""
    ops = sorted({r.op for r in records if r.kind == "aten" and r.optimisable and r.samples})
    if not ops:
        return []
    progress(CaptureProgress("tracing", f"tracing the model as torch.compile does, for the layouts its graphs "
                             f"give {len(ops)} ops", 0.3))
    try:
        with options.grad_context():
            traced = trace_compiled(model, args, kwargs, ops)
            derived = compiled_variant_records(records, traced, policy)
    except Exception as exc:  # the eager cards stand; only the compiled graphs' own layouts go without cards
        progress(CaptureProgress("tracing", f"no compiled layouts: tracing the model as torch.compile does "
                                 f"failed: {describe_exception(exc)}", 0.35))
        return []
    progress(CaptureProgress("tracing", f"{len(derived)} variants only compiled graphs make "
                             f"(of {sum(traced.values())} traced calls of those ops)", 0.35))
    return derived


def _export_programs(variants: Sequence[ModuleVariant], store: BlobStore, progress: ProgressFn) -> None:
    """Attach a torch.export program to each optimisable module card (or say why there is none)."""
    todo = [v for v in variants if v.record.optimisable and v.record.samples]
    progress(CaptureProgress("exporting", f"exporting {len(todo)} module programs", 0.4))
    for variant in todo:
        try:
            program, variant.record.program_graph = export_program(variant)
            variant.record.program_blob = store.put(program, PROGRAM_SUFFIX)
        except Exception as exc:
            variant.record.mark_not_optimisable(f"torch.export failed: {describe_exception(exc)}")


def _time_records(
    records: Sequence[VariantRecord],
    device: torch.device,
    options: CaptureOptions,
    timing: TimingPolicy,
    progress: ProgressFn,
) -> None:
    """Eager latency per record (median and spread), re-run from its first sample under the
    capture's grad mode, timed as the sandbox times it (:mod:`capture_service.timing`).

    A record whose timing was disturbed (another process took the cpu, or the calls spread
    widely) is timed again once all are done, when a passing load has moved on, and keeps the
    faster of its two figures: another process can only add time. Those still disturbed the
    second time are counted in the last progress message, with the machine's load.
    """
    timer: EagerTimer | None = None  # made at the first call to time: its flush buffer is large
    disturbed: list[VariantRecord] = []
    for i, record in enumerate(records):
        if i % 10 == 0:
            fraction = 0.5 + 0.45 * i / len(records)
            progress(CaptureProgress("timing", f"timing variant {i + 1} of {len(records)}", fraction, len(records)))
        if record.eager_call is None or not record.samples:
            continue
        timer = timer or EagerTimer(device, timing)
        watched = _watch(timer, record, options)
        if watched is None:
            continue
        record.eager_us, record.eager_spread_us = watched.summary.median_us, watched.summary.spread_us
        if watched.disturbed:
            disturbed.append(record)
    if timer is None or not disturbed:
        return
    still = 0
    for record in disturbed:
        again = _watch(timer, record, options)
        if again is None:
            continue
        if record.eager_us is None or again.summary.median_us < record.eager_us:
            record.eager_us, record.eager_spread_us = again.summary.median_us, again.summary.spread_us
        still += again.disturbed
    load = os.getloadavg()[0]
    progress(CaptureProgress(
        "timing", f"timed {len(disturbed)} of {len(records)} variants again, their first timing disturbed "
        f"(preempted by another process or widely spread); {still} stayed disturbed (load average {load:.1f} "
        f"on {os.cpu_count()} cores)", 0.95, len(records)))


def _watch(timer: EagerTimer, record: VariantRecord, options: CaptureOptions) -> Watched | None:
    """The record's timing; None, the record marked not optimisable, when its call fails."""
    assert record.eager_call is not None
    try:
        with options.grad_context():
            inputs = record.samples[0].inputs
            if record.mutated_inputs:  # an in-place op writes its inputs: the sample's must stay as captured
                inputs = [clone_exact(t) for t in inputs]
            return timer.watch(record.eager_call(inputs), [*inputs, *record.eager_state])
    except Exception as exc:
        record.mark_not_optimisable(f"re-running the captured call failed: {describe_exception(exc)}")
        return None


def _write_samples(
    records: Sequence[VariantRecord], store: BlobStore, budget_bytes: int, writers: int = SAMPLE_WRITERS
) -> tuple[dict[int, list[Sample]], list[VariantRecord]]:
    """Write reference samples of optimisable records: first samples, then extras, within budget.

    Returns the samples per record (by ``id``) and the records whose first sample did not fit.
    Which samples fit is decided first, in priority order; the writes then run on a few threads
    (copying to the host, encoding, hashing and writing release the GIL), since a large model's
    samples are gigabytes.
    """
    # The cards that carry the most eager time get their samples first; vendor-library cards
    # (convolution, matmul, attention: searched only when asked for) come after all the others,
    # since their samples carry whole weight matrices and would crowd out the small cards.
    wanted = sorted((r for r in records if r.optimisable and r.samples),
                    key=lambda r: (r.vendor_op, -(r.eager_us or 0.0) * r.call_count))
    chosen: list[tuple[VariantRecord, CallSample]] = []
    fitted: set[int] = set()
    missing: list[VariantRecord] = []
    used = 0
    rounds = max((len(r.samples) for r in wanted), default=0)
    for index in range(rounds):
        for record in wanted:
            if index >= len(record.samples) or (index > 0 and id(record) not in fitted):
                continue
            sample = record.samples[index]
            if used + sample.nbytes > budget_bytes:
                if index == 0:
                    missing.append(record)
                continue
            used += sample.nbytes
            fitted.add(id(record))
            chosen.append((record, sample))

    def write(sample: CallSample) -> Sample:
        return Sample(inputs_blob=store.put_tensors(INPUT_PREFIX, sample.inputs),
                      outputs_blob=store.put_tensors(OUTPUT_PREFIX, sample.outputs))

    with ThreadPoolExecutor(max_workers=writers) as pool:
        blobs = list(pool.map(write, [sample for _, sample in chosen]))
    written: dict[int, list[Sample]] = {}
    for (record, _), sample_blobs in zip(chosen, blobs, strict=True):
        written.setdefault(id(record), []).append(sample_blobs)
    return written, missing


def _budget_message(missing: Sequence[VariantRecord], options: CaptureOptions, out_dir: Path) -> str:
    need = sum(r.samples[0].nbytes for r in missing)
    mib = 1024 * 1024
    return (
        f"the sample budget of {options.budget_bytes / mib:.1f} MiB is too small: {len(missing)} cards "
        f"(first: {missing[0].op}) got no reference sample, {need / mib:.1f} MiB more is needed; raise "
        f"--sample-budget-mb. The cards, with the samples that fit, are in {out_dir}"
    )


def _card(record: VariantRecord, samples: list[Sample], device: str) -> OperatorCard:
    return OperatorCard(
        id=record.key.id,
        kind=record.kind,
        op=record.op,
        device=device,
        key=record.key.to_json(),
        inputs=[to_spec(t) for t in record.key.tensors],
        outputs=record.outputs,
        mutated_inputs=record.mutated_inputs,
        call_count=record.call_count,
        eager_us=record.eager_us,
        eager_spread_us=record.eager_spread_us,
        module_paths=record.module_paths,
        samples=samples,
        optimisable=record.optimisable,
        reason=record.reason,
        degenerate=record.degenerate,
        vendor_op=record.vendor_op,
        compiled_only=record.compiled_only,
        module_program_blob=record.program_blob,
        module_graph=record.program_graph,
        module_attributes=_module_attributes(record),
    )


def _module_attributes(record: VariantRecord) -> dict[str, Any]:
    """A module card's attributes (``eps``, ``num_groups``, ...), read back from its key."""
    if record.kind != "module":
        return {}
    encoded = json.loads(record.key.template)["kwargs"].get(ATTRIBUTES_KWARG)
    if encoded is None:
        return {}
    pairs = decode_value(encoded, [])
    assert isinstance(pairs, list)
    return {str(name): value if isinstance(value, (bool, int, float, str, list, type(None))) else str(value)
            for name, value in pairs}


def _set_time_shares(cards: Sequence[OperatorCard]) -> float:
    """Set each card's share of the captured eager time; returns that total (aten cards only).

    Aten cards partition the model's work, so their times add up to the total. A module card's
    share is its time over the same total: it overlaps the aten cards it is made of; so does a
    compiled-only card's, whose calls eager makes in another layout.
    """
    total = sum(c.eager_us * c.call_count for c in cards
                if c.kind == "aten" and not c.compiled_only and c.eager_us is not None)
    for card in cards:
        if card.eager_us is not None and total > 0:
            card.time_share = card.eager_us * card.call_count / total
    return total
