"""The end-to-end measurement child: eager, .cast, torch.compile, in one process."""

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from forge_service.config import RunConfig
from forge_service.e2e import (
    MAX_ROUNDS,
    NO_TIME,
    ROUNDS,
    Deadline,
    interleaved,
    is_tight,
    is_worse,
    kernels_leaving,
    max_rel_error,
    noise_reason,
    parity_tolerance,
    parity_verdict,
    room_to_recompile,
    shared_copy,
    speedup_interval,
    weakest_kernel,
)
from forge_service.end_to_end import measure_end_to_end
from forge_service.phase_events import phase_events
from packager import load_cast
from packager.format import build_cast
from packager.manifest import ModelIdentity
from tests.packager.conftest import (
    RELU,
    SOFTMAX,
    compile_kernel,
    compiled_kept,
    entry,
    relu_card,
    softmax_card,
)

MODEL = Path(__file__).parent / "models" / "tiny_mlp.py"
STATEFUL_MODEL = Path(__file__).parent / "models" / "stateful_mlp.py"
DROPOUT_MODEL = Path(__file__).parent / "models" / "dropout_mlp.py"


def test_a_cast_without_kernels_is_not_compiled_a_second_time(tmp_path: Path) -> None:
    cast = tmp_path / "empty.cast"
    build_cast(cast, ModelIdentity(str(MODEL), "tiny_mlp", "r1"), [], [])
    proc = subprocess.run([sys.executable, "-m", "forge_service.e2e", "--model", str(MODEL), "--cast", str(cast)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["measured"] and result["parity_ok"] and result["parity_max_rel_error"] == 0.0
    # no kernel: the model runs as eager, so there is no .cast time to report against it
    assert result["cast_kernels"] == 0 and result["cast_ms"] is None and "cast_speedup" not in result
    assert result["eager_ms"] > 0 and result["compile_ms"] > 0
    assert "cast_compile_ms" not in result and result["kernel_stats"] == {}
    assert 0.0 <= result["compile_parity_rel_error"] < 1e-3 and result["parity_tolerance"] == 1e-3


def _softmax_cast(tmp_path: Path, source: str, name: str) -> Path:
    """A .cast whose one kernel replaces the tiny model's softmax call."""
    torch.manual_seed(0)
    x = torch.randn(64, 256)
    card = softmax_card(x)
    cast = tmp_path / f"{name}.cast"
    build_cast(cast, ModelIdentity(str(MODEL), "tiny_mlp", "r1"),
               [entry(card, source, compile_kernel(source, tmp_path, name))], [])
    return cast


def _measure(cast: Path, *extra: str, model: Path = MODEL) -> dict:
    proc = subprocess.run([sys.executable, "-m", "forge_service.e2e", "--model", str(model), "--cast", str(cast),
                           "--no-compile", *extra], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_a_kernel_that_changes_the_models_output_breaks_parity(tmp_path: Path) -> None:
    right = _measure(_softmax_cast(tmp_path, SOFTMAX, "softmax"))
    assert right["kernel_stats"] and all(s["hits"] > 0 for s in right["kernel_stats"].values())
    assert right["parity_ok"] and right["parity_max_rel_error"] < 1e-5 and right["parity_tolerance"] == 1e-3
    assert 0.0 < right["rounding_rel_error"] < 1e-5  # fp32: eager one ulp apart keeps the dtype's tolerance

    halved = SOFTMAX.replace("yr[c] /= s;", "yr[c] /= 2.f * s;")
    assert halved != SOFTMAX
    halved_cast = _softmax_cast(tmp_path, halved, "halved")
    wrong = _measure(halved_cast)
    assert not wrong["parity_ok"] and abs(wrong["parity_max_rel_error"] - 0.5) < 1e-3

    # Within twice torch.compile's own departure from eager, a departure is the model's rounding noise,
    # up to a bound only a departure of torch.compile's own past it lifts (to 1.25 times that departure):
    # the halved output stays wrong, one scaled by 1/1.1 passes.
    halved_noisy = _measure(halved_cast, "--noise-rel-error", "0.3")
    assert not halved_noisy["parity_ok"] and halved_noisy["parity_tolerance"] == pytest.approx(0.375)
    scaled = _measure(_softmax_cast(tmp_path, SOFTMAX.replace("yr[c] /= s;", "yr[c] /= 1.1f * s;"), "scaled"),
                      "--noise-rel-error", "0.15")
    assert scaled["parity_ok"] and scaled["parity_tolerance"] == 0.25
    assert abs(scaled["parity_max_rel_error"] - 1 / 11) < 1e-3


def test_a_model_that_updates_its_buffers_is_compared_call_for_call(tmp_path: Path) -> None:
    right = _measure(_softmax_cast(tmp_path, SOFTMAX, "softmax"), model=STATEFUL_MODEL)
    assert right["eager_repeat_rel_error"] == 0.0 and right["parity_ok"] and right["parity_max_rel_error"] < 1e-5
    halved = _softmax_cast(tmp_path, SOFTMAX.replace("yr[c] /= s;", "yr[c] /= 2.f * s;"), "halved")
    wrong = _measure(halved, model=STATEFUL_MODEL)
    assert wrong["parity_ok"] is False and abs(wrong["parity_max_rel_error"] - 0.5) < 1e-3


def test_parity_is_not_judged_when_eager_disagrees_with_itself() -> None:
    out = torch.ones(4)
    verdict = parity_verdict(out, out * 3, None, None, eager_repeat_rel_error=0.5)
    assert verdict["parity_ok"] is None and "5.00e-01" in verdict["parity_note"]
    assert parity_verdict(out, out * 3, None, None, eager_repeat_rel_error=0.0)["parity_ok"] is False


def test_masked_logits_compare_over_their_finite_values() -> None:
    reference = torch.tensor([1.0, float("-inf"), 2.0, float("nan")])
    assert max_rel_error(reference.clone(), reference) == 0.0
    assert 0.0 < max_rel_error(torch.tensor([1.1, float("-inf"), 2.0, float("nan")]), reference) < 0.1
    assert max_rel_error(torch.tensor([1.0, float("inf"), 2.0, float("nan")]), reference) == float("inf")
    assert max_rel_error(torch.tensor([1.0, 0.0, 2.0, float("nan")]), reference) == float("inf")


def test_the_parity_tolerance_is_the_dtypes_or_follows_compiles_departure() -> None:
    bf16 = torch.ones(2, dtype=torch.bfloat16)
    assert parity_tolerance(torch.ones(2), None) == 1e-3
    assert parity_tolerance(bf16, None) == 2e-2
    assert parity_tolerance(bf16, 0.001) == 2e-2
    assert parity_tolerance(bf16, 0.03) == 0.06
    assert parity_tolerance(bf16, 0.15) == 0.25
    assert parity_tolerance(bf16, 0.64) == pytest.approx(0.8)  # torch.compile alone departs past the cap


def _softmax_cast_kept_for_compiled_graphs(tmp_path: Path) -> tuple[Any, Path]:
    """A .cast of one softmax kernel whose verdicts keep it in compiled graphs, and its card."""
    torch.manual_seed(0)
    card = softmax_card(torch.randn(64, 256))
    cast = tmp_path / "kept.cast"
    build_cast(cast, ModelIdentity(str(MODEL), "tiny_mlp", "r1"),
               [entry(card, SOFTMAX, compile_kernel(SOFTMAX, tmp_path, "softmax"))], [],
               verdicts=compiled_kept(card))
    return card, cast


def _run_child(cast: Path, *extra: str) -> tuple[dict, str]:
    """The measuring child on the tiny MLP with ``cast``: its result and its progress (stderr)."""
    proc = subprocess.run([sys.executable, "-m", "forge_service.e2e", "--model", str(MODEL), "--cast", str(cast),
                           *extra], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout), proc.stderr


def test_each_deployment_mode_is_measured_with_its_own_parity(tmp_path: Path) -> None:
    """torch.compile against cast.compile in one process, the kernel inside the compiled graph."""
    card, cast = _softmax_cast_kept_for_compiled_graphs(tmp_path)
    result, _ = _run_child(cast, "--modes", "eager,compiled")
    assert result["compile_ms"] > 0 and result["cast_compile_ms"] > 0 and result["cast_compile_kernels"] == 1
    assert result["cast_compile_parity_ok"] and result["cast_compile_parity_rel_error"] < 1e-5
    assert result["cast_compile_kernel_stats"][card.id]["hits"] > 0
    assert result["cast_compile_speedup"] == result["eager_ms"] / result["cast_compile_ms"]
    # torch.compile alone ran on a copy of the model sharing its tensors, alternating with cast.compile.
    low, high = result["cast_compile_interval"]
    assert 0 < low <= high and "compile_drift" not in result
    assert "cuda_graphs_ms" not in result
    # Eager and the .cast interleaved until the speedup's interval is tight, or marked noisy with why.
    assert ROUNDS <= result["speedup_rounds"] <= MAX_ROUNDS
    low, high = result["cast_speedup_interval"]
    assert low <= high
    if "noisy" in result:
        assert "95% interval is still" in result["noisy"] and "load average" in result["noisy"]
    else:
        assert is_tight((low, high))


def test_the_child_leaves_out_a_kernel_that_breaks_the_compiled_model_and_compiles_it_again(tmp_path: Path) -> None:
    """With --prune-graphs the child drops the kernel the compiled model departs with and says why."""
    torch.manual_seed(0)
    card = softmax_card(torch.randn(64, 256))
    halved = SOFTMAX.replace("yr[c] /= s;", "yr[c] /= 2.f * s;")
    cast = tmp_path / "halved.cast"
    build_cast(cast, ModelIdentity(str(MODEL), "tiny_mlp", "r1"),
               [entry(card, halved, compile_kernel(halved, tmp_path, "halved"))], [], verdicts=compiled_kept(card))

    def measure(*extra: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "forge_service.e2e", "--model", str(MODEL), "--cast", str(cast),
                               "--modes", "eager,compiled", *extra], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout)

    kept = measure()  # no pruning asked: the figures are the kernel's, and they fail parity
    assert kept["cast_compile_kernels"] == 1 and kept["cast_compile_parity_ok"] is False
    assert "cast_compile_pruned" not in kept
    pruned = measure("--prune-graphs", "4")
    assert list(pruned["cast_compile_pruned"]) == [card.id]
    assert "departed from eager by 5.00e-01" in pruned["cast_compile_pruned"][card.id]
    # Nothing left to compile with: no .cast figures, so the compiled mode reads as torch.compile.
    assert pruned["cast_compile_kernels"] == 0 and "cast_compile_ms" not in pruned
    assert pruned["compile_ms"] > 0 and pruned["eager_ms"] > 0


def test_the_child_drops_first_the_loaded_kernel_least_faster_than_eager(tmp_path: Path) -> None:
    """The child's order is the forge's (packaging.weakest_graph_kernel): the record's speedup."""
    x = torch.randn(4, 8)
    relu, softmax = relu_card(x), softmax_card(x)
    cast = tmp_path / "two.cast"
    build_cast(cast, ModelIdentity(str(MODEL), "tiny_mlp", "r1"), [
        entry(relu, RELU, compile_kernel(RELU, tmp_path, "relu"), eager_us=100.0, kernel_us=50.0),  # 2x
        entry(softmax, SOFTMAX, compile_kernel(SOFTMAX, tmp_path, "softmax"), eager_us=100.0, kernel_us=10.0),
    ], [])
    loaded = load_cast(cast)
    assert weakest_kernel(loaded.kernels.values()).card_id == relu.id
    assert weakest_kernel([loaded.kernels[softmax.id]]).card_id == softmax.id
    # At parity with torch.compile once, the weakest leaves; at parity again, every one does.
    serving = list(loaded.kernels.values())
    even = "the compiled model ran no faster with the kernels (1.000 ms against 1.000 ms for torch.compile alone)"
    assert [k.card_id for k in kernels_leaving(even, serving, at_parity_before=False)] == [relu.id]
    assert {k.card_id for k in kernels_leaving(even, serving, at_parity_before=True)} == {relu.id, softmax.id}
    slower = "the compiled model ran slower with the kernels (1.100 ms against 1.000 ms for torch.compile alone)"
    assert [k.card_id for k in kernels_leaving(slower, serving, at_parity_before=True)] == [relu.id]


def test_with_no_time_left_to_compile_again_the_kernels_leave_the_compiled_mode_and_eager_stands(
        tmp_path: Path) -> None:
    """A deadline the plain compilation already used up: the child compiles nothing more, leaves the
    kernel out of compiled graphs with the reason, and reports eager and torch.compile alone."""
    card, cast = _softmax_cast_kept_for_compiled_graphs(tmp_path)
    result, progress = _run_child(cast, "--modes", "eager,compiled", "--prune-graphs", "4", "--deadline-s", "0")
    assert result["cast_compile_pruned"] == {card.id: NO_TIME}
    assert result["cast_compile_kernels"] == 0 and "cast_compile_ms" not in result
    assert result["compile_ms"] > 0 and result["eager_ms"] > 0 and result["parity_ok"]
    assert "compiling the model with cast.compile" not in progress
    assert f"leaving 1 kernel out of the compiled graphs: {NO_TIME}" in progress


def test_a_deadline_has_room_for_a_round_only_while_the_longest_so_far_fits() -> None:
    assert Deadline(None, longest_s=1e9).room_for_another()
    deadline = Deadline(3600.0)
    assert deadline.room_for_another()
    deadline.took(100.0)
    deadline.took(10.0)  # the longest round sets the estimate
    assert deadline.longest_s == 100.0 and deadline.room_for_another()
    deadline.took(3000.0)
    assert not deadline.room_for_another()


def test_the_speedup_interval_is_over_rounds_and_tight_only_when_they_agree() -> None:
    assert speedup_interval([2.0, 2.0]) is None  # two rounds give no interval
    low, high = speedup_interval([2.0, 2.0, 2.0])
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0) and is_tight((low, high))
    wide = speedup_interval([1.5, 2.0, 2.6])
    assert wide is not None and wide[0] < 2.0 < wide[1] and not is_tight(wide)
    assert is_tight(speedup_interval([1.99, 2.0, 2.01, 2.0]))
    assert "after 3 rounds" in noise_reason(wide, 3, [1.0, 1.1, 1.2, 1.3, 2.0])


def test_a_compiled_pair_ends_early_only_when_the_kernels_are_slower() -> None:
    """Rounds 10% apart either way: three leave the pair open; more decide it, and a pair that
    looks faster is timed to the end of its rounds, never stopped at the first look that says so."""
    def rounds(ratios: list[float], **kwargs: Any) -> Any:
        each = iter(ratios * 40)  # one sample a round each: the round's ratio
        return interleaved(lambda: [next(each)], lambda: [1.0], **kwargs)

    faster, slower = [0.96, 1.16, 1.06], [1.04, 0.84, 0.94]
    short = rounds(faster, max_rounds=ROUNDS)
    assert short.interval[0] < 1 < short.interval[1] and len(short.ratios) == ROUNDS
    timed_out = rounds(faster, max_rounds=30, extra_seconds=60.0, stop_when_worse=True)
    assert len(timed_out.ratios) == 30 and timed_out.interval[0] > 1
    worse = rounds(slower, max_rounds=30, extra_seconds=60.0, stop_when_worse=True)
    assert is_worse(worse.interval) and ROUNDS < len(worse.ratios) < 30


def test_the_ops_that_break_the_output_are_named(tmp_path: Path) -> None:
    halved = _softmax_cast(tmp_path, SOFTMAX.replace("yr[c] /= s;", "yr[c] /= 2.f * s;"), "halved")
    wrong = _measure(halved)
    assert wrong["parity_ok"] is False
    assert list(wrong["failing_ops"]) == ["aten::_softmax.default"]
    assert "departed from eager by 5.00e-01" in wrong["failing_ops"]["aten::_softmax.default"]


def test_the_check_reports_each_step_as_it_goes(tmp_path: Path) -> None:
    cast = tmp_path / "empty.cast"
    build_cast(cast, ModelIdentity(str(MODEL), "tiny_mlp", "r1"), [], [])
    heard: list[str] = []
    with phase_events(heard.append):
        e2e = measure_end_to_end(RunConfig(model_spec=str(MODEL)), cast, "cpu")
    assert e2e.measured and e2e.compile_ms
    steps = [h.removeprefix("end to end: ") for h in heard if h.startswith("end to end: ")]
    assert steps[0].startswith("model loaded, eager output and rounding noise in ")
    assert steps[1].startswith("eager ") and ".cast" not in steps[1]  # no kernel: nothing timed against it
    assert steps[2:] == ["compiling the model with torch.compile", steps[3]]
    assert re.fullmatch(r"torch\.compile: [0-9.]+ ms, compiled and timed in \d+ s", steps[3]), steps[3]


def test_a_model_that_draws_random_numbers_keeps_the_dtypes_tolerance_and_compiled_pairs_compare_alike(
        tmp_path: Path) -> None:
    """Dropout in training mode: eager and the .cast draw alike from one seed, torch.compile does not, so
    torch.compile's departure must not widen the tolerance; cast.compile is compared with torch.compile."""
    card = softmax_card(torch.randn(64, 256))

    def measure(source: str, name: str) -> dict:
        cast = tmp_path / f"{name}.cast"
        build_cast(cast, ModelIdentity(str(DROPOUT_MODEL), "dropout_mlp", "r1"),
                   [entry(card, source, compile_kernel(source, tmp_path, name))], [], verdicts=compiled_kept(card))
        proc = subprocess.run([sys.executable, "-m", "forge_service.e2e", "--model", str(DROPOUT_MODEL), "--cast",
                               str(cast), "--modes", "eager,compiled"], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout)

    right = measure(SOFTMAX, "softmax")
    assert right["draws_random"] and right["eager_repeat_rel_error"] == 0.0
    assert right["compile_parity_rel_error"] > 0.1  # inductor's dropout masks are not eager's
    assert right["parity_ok"] and right["parity_tolerance"] == 1e-3 and right["parity_max_rel_error"] < 1e-5
    assert right["cast_compile_kernels"] == 1 and right["cast_compile_parity_ok"]
    assert right["cast_compile_parity_rel_error"] < 1e-5

    wrong = measure(SOFTMAX.replace("yr[c] /= s;", "yr[c] /= 2.f * s;"), "halved")
    assert wrong["parity_ok"] is False and wrong["parity_tolerance"] == 1e-3


def test_a_deterministic_model_is_not_taken_for_one_that_draws_random_numbers(tmp_path: Path) -> None:
    result = _measure(_softmax_cast(tmp_path, SOFTMAX, "softmax"))
    assert result["draws_random"] is False


class _BreakingLayer(torch.nn.Module):
    """A layer with a graph break in its forward: dynamo resumes the rest in a frame of its own,
    guarded per layer."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        shift = int(y.abs().sum().item() > 0)  # data-dependent: dynamo breaks the graph here
        return torch.relu(y) + shift


class _BreakingStack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(_BreakingLayer() for _ in range(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _counting_backend(runs: list[int]) -> Callable[..., object]:
    """A dynamo backend that runs each graph as traced and counts the compiled graphs' calls."""
    def backend(gm: torch.fx.GraphModule, example: object) -> object:
        def counted(*args: object) -> object:
            runs[0] += 1
            return gm.forward(*args)
        return counted
    return backend


def test_every_compilation_of_one_model_in_the_child_runs_compiled_whole() -> None:
    """As the child does: torch.compile alone on a copy, then cast.compile rounds on the model.
    With layers that break the graph, dynamo's default recompile limit ran the later rounds'
    resumed frames in eager (6 of 12 graphs a call from the third round)."""
    model = _BreakingStack().eval()
    x = torch.randn(2, 8)
    torch._dynamo.reset()
    twin = shared_copy(model)
    assert twin is not None
    compiled_calls: list[int] = []
    with torch.no_grad(), room_to_recompile():
        torch.compile(twin)(x)
        for _ in range(4):
            runs = [0]
            compiled = torch.compile(model, backend=_counting_backend(runs))
            compiled(x)
            runs[0] = 0
            compiled(x)
            compiled_calls.append(runs[0])
    torch._dynamo.reset()
    assert compiled_calls == [12] * 4
