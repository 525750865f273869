"""End-to-end model latency and parity in each deployment mode: eager against the .cast applied
(guards on), torch.compile against ``cast.compile``, and with CUDA graphs (``mode="reduce-overhead"``)
the same pair.

Runs as a child process of the forge (``python -m forge_service.e2e``) because it imports the
user's model; prints one JSON line (forge_service.report.EndToEnd) last.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_map

from forge_service.child_progress import report
from forge_service.end_to_end import NO_FASTER, compiled_worse
from forge_service.ulp import one_ulp_apart

WARMUP = 3
MIN_REPEATS = 5
MIN_SECONDS = 1.0
ROUNDS = 3  # eager and .cast alternate, so both see the same machine conditions
MAX_ROUNDS = 12  # more rounds while the speedup's interval is wider than TIGHT_INTERVAL
TIGHT_INTERVAL = 0.02  # half-width of the speedup's 95% interval, relative, that ends the rounds
MAX_EXTRA_SECONDS = 6.0  # time the extra rounds may take on top of the first ROUNDS
# cast.compile against torch.compile: each compilation costs 25-90 s on the paper models, and the
# two compiled models often differ by a few percent (the SD3.5 VAE decoder's 6 group-norm kernels:
# 1.06x, 95% interval 0.95x-1.13x after 7 s of rounds on an H100), so the pair is timed for as long
# again as the compilation took, within these, unless its interval is tight or shows the kernels slower.
COMPILED_MAX_ROUNDS = 48
COMPILED_EXTRA_SECONDS = 24.0
# Two-sided 95% Student t quantiles by degrees of freedom (rounds - 1).
T95 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201,
       12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086}
T95_BEYOND = 2.086  # past 20 degrees of freedom, the quantile at 20 (a little wide: 2.01 at 47)
NOISE_FACTOR = 2.0
# A .cast moving the output further than this is wrong, unless torch.compile alone moves it about as far.
MAX_PARITY_TOLERANCE = 0.25
# How much further than torch.compile alone a .cast may move a model that rounding makes chaotic.
COMPILE_NOISE_MARGIN = 1.25
PARITY_SEED = 0


def grad_context(mode: str) -> contextlib.AbstractContextManager[Any]:
    if mode == "inference":
        return torch.inference_mode()
    if mode == "no_grad":
        return torch.no_grad()
    return contextlib.nullcontext()


def call(model: Callable[..., Any], inputs: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
    args, kwargs = inputs
    return model(*args, **kwargs)


def to_device(tree: Any, device: torch.device) -> Any:
    return tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, tree)


def clone_tree(tree: Any) -> Any:
    return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


class StartState:
    """The model's buffers and the inputs as they were before the first call.

    Every output compared for parity is computed from this state, with the random generator
    seeded alike: a model that updates its buffers (batch norm in training, a step counter) or
    its inputs in place, or draws random numbers, is then compared call for call rather than
    against an output computed hundreds of calls earlier.
    """

    def __init__(self, model: torch.nn.Module, inputs: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
        self._buffers = [(b, b.detach().clone()) for b in model.buffers()]
        self._inputs = clone_tree(inputs)

    def call(self, model: Callable[..., Any], inputs: Any = None) -> Any:
        """``model`` on a copy of the first call's inputs (or on ``inputs``), from the first call's state."""
        with torch.no_grad():
            for live, saved in self._buffers:
                live.copy_(saved)
        torch.manual_seed(PARITY_SEED)
        return call(model, clone_tree(self._inputs) if inputs is None else inputs)

    def call_one_ulp_apart(self, model: torch.nn.Module) -> Any:
        """As :meth:`call`, with every floating parameter and input one ulp from its value: the
        model's own rounding noise (:mod:`forge_service.ulp`). The parameters are restored exactly."""
        inputs = clone_tree(self._inputs)
        moved = [p.detach() for p in model.parameters()] + list(flat_tensors(inputs))
        with one_ulp_apart(moved):
            return self.call(model, inputs)


def _generator_states() -> list[torch.Tensor]:
    """torch's default random generators' states: the cpu's, and each GPU's once CUDA is in use."""
    states = [torch.random.get_rng_state()]
    return states + (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [])


def call_watching_random(start: StartState, model: Callable[..., Any]) -> tuple[Any, bool]:
    """:meth:`StartState.call`, and whether the call drew from torch's random generators (dropout
    in training mode, ``torch.rand*``): eager and the .cast then see the same draws from the same
    seed, but torch.compile draws its own, so its departure from eager is not rounding noise."""
    torch.manual_seed(PARITY_SEED)
    seeded = _generator_states()
    output = start.call(model)
    drawn = _generator_states()
    # GPUs the call itself brought up had no state when seeded: only the states present before are compared.
    return output, any(not torch.equal(a, b) for a, b in zip(seeded, drawn, strict=False))


def sample_ms(fn: Callable[[], Any], device: str, seconds: float) -> list[float]:
    """Wall times of ``fn`` in ms after a warm-up, for about ``seconds``."""
    for _ in range(WARMUP):
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < MIN_REPEATS or (time.perf_counter() - start < seconds and len(samples) < 200):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def flat_tensors(out: Any) -> Iterator[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, dict):
        for v in out.values():
            yield from flat_tensors(v)
    elif isinstance(out, (list, tuple)):
        for v in out:
            yield from flat_tensors(v)
    elif hasattr(out, "to_tuple"):
        yield from flat_tensors(out.to_tuple())


def max_rel_error(a: Any, b: Any) -> float:
    """The largest norm-wise relative error of ``a``'s tensors against ``b``'s (the reference).

    Non-finite values (a masked ``-inf`` logit) must sit at the same places with the same values;
    the error is then measured over the finite ones. Anything else is an infinite error.
    """
    worst = 0.0
    for x, y in zip(flat_tensors(a), flat_tensors(b), strict=False):
        if x.shape != y.shape:
            return float("inf")
        if not (x.is_floating_point() and y.is_floating_point()):
            worst = max(worst, 0.0 if torch.equal(x, y) else 1.0)
            continue
        x64, y64 = x.detach().double(), y.detach().double()
        finite = torch.isfinite(y64)
        if not torch.equal(torch.isfinite(x64), finite) or not torch.equal(_kind(x64[~finite]), _kind(y64[~finite])):
            return float("inf")
        x64, y64 = x64[finite], y64[finite]
        worst = max(worst, float((x64 - y64).norm() / y64.norm().clamp_min(1e-30)))
    return worst


def _kind(non_finite: torch.Tensor) -> torch.Tensor:
    """NaN, +inf and -inf as 0, 1 and -1: equal where both tensors hold the same non-finite value."""
    return non_finite.nan_to_num(nan=0.0, posinf=1.0, neginf=-1.0)


def tolerance(out: Any) -> float:
    dtypes = {t.dtype for t in flat_tensors(out)}
    return 2e-2 if dtypes & {torch.float16, torch.bfloat16} else 1e-3


def parity_tolerance(reference: Any, noise_rel_error: float | None) -> float:
    """The largest output departure from eager that still counts as parity.

    A deep low-precision model amplifies rounding: torch.compile, which fuses the same math
    in fp32, departs from eager too, and so does eager with its weights one ulp apart
    (:func:`rounding_noise` takes the larger). A .cast within ``NOISE_FACTOR`` times that departure
    is within the model's own rounding noise, up to ``MAX_PARITY_TOLERANCE``; below the dtype's
    tolerance it always is. A model so chaotic that torch.compile departs further than that (a
    deep bf16 model with random weights) is judged against torch.compile itself: a .cast may
    depart ``COMPILE_NOISE_MARGIN`` times as far, which still rejects an unrelated output (a
    random one departs by about 1.4).
    """
    noise = noise_rel_error or 0.0
    return max(tolerance(reference), min(MAX_PARITY_TOLERANCE, NOISE_FACTOR * noise), COMPILE_NOISE_MARGIN * noise)


def one_ulp_departure(model: torch.nn.Module, start: StartState, reference: Any) -> float | None:
    """Eager's departure from ``reference`` with its weights and inputs one ulp apart; None where the
    model does not run so (its inputs carry meaning in their bits) and gives no yardstick."""
    try:
        return max_rel_error(start.call_one_ulp_apart(model), reference)
    except Exception:  # the model's own error with moved inputs: the check goes on without this yardstick
        return None


def rounding_noise(compile_rel_error: float | None, one_ulp_rel_error: float | None) -> float | None:
    """The model's own rounding noise: the larger of torch.compile's departure from eager (where
    measured) and eager's departure with its weights and inputs one ulp apart, so the parity
    verdict does not hang on whether torch.compile was part of the check."""
    known = [e for e in (compile_rel_error, one_ulp_rel_error) if e is not None and math.isfinite(e)]
    return max(known) if known else None


def parity_verdict(reference: Any, with_cast: Any, compiled_output: Any, noise_rel_error: float | None,
                   eager_repeat_rel_error: float) -> dict[str, Any]:
    """The parity fields of the result: the .cast's departure from eager, and whether it is within tolerance.

    Parity is not judged (``parity_ok`` None, with a note) when eager itself gives another output
    from the same inputs, buffers and seed: no tolerance would then tell a wrong kernel apart.
    """
    verdict: dict[str, Any] = {}
    noise = noise_rel_error
    if compiled_output is not None:
        noise = max_rel_error(compiled_output, reference)
        verdict["compile_parity_rel_error"] = noise
    verdict["parity_max_rel_error"] = max_rel_error(with_cast, reference)
    verdict["parity_tolerance"] = parity_tolerance(reference, noise)
    if not eager_repeat_rel_error <= tolerance(reference):
        verdict["parity_ok"] = None
        verdict["parity_note"] = (f"not judged: eager's own output changed by {eager_repeat_rel_error:.2e} between "
                                  "two calls from the same inputs, buffers and seed")
    else:
        verdict["parity_ok"] = verdict["parity_max_rel_error"] <= verdict["parity_tolerance"]
    return verdict


MODES = ("eager", "compiled", "cuda_graphs")
#: torch.compile mode per measured mode, and the result fields it fills.
COMPILE_MODES = {"compiled": "default", "cuda_graphs": "reduce-overhead"}
FIELDS = {"compiled": ("compile", "cast_compile"), "cuda_graphs": ("cuda_graphs", "cast_cuda_graphs")}


def failing_ops(cast: Any, model: torch.nn.Module, start: StartState, reference: Any, tolerance: float
                ) -> dict[str, str]:
    """The ops whose kernels alone make the model raise or move its output past ``tolerance``."""
    failing: dict[str, str] = {}
    for op in sorted({k.record.op for k in cast.kernels.values() if k.serves_eager}):
        with cast.restricted_to({op}), cast.applied_to(model):
            try:
                error = max_rel_error(start.call(model), reference)
            except Exception as exc:
                failing[op] = f"the model raised with its kernels: {type(exc).__name__}: {exc}"[:300]
                continue
        if not error <= tolerance:
            failing[op] = (f"the model's output with its kernels departed from eager by {error:.2e} "
                           f"(tolerance {tolerance:.2e})")
    return failing


def speedup_interval(ratios: list[float]) -> tuple[float, float] | None:
    """The 95% interval of the speedup from per-round ratios (eager / .cast medians of one round),
    on their logarithms, where speedups multiply; None below three rounds."""
    if len(ratios) < 3:
        return None
    logs = [math.log(r) for r in ratios]
    half = T95.get(len(logs) - 1, T95_BEYOND) * statistics.stdev(logs) / math.sqrt(len(logs))
    centre = statistics.fmean(logs)
    return math.exp(centre - half), math.exp(centre + half)


def is_tight(interval: tuple[float, float] | None) -> bool:
    return interval is not None and math.sqrt(interval[1] / interval[0]) - 1 <= TIGHT_INTERVAL


def is_worse(interval: tuple[float, float] | None) -> bool:
    """The speedup's interval lies wholly below 1: the second of the pair is slower."""
    return interval is not None and interval[1] < 1


def noise_reason(interval: tuple[float, float] | None, rounds: int, samples: list[float]) -> str:
    """Why the figure is noisy: the interval it reached, the spread of the eager samples, the load."""
    width = f"±{math.sqrt(interval[1] / interval[0]) - 1:.1%}" if interval else "unknown"
    quartiles = statistics.quantiles(samples, n=4) if len(samples) >= 4 else None
    spread = (quartiles[2] - quartiles[0]) / quartiles[1] if quartiles else float("nan")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"the speedup's 95% interval is still {width} after {rounds} rounds (target ±{TIGHT_INTERVAL:.0%}); "
            f"eager's interquartile spread is {spread:.1%} of its median; load average {load:.1f} on "
            f"{os.cpu_count()} cores")


@dataclass
class Rounds:
    """Two variants timed in alternating rounds: each one's samples and, per round, the ratio of
    the first's median to the second's (the second's speedup over the first in that round)."""

    first: list[float]
    second: list[float]
    ratios: list[float]

    @property
    def interval(self) -> tuple[float, float] | None:
        return speedup_interval(self.ratios)


def interleaved(first: Callable[[], list[float]], second: Callable[[], list[float]] | None, *,
                max_rounds: int = MAX_ROUNDS, extra_seconds: float = MAX_EXTRA_SECONDS,
                stop_when_worse: bool = False) -> Rounds:
    """``first`` and ``second`` (each times one round and returns its samples) alternated for
    :data:`ROUNDS` rounds, then more while the speedup's interval is wider than
    :data:`TIGHT_INTERVAL` (with ``stop_when_worse``, also until it lies wholly below 1) and the
    rounds and ``extra_seconds`` allow; ``second`` None times ``first`` alone, :data:`ROUNDS` rounds.
    A series is never ended early for looking faster: deciding "faster" at whichever round first
    looked so would, over many looks, call a pair faster that is not far more often than 5%."""
    rounds = Rounds([], [], [])
    started = time.perf_counter()
    for round_ in range(max_rounds):
        if round_ >= ROUNDS and (second is None or is_tight(rounds.interval)
                                 or (stop_when_worse and is_worse(rounds.interval))
                                 or time.perf_counter() - started > MIN_SECONDS + extra_seconds):
            break
        a = first()
        rounds.first += a
        if second is not None:
            b = second()
            rounds.second += b
            rounds.ratios.append(statistics.median(a) / statistics.median(b))
    return rounds


def measure_eager(cast: Any, model: torch.nn.Module, start: StartState, inputs: Any, device: str,
                  reference: Any) -> dict[str, Any]:
    """Eager against the .cast applied (guards on), interleaved round by round until the speedup's
    95% interval is tight (or the rounds run out: the figure is then marked noisy, with why);
    the .cast's output for parity."""
    result: dict[str, Any] = {}
    serving = any(k.serves_eager for k in cast.kernels.values())
    with_cast: Any = None
    if serving:
        try:
            with cast.applied_to(model):
                with_cast = start.call(model)
        except Exception as exc:
            result["cast_error"] = f"{type(exc).__name__}: {exc}"[:300]
    timed = serving and "cast_error" not in result  # a .cast with no kernel for this device runs as eager

    def with_kernels() -> list[float]:
        with cast.applied_to(model):
            return sample_ms(lambda: call(model, inputs), device, MIN_SECONDS / ROUNDS)

    rounds = interleaved(lambda: sample_ms(lambda: call(model, inputs), device, MIN_SECONDS / ROUNDS),
                         with_kernels if timed else None)
    result["eager_ms"] = statistics.median(rounds.first)
    result["cast_ms"] = statistics.median(rounds.second) if rounds.second else None
    interval = rounds.interval
    if timed:
        result.update(cast_speedup_interval=list(interval) if interval else None, speedup_rounds=len(rounds.ratios))
        if not is_tight(interval):
            result["noisy"] = noise_reason(interval, len(rounds.ratios), rounds.first)
    result["kernel_stats"] = cast.stats()
    result["with_cast"] = with_cast if serving else reference
    timed_words = f", .cast {result['cast_ms']:.3f} ms over {len(rounds.ratios)} rounds" if timed else ""
    report(f"eager {result['eager_ms']:.3f} ms{timed_words}")
    return result


@dataclass
class GraphJudge:
    """Whether ``cast.compile`` keeps its kernels: as :func:`compiled_worse` decides, with the
    departure from eager's ``reference`` output judged against ``tolerance`` and the time against
    torch.compile alone (``plain_ms``)."""

    reference: Any
    tolerance: float
    plain_ms: float

    def why_worse(self, error: str, output: Any, ms: float | None, plain_ms: float | None = None,
                  interval: list[float] | None = None) -> str:
        """Why the compiled model with the kernels is no better than without (empty: it is), against
        ``plain_ms`` and the speedup's ``interval`` where torch.compile alone alternated with it."""
        departure = None if error else max_rel_error(output, self.reference)
        parity_ok = None if departure is None else departure <= self.tolerance
        return compiled_worse(error, departure, parity_ok, ms, plain_ms or self.plain_ms, interval=interval)


def shared_copy(model: torch.nn.Module) -> torch.nn.Module | None:
    """A second instance of ``model`` holding the very same parameter and buffer tensors (no memory
    beyond the module objects), for torch.compile alone to run on while the .cast replaces module
    forwards on ``model``: the two compiled models can then alternate round by round. None where
    the model cannot be copied."""
    memo: dict[int, Any] = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    try:
        return copy.deepcopy(model, memo)
    except Exception:
        return None


def kernels_leaving(why: str, serving: list[Any], at_parity_before: bool) -> list[Any]:
    """The kernels a compiled model that is worse with ``serving`` (``why``) compiles without next:
    the weakest, or every one where it ran no faster than torch.compile alone twice in a row (even
    again without its weakest kernel: none earns its place, and each compile costs minutes)."""
    if NO_FASTER in why and at_parity_before:
        return list(serving)
    return [weakest_kernel(serving)]


def weakest_kernel(kernels: Iterable[Any]) -> Any:
    """Of loaded kernels, the one least faster than eager: the likeliest to lose to what inductor
    makes of the same call (the order the forge prunes compiled graphs in)."""
    return min(kernels, key=lambda k: k.record.speedup)


@dataclass
class Noise:
    """Eager's output and the model's rounding noise as far as known: eager one ulp apart, and
    torch.compile's departure from an earlier measurement (None where not measured)."""

    reference: Any
    rounding_rel_error: float | None
    compile_rel_error: float | None = None
    draws_random: bool = False  # torch.compile's draws differ from eager's: its departure is no yardstick

    def tolerance(self, plain_output: Any, mode: str) -> float:
        """The parity tolerance in torch.compile ``mode``; torch.compile's departure is this
        measurement's own in the default mode (``plain_output``), as the final verdict takes it."""
        compile_noise = max_rel_error(plain_output, self.reference) if mode == "default" else self.compile_rel_error
        return parity_tolerance(self.reference,
                                rounding_noise(None if self.draws_random else compile_noise, self.rounding_rel_error))

    def compiled_reference(self, plain_output: Any) -> Any:
        """What a compiled model with the kernels is compared with: eager's output, or torch.compile
        alone's (where measured) if the model draws random numbers: the compiled pair draws alike,
        eager does not."""
        return plain_output if self.draws_random and plain_output is not None else self.reference


#: Why a compiled mode's kernels are left out when the check has no time left to compile with them.
NO_TIME = ("not compiled with the kernels: another compilation would overrun the end-to-end check's time limit, "
           "and a kernel not shown to pay off in compiled graphs is not used there")
DEADLINE_MARGIN = 1.25  # a compilation may take this much longer than the longest one so far


@dataclass
class Deadline:
    """The child's time limit. A large model compiles in minutes and pruning compiles it once a
    round: a round starts only where the longest round so far still fits, so the check reports what
    it measured instead of being killed with nothing (which would ship no kernel at all)."""

    limit_s: float | None
    started: float = field(default_factory=time.perf_counter)
    longest_s: float = 0.0

    def took(self, seconds: float) -> None:
        self.longest_s = max(self.longest_s, seconds)

    def room_for_another(self) -> bool:
        if self.limit_s is None:
            return True
        return time.perf_counter() - self.started + self.longest_s * DEADLINE_MARGIN <= self.limit_s


@contextlib.contextmanager
def room_to_recompile() -> Iterator[None]:
    """Dynamo's recompile limits raised while one process compiles one model several times.

    A frame reached from every layer (the resumption after a graph break inside a repeated layer)
    keeps a cache entry per layer and compilation. At dynamo's default limit of eight, a later
    compilation would run that frame in eager, and the measurement would charge the kernels for
    it; a user compiles the model once and never meets the limit this way.
    """
    with torch._dynamo.config.patch(recompile_limit=1024, accumulated_recompile_limit=1 << 16):
        yield


@room_to_recompile()
def measure_compiled(cast: Any, model: torch.nn.Module, start: StartState, inputs: Any, device: str,
                     mode: str, noise: Noise, prune_rounds: int = 0, deadline: Deadline | None = None
                     ) -> dict[str, Any]:
    """torch.compile alone against ``cast.compile`` in one torch.compile ``mode``, in one process.

    In the default mode torch.compile alone runs on a :func:`shared_copy` of the model, so it and
    ``cast.compile`` alternate round by round until the speedup's interval is tight, as eager and
    the .cast do. Under CUDA graphs, or where the model cannot be copied, the plain compile is
    timed before and after the .cast's (its graphs stay valid once the cast's module forwards are
    removed), and how far it moved between the two is recorded as ``{plain}_drift``. With
    ``prune_rounds``, while the model with the kernels is worse than without (:class:`GraphJudge`,
    within the tolerance the model's rounding ``noise`` sets), the weakest
    kernel leaves and the model is compiled again, up to that many times: one process, one plain
    compile, instead of a measurement per kernel. ``{cast}_pruned`` says which left and why; the
    figures are the last compilation's. Where the ``deadline`` leaves no room for another
    compilation, the kernels still serving leave with :data:`NO_TIME`.
    """
    kernels_mode = "compiled" if mode == "default" else "cuda_graphs"
    plain_name, cast_name = FIELDS[kernels_mode]
    result: dict[str, Any] = {}
    kwargs: dict[str, Any] = {} if mode == "default" else {"mode": mode}
    torch._dynamo.reset()
    label = "torch.compile" + (f"(mode={mode!r})" if kwargs else "")
    report(f"compiling the model with {label}")
    started = time.perf_counter()
    twin = shared_copy(model) if mode == "default" else None
    try:
        plain = torch.compile(twin if twin is not None else model, **kwargs)
        # Cloned: a CUDA graph's outputs are overwritten by its next replay.
        result[f"{plain_name}_output"] = clone_tree(start.call(plain))
        plain_samples = sample_ms(lambda: call(plain, inputs), device, MIN_SECONDS / 2)
    except Exception as exc:
        result[f"{plain_name}_error"] = f"torch.compile: {type(exc).__name__}: {exc}"[:300]
        return result
    judge = GraphJudge(noise.compiled_reference(result[f"{plain_name}_output"]),
                       noise.tolerance(result[f"{plain_name}_output"], mode), statistics.median(plain_samples))
    report(f"{label}: {judge.plain_ms:.3f} ms, compiled and timed in {time.perf_counter() - started:.0f} s")
    deadline = deadline or Deadline(None)
    deadline.took(time.perf_counter() - started)
    pruned: dict[str, str] = {}
    serving = [k for k in cast.kernels.values() if k.serves_graphs(kernels_mode)]
    at_parity_before = False  # the last compilation ran no faster than torch.compile alone
    plain_round = None if twin is None else (
        lambda: sample_ms(lambda: call(plain, inputs), device, MIN_SECONDS / ROUNDS))
    # Each round's backend adds dynamo cache entries beside torch.compile's: room_to_recompile
    # keeps them all compiled.
    while serving:
        kernels = f"{len(serving)} kernel{'s' if len(serving) > 1 else ''}"
        if not deadline.room_for_another():
            pruned.update(dict.fromkeys((k.card_id for k in serving), NO_TIME))
            report(f"leaving {kernels} out of the compiled graphs: {NO_TIME}")
            result[f"{cast_name}_kernels"] = 0
            break
        report(f"compiling the model with cast.compile and {kernels}")
        started = time.perf_counter()
        measured = _cast_compiled(cast, model, start, inputs, device, kwargs, cast_name, pruned, plain_round)
        deadline.took(time.perf_counter() - started)
        why = judge.why_worse(measured.get(f"{cast_name}_error", ""), measured.get(f"{cast_name}_output"),
                              measured.get(f"{cast_name}_ms"), measured.get(f"{cast_name}_plain_ms"),
                              measured.get(f"{cast_name}_interval"))
        report(f"cast.compile with {kernels}: {_ms_words(measured, cast_name)}, "
               f"compiled and timed in {time.perf_counter() - started:.0f} s")
        if not why or len(pruned) >= prune_rounds:
            result.update(measured, **{f"{cast_name}_kernels": len(serving)})
            break
        leaving = kernels_leaving(why, serving, at_parity_before)
        at_parity_before = NO_FASTER in why
        for kernel in leaving:
            pruned[kernel.card_id] = why
            serving.remove(kernel)
        which = "every kernel" if not serving else f"the {leaving[0].record.op} kernel ({leaving[0].card_id})"
        report(f"leaving {which} out of the compiled graphs: {why}")
    else:  # no kernel served this mode, or every one left
        result[f"{cast_name}_kernels"] = 0
    if pruned:
        result[f"{cast_name}_pruned"] = pruned
    interleaved_plain = result.pop(f"{cast_name}_plain_ms", None)
    if interleaved_plain is not None:  # torch.compile's figure from the series cast.compile's came from
        result[f"{plain_name}_ms"] = interleaved_plain
        return result
    after = sample_ms(lambda: call(plain, inputs), device, MIN_SECONDS / 2)
    if twin is None:
        result[f"{plain_name}_drift"] = abs(statistics.median(after) / judge.plain_ms - 1)
    result[f"{plain_name}_ms"] = statistics.median(plain_samples + after)
    return result


def _cast_compiled(cast: Any, model: torch.nn.Module, start: StartState, inputs: Any, device: str,
                   kwargs: dict[str, Any], cast_name: str, without: Collection[str],
                   plain_round: Callable[[], list[float]] | None = None) -> dict[str, Any]:
    """``cast.compile`` (less the kernels of ``without``): its output, median ms and kernel counts,
    or the error it raised. With ``plain_round`` (one round of torch.compile alone), the two
    alternate (:func:`interleaved`): torch.compile's median and the speedup's interval come from
    the same series."""
    result: dict[str, Any] = {}
    cast.reset_stats()
    with cast.without(without):
        try:
            compiled = cast.compile(model, **kwargs)
            compiling = time.perf_counter()
            result[f"{cast_name}_output"] = clone_tree(start.call(compiled))  # the first call compiles
            compile_seconds = time.perf_counter() - compiling
            if plain_round is None:
                result[f"{cast_name}_ms"] = statistics.median(sample_ms(lambda: call(compiled, inputs), device,
                                                                        MIN_SECONDS))
            else:
                rounds = interleaved(plain_round,
                                     lambda: sample_ms(lambda: call(compiled, inputs), device, MIN_SECONDS / ROUNDS),
                                     max_rounds=COMPILED_MAX_ROUNDS,
                                     extra_seconds=min(COMPILED_EXTRA_SECONDS, max(MAX_EXTRA_SECONDS, compile_seconds)),
                                     stop_when_worse=True)
                interval = rounds.interval
                result.update({f"{cast_name}_ms": statistics.median(rounds.second),
                               f"{cast_name}_plain_ms": statistics.median(rounds.first),
                               f"{cast_name}_interval": list(interval) if interval else None})
            result[f"{cast_name}_kernel_stats"] = cast.stats()
        except Exception as exc:
            result[f"{cast_name}_error"] = f"cast.compile: {type(exc).__name__}: {exc}"[:300]
        finally:
            cast.remove()
    return result


def _ms_words(measured: dict[str, Any], cast_name: str) -> str:
    error = measured.get(f"{cast_name}_error")
    return f"failed ({error})" if error else f"{measured[f'{cast_name}_ms']:.3f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--cast", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--grad-mode", default="inference")
    parser.add_argument("--modes", default="eager,compiled",
                        help="what to measure besides eager: compiled (torch.compile against cast.compile), "
                             "cuda_graphs (the same with mode=reduce-overhead)")
    parser.add_argument("--no-compile", action="store_true", help="measure eager and the .cast only")
    parser.add_argument("--prune-graphs", type=int, default=0, metavar="N",
                        help="in each compiled mode, leave out the weakest kernel and compile again while the "
                             "model is worse with the kernels, at most N times")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="start no compilation the longest one so far would carry past this many seconds "
                             "from the start; the kernels it would have judged are left out of that mode")
    parser.add_argument("--noise-rel-error", type=float, default=None,
                        help="torch.compile's departure from eager, measured earlier (with --no-compile)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if args.no_compile:
        modes = [m for m in modes if m == "eager"]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; known: {', '.join(MODES)}")

    from capture_service.spec import load_model_spec
    from packager import load_cast

    started = time.perf_counter()
    deadline = Deadline(args.deadline_s, started)
    loaded = load_model_spec(args.model)
    device = torch.device(args.device)
    model = loaded.model.to(device)  # in the mode the spec built it, as capture ran it
    inputs = (to_device(loaded.args, device), to_device(loaded.kwargs, device))
    start = StartState(model, inputs)
    result: dict[str, Any] = {"measured": True}
    with grad_context(args.grad_mode):
        reference = start.call(model)
        repeat, draws_random = call_watching_random(start, model)
        result.update(eager_repeat_rel_error=max_rel_error(repeat, reference), draws_random=draws_random)
        result["rounding_rel_error"] = one_ulp_departure(model, start, reference)
        report(f"model loaded, eager output and rounding noise in {time.perf_counter() - started:.0f} s")
        cast = load_cast(args.cast)
        result["cast_kernels"] = sum(k.serves_eager for k in cast.kernels.values())
        eager = measure_eager(cast, model, start, inputs, args.device, reference)
        with_cast = eager.pop("with_cast")
        result.update(eager)
        compiled: dict[str, Any] = {}
        compile_noise = args.noise_rel_error
        for mode in ("compiled", "cuda_graphs"):
            if mode in modes:
                compiled.update(measure_compiled(cast, model, start, inputs, args.device, COMPILE_MODES[mode],
                                                 Noise(reference, result["rounding_rel_error"], compile_noise,
                                                       draws_random), args.prune_graphs, deadline))
            if "compile_output" in compiled:
                compile_noise = max_rel_error(compiled["compile_output"], reference)
                result["compile_parity_rel_error"] = compile_noise
    noise = rounding_noise(None if draws_random else compile_noise, result["rounding_rel_error"])
    references = Noise(reference, result["rounding_rel_error"], compile_noise, draws_random)
    if "cast_error" in result:
        result.update(parity_ok=False, parity_max_rel_error=None, parity_tolerance=parity_tolerance(reference, noise))
    else:
        result.update(parity_verdict(reference, with_cast, None, noise, result["eager_repeat_rel_error"]))
    if result["parity_ok"] is False and cast.kernels:
        report("the .cast departs from eager: looking for the ops that do")
        with grad_context(args.grad_mode):
            result["failing_ops"] = failing_ops(cast, model, start, reference, result["parity_tolerance"])
    for plain_name, cast_name in FIELDS.values():
        output = compiled.pop(f"{cast_name}_output", None)
        if output is not None:
            error = max_rel_error(output, references.compiled_reference(compiled.get(f"{plain_name}_output")))
            compiled[f"{cast_name}_parity_rel_error"] = error
            compiled[f"{cast_name}_parity_ok"] = error <= parity_tolerance(reference, noise)
    compiled.pop("compile_output", None)
    compiled.pop("cuda_graphs_output", None)
    result.update(compiled)
    errors = [compiled.get(f"{name}_error") for pair in FIELDS.values() for name in pair]
    if any(errors):
        result["compile_error"] = "; ".join(e for e in errors if e)
    for key, name in (("cast_ms", "cast_speedup"), ("compile_ms", "compile_speedup"),
                      ("cast_compile_ms", "cast_compile_speedup"), ("cuda_graphs_ms", "cuda_graphs_speedup"),
                      ("cast_cuda_graphs_ms", "cast_cuda_graphs_speedup")):
        if result.get(key):
            result[name] = result["eager_ms"] / result[key]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
