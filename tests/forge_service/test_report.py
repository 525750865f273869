"""Choosing what the end-to-end check leaves on eager when the model runs slower with a .cast, or departs."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from forge_service.end_to_end import (
    EndToEnd,
    breaks_parity,
    carry_graph_figures,
    end_to_end_line,
    graph_mode_fails,
    is_slower,
    mode_rows,
    prune_reason,
)
from forge_service.packaging import (
    Pruning,
    _take_graph_pruning,
    kernel_key,
    least_saving_op,
    weakest_graph_kernel,
)
from forge_service.report import CardReport, RunReport, _with_packaging, card_reports, plot_report
from forge_service.store import CardRow, RunStore
from packager.format import build_cast
from tests.packager.conftest import MODEL, RELU, SOFTMAX, compile_kernel, entry, relu_card, softmax_card
from tests.terminal_tables import assert_fits
from tests.ui import seeding
from tests.ui.seeding import CAPTURE_SPREAD_US, EAGER_US, LLM_RUN_ID, SERIES_SPREAD_US, seed_llm_run

ROOT = Path(__file__).resolve().parents[2]


def test_the_op_estimated_to_save_least_over_its_calls_is_left_on_eager_first(tmp_path: Path) -> None:
    x = torch.randn(4, 8)
    relu = relu_card(x).model_copy(update={"call_count": 10})  # 10 calls saving about 10 us each
    softmax = softmax_card(x).model_copy(update={"call_count": 1})  # one call saving about 990 us
    kernels = [
        entry(relu, RELU, compile_kernel(RELU, tmp_path, "relu"), eager_us=100.0, kernel_us=50.0),
        entry(softmax, SOFTMAX, compile_kernel(SOFTMAX, tmp_path, "softmax"), eager_us=1000.0, kernel_us=10.0),
    ]
    manifest = build_cast(tmp_path / "m.cast", MODEL, kernels, [])
    assert {k.op for k in manifest.kernels} == {"aten::relu.default", "aten::_softmax.default"}
    assert least_saving_op(manifest) == "aten::relu.default"

    heavy_relu = relu.model_copy(update={"call_count": 1000})
    kernels[0] = entry(heavy_relu, RELU, kernels[0].artifact, eager_us=100.0, kernel_us=50.0)
    assert least_saving_op(build_cast(tmp_path / "n.cast", MODEL, kernels, [])) == "aten::_softmax.default"
    assert least_saving_op(build_cast(tmp_path / "e.cast", MODEL, [], [])) is None


def test_compiled_graphs_leave_out_one_kernel_at_a_time_the_least_faster_than_eager_first(tmp_path: Path) -> None:
    small, large = relu_card(torch.randn(4, 8)), relu_card(torch.randn(64, 8))
    assert small.id != large.id  # one op, two cards
    kernels = [
        entry(small, RELU, compile_kernel(RELU, tmp_path, "relu"), eager_us=100.0, kernel_us=50.0),  # 2x
        entry(large, RELU, compile_kernel(RELU, tmp_path, "relu2"), eager_us=100.0, kernel_us=10.0),  # 10x
        entry(softmax_card(torch.randn(4, 8)), SOFTMAX, compile_kernel(SOFTMAX, tmp_path, "softmax"),
              eager_us=100.0, kernel_us=20.0),  # 5x
    ]
    manifest = build_cast(tmp_path / "m.cast", MODEL, kernels, [])
    first = weakest_graph_kernel(manifest, "compiled")
    assert first == kernel_key("aten::relu.default", small.id)
    second = weakest_graph_kernel(manifest, "compiled", [first])
    assert second == kernel_key("aten::_softmax.default", kernels[2].card_id)
    assert weakest_graph_kernel(manifest, "compiled", [first, second]) == kernel_key("aten::relu.default", large.id)
    assert weakest_graph_kernel(manifest, "compiled", [first, second, "aten::relu.default"]) is None

    pruning = Pruning(measured=("compiled",))
    pruning.excluded["compiled"][first] = "left to inductor: slower"
    assert pruning.reason("compiled", "aten::relu.default", small.id) == "left to inductor: slower"
    assert pruning.reason("compiled", "aten::relu.default", large.id) == ""  # the op's winner stays
    assert pruning.reason("eager", "aten::relu.default", small.id) == ""
    pruning.excluded["eager"]["aten::relu.default"] = "left on eager: slower"  # eager names the whole op
    assert pruning.reason("eager", "aten::relu.default", large.id) == "left on eager: slower"


def test_the_kernels_the_measurement_child_left_out_are_recorded_per_mode(tmp_path: Path) -> None:
    x = torch.randn(4, 8)
    relu, softmax = relu_card(x), softmax_card(x)
    manifest = build_cast(tmp_path / "m.cast", MODEL, [
        entry(relu, RELU, compile_kernel(RELU, tmp_path, "relu")),
        entry(softmax, SOFTMAX, compile_kernel(SOFTMAX, tmp_path, "softmax"))], [])
    e2e = EndToEnd(measured=True, cast_compile_pruned={softmax.id: "the compiled model ran slower with the kernels"},
                   cast_cuda_graphs_pruned={relu.id: "the compiled model raised with the kernels: boom"})
    pruning = Pruning(measured=("compiled",))
    assert _take_graph_pruning(manifest, e2e, ["compiled"], pruning)
    why = pruning.reason("compiled", "aten::_softmax.default", softmax.id)
    assert why.startswith("left to inductor: the compiled model ran slower") and "least faster than eager" in why
    assert pruning.reason("compiled", "aten::relu.default", relu.id) == ""
    assert pruning.excluded["cuda_graphs"] == {}  # a mode not measured takes nothing
    assert not _take_graph_pruning(manifest, EndToEnd(measured=True), ["compiled", "cuda_graphs"], Pruning())


def test_a_compiled_mode_no_kernel_serves_keeps_the_earlier_torch_compile_figures() -> None:
    first = EndToEnd(measured=True, eager_ms=18.4, cast_ms=12.4, compile_ms=4.3, compile_speedup=4.28,
                     compile_parity_rel_error=0.63, cast_compile_kernels=2, cast_compile_ms=4.5,
                     cuda_graphs_ms=2.0, cuda_graphs_speedup=9.2)
    later = EndToEnd(measured=True, eager_ms=18.0, cast_ms=12.2, cast_speedup=1.48)
    carried = carry_graph_figures(later, first, ["compiled"])
    assert (carried.compile_ms, carried.compile_speedup, carried.compile_parity_rel_error) == (4.3, 4.28, 0.63)
    assert carried.graph_figures_carried == ["compiled"]
    assert carried.cast_compile_kernels is None and carried.cast_compile_ms is None  # the kernels' figures stay out
    assert carried.cuda_graphs_ms is None and carried.cast_ms == 12.2
    assert not graph_mode_fails(carried, "compiled")
    assert ("cast.compile", 4.3, 4.28, "no kernel: as torch.compile") in mode_rows(carried)
    assert carry_graph_figures(later, first, []) == later
    line = end_to_end_line(carried, width=400)
    assert "torch.compile 4.300 ms (x4.28)" in line
    assert "torch.compile's figures (compiled) are from the first measurement" in line
    assert "against the eager timed beside it (18.400 ms)" in line  # not the 18.0 ms eager shown above it
    assert "first measurement" not in end_to_end_line(later, width=400)
    failed = EndToEnd(measured=False, error="child crashed")
    assert carry_graph_figures(failed, first, ["compiled"]) == failed


def test_only_a_measured_cast_slower_than_eager_counts_as_slower() -> None:
    assert is_slower(EndToEnd(measured=True, eager_ms=4.3, cast_ms=5.8))
    assert not is_slower(EndToEnd(measured=True, eager_ms=4.3, cast_ms=4.1))
    assert not is_slower(EndToEnd(measured=True, eager_ms=337.95, cast_ms=338.08))  # 0.04 %: noise
    assert is_slower(EndToEnd(measured=True, eager_ms=100.0, cast_ms=101.0))
    assert not is_slower(EndToEnd(measured=False, error="model failed"))


def test_a_measured_departure_past_the_tolerance_breaks_parity_and_names_itself() -> None:
    departed = EndToEnd(measured=True, eager_ms=4.0, cast_ms=3.0, parity_max_rel_error=0.043,
                        parity_tolerance=0.02, parity_ok=False)
    assert breaks_parity(departed)
    assert "departed from eager by 4.30e-02 (tolerance 2.00e-02)" in prune_reason(departed)
    assert not breaks_parity(departed.model_copy(update={"parity_ok": True}))
    assert not breaks_parity(EndToEnd(measured=False, error="model failed"))
    slower = EndToEnd(measured=True, eager_ms=4.0, cast_ms=5.0, parity_ok=True)
    assert "ran slower with the .cast (5.000 ms against 4.000 ms eager)" in prune_reason(slower)


def flat_line(e2e: EndToEnd) -> str:
    """The terminal's end-to-end lines with their wrapping undone."""
    return " ".join(end_to_end_line(e2e).split())


def test_the_terminal_line_says_when_the_cast_runs_as_eager_or_parity_is_not_judged() -> None:
    empty = EndToEnd(measured=True, eager_ms=2.0, cast_kernels=0, parity_ok=True, parity_max_rel_error=0.0,
                     parity_tolerance=1e-3)
    assert "holds no kernel for eager use on this device, so the model runs as eager" in flat_line(empty)
    assert "The .cast holds no kernel for eager use on this device, so the model runs as eager." in RunReport(
        run_id="r", model_spec="m.py", backend="cpu", device="cpu", cards=[], end_to_end=empty, cast_path=None,
        kernels_packaged=0).markdown()
    assert ".cast" not in flat_line(empty).split(";")[0]
    unjudged = EndToEnd(measured=True, eager_ms=2.0, cast_ms=1.0, cast_speedup=2.0, cast_kernels=1, parity_ok=None,
                        parity_note="not judged: eager's own output changed by 5.00e-01")
    line = flat_line(unjudged)
    assert ".cast 1.000 ms (x2.00, same interleaved series)" in line
    assert "parity not judged" in line and "5.00e-01" in line
    assert "Parity not judged: eager's own output" in RunReport(
        run_id="r", model_spec="m.py", backend="cpu", device="cpu", cards=[], end_to_end=unjudged, cast_path=None,
        kernels_packaged=1).markdown()


def test_cast_compile_fails_when_it_raises_departs_or_runs_no_faster_than_compile_alone() -> None:
    base = {"measured": True, "eager_ms": 4.0, "compile_ms": 2.0, "cast_compile_kernels": 1}
    assert graph_mode_fails(EndToEnd(**base, cast_compile_ms=1.5, cast_compile_parity_ok=True), "compiled") == ""
    slower = EndToEnd(**base, cast_compile_ms=2.5, cast_compile_parity_ok=True)
    assert "ran slower" in graph_mode_fails(slower, "compiled")
    even = EndToEnd(**base, cast_compile_ms=1.995, cast_compile_parity_ok=True)
    assert "ran no faster with the kernels (1.995 ms against 2.000 ms" in graph_mode_fails(even, "compiled")
    # Where the two alternated, the interval decides: 1.5 ms is no win if the rounds disagree that far.
    unsure = EndToEnd(**base, cast_compile_ms=1.5, cast_compile_parity_ok=True, cast_compile_interval=[0.95, 1.8])
    assert "interval 0.95x-1.80x holds 1" in graph_mode_fails(unsure, "compiled")
    sure = EndToEnd(**base, cast_compile_ms=1.9, cast_compile_parity_ok=True, cast_compile_interval=[1.02, 1.09])
    assert graph_mode_fails(sure, "compiled") == ""
    departed = EndToEnd(**base, cast_compile_ms=1.5, cast_compile_parity_ok=False, cast_compile_parity_rel_error=0.5)
    assert "departed" in graph_mode_fails(departed, "compiled")
    raised = EndToEnd(**base, cast_compile_error="cast.compile: RuntimeError: x")
    assert "raised" in graph_mode_fails(raised, "compiled")
    assert graph_mode_fails(EndToEnd(**{**base, "cast_compile_kernels": 0}, cast_compile_ms=9.0), "compiled") == ""


def test_a_compiled_pair_closer_than_torch_compiles_own_drift_is_called_noise() -> None:
    """cast.compile 5% off torch.compile says nothing where torch.compile alone moved 10% between
    its timings before and after; past that drift the difference stands."""
    base = {"measured": True, "eager_ms": 4.0, "compile_ms": 2.0, "cast_compile_kernels": 1,
            "cast_compile_parity_ok": True}
    noisy = EndToEnd(**base, cast_compile_ms=1.9, compile_drift=0.10)
    assert "within noise: cast.compile differs from torch.compile by 5.0%, and torch.compile alone moved 10.0%" \
        in flat_line(noisy)
    report = RunReport(run_id="r", model_spec="m.py", backend="cpu", device="cpu", cards=[], end_to_end=noisy,
                       cast_path=None, kernels_packaged=1).markdown()
    assert "Within noise: cast.compile differs from torch.compile by 5.0%" in report
    assert "within noise" not in flat_line(EndToEnd(**base, cast_compile_ms=1.5, compile_drift=0.10))
    assert "within noise" not in flat_line(EndToEnd(**base, cast_compile_ms=1.9))  # drift not measured
    no_kernel = EndToEnd(**{**base, "cast_compile_kernels": 0}, cast_compile_ms=1.9, compile_drift=0.10)
    assert "within noise" not in flat_line(no_kernel)


def test_an_interleaved_compiled_pair_is_noise_only_where_its_interval_holds_one() -> None:
    base = {"measured": True, "eager_ms": 4.0, "compile_ms": 2.0, "cast_compile_kernels": 1,
            "cast_compile_parity_ok": True, "cast_compile_ms": 1.6, "cast_compile_speedup": 2.5}
    won = flat_line(EndToEnd(**base, cast_compile_interval=[1.2, 1.3]))
    assert "cast.compile 1.600 ms (x2.50, 1.25x torch.compile (95% CI 1.20-1.30, interleaved))" in won
    assert "within noise" not in won
    even = flat_line(EndToEnd(**base, cast_compile_interval=[0.9, 1.6], compile_drift=0.0))
    assert "within noise: cast.compile's speedup over torch.compile, 1.25x, has a 95% interval of 0.90x to 1.60x" \
        in even


def test_each_compiled_mode_is_judged_on_its_own_figures() -> None:
    """cast.compile wins in the default mode and loses under CUDA graphs: only the latter fails."""
    e2e = EndToEnd(measured=True, eager_ms=4.0, compile_ms=2.0, cast_compile_ms=1.5, cast_compile_kernels=2,
                   cast_compile_parity_ok=True, cuda_graphs_ms=1.0, cast_cuda_graphs_ms=1.2,
                   cast_cuda_graphs_kernels=2, cast_cuda_graphs_parity_ok=True)
    assert graph_mode_fails(e2e, "compiled") == ""
    assert graph_mode_fails(e2e, "cuda_graphs") == (
        "the compiled model with CUDA graphs ran slower with the kernels (1.200 ms against 1.000 ms for "
        "torch.compile alone)")


def test_the_report_shows_every_measured_mode_with_its_parity() -> None:
    e2e = EndToEnd(measured=True, eager_ms=4.0, cast_ms=3.0, cast_speedup=4 / 3, compile_ms=2.0, compile_speedup=2.0,
                   cast_compile_ms=1.6, cast_compile_speedup=2.5, cast_compile_kernels=2, cast_compile_parity_ok=True,
                   cuda_graphs_ms=1.0, cuda_graphs_speedup=4.0, cast_cuda_graphs_kernels=0, cast_kernels=2,
                   parity_ok=True, parity_max_rel_error=1e-6, parity_tolerance=1e-3, compile_parity_rel_error=1e-7)
    rows = {name: (ms, parity) for name, ms, _, parity in mode_rows(e2e)}
    assert rows["cast.compile"] == (1.6, "ok")
    assert rows["cast.compile reduce-overhead"] == (1.0, "no kernel: as torch.compile")
    line = flat_line(e2e)
    assert "torch.compile 2.000 ms (x2.00), cast.compile 1.600 ms (x2.50), parity ok" in line
    assert "torch.compile reduce-overhead 1.000 ms (x4.00)" in line


def test_the_terminal_lines_fit_100_columns_each_continuation_indented_under_its_line() -> None:
    e2e = EndToEnd(measured=True, eager_ms=4.0, cast_ms=3.0, cast_speedup=4 / 3, compile_ms=2.0, compile_speedup=2.0,
                   cast_compile_ms=1.6, cast_compile_speedup=2.5, cast_compile_kernels=2, cast_compile_parity_ok=True,
                   cuda_graphs_ms=1.0, cuda_graphs_speedup=4.0, cast_cuda_graphs_kernels=0, cast_kernels=2,
                   parity_ok=None, parity_max_rel_error=1e-6, parity_tolerance=1e-3,
                   parity_note="not judged: eager's own output changed by 5.00e-01 between two runs on the same inputs")
    text = end_to_end_line(e2e)
    assert_fits(text)
    lines = text.splitlines()
    assert lines[0].startswith("end to end (guards on): eager 4.000 ms, .cast 3.000 ms (x1.33, same")
    assert not lines[0].startswith(" ") and all(line.startswith("    ") for line in lines[1:3])
    assert [line for line in lines if line.startswith("  torch.compile ")] == [
        "  torch.compile 2.000 ms (x2.00), cast.compile 1.600 ms (x2.50), parity ok",
        "  torch.compile reduce-overhead 1.000 ms (x4.00), cast.compile reduce-overhead 1.000 ms (x4.00),"]
    assert lines[-1] == "      parity no kernel: as torch.compile"
    assert "eager's own output changed by 5.00e-01 between two runs on the same inputs" in flat_line(e2e)


def test_the_report_names_the_rounding_noise_it_measured_and_what_it_did_not() -> None:
    def markdown(e2e: EndToEnd) -> str:
        return RunReport(run_id="r", model_spec="m.py", backend="cuda", device="cuda", cards=[], end_to_end=e2e,
                         cast_path=None, kernels_packaged=1).markdown()

    eager_only = EndToEnd(measured=True, eager_ms=18.2, cast_ms=11.6, cast_kernels=3, parity_ok=True,
                          parity_max_rel_error=0.102, parity_tolerance=0.935, rounding_rel_error=0.748)
    text = markdown(eager_only)
    assert ("eager with its weights and inputs one ulp apart departs by 7.48e-01, torch.compile was not measured"
            in text)
    assert "—" not in text.split("Eager output parity")[1].splitlines()[0]
    carried = eager_only.model_copy(update={"compile_parity_rel_error": 0.629, "compile_ms": 4.3,
                                            "graph_figures_carried": ["compiled"]})
    text = markdown(carried)
    assert "torch.compile departs by 6.29e-01" in text
    assert "torch.compile's figures (compiled) are from the first measurement" in text


def test_a_faster_kernel_the_cast_left_out_says_why_and_the_packaging_reasons_reach_the_cards() -> None:
    def card(card_id: str, speedup: float | None) -> CardReport:
        return CardReport(card_id=card_id, op="aten::mul.Tensor", kind="aten", time_share=0.02, status="done",
                          reason="budget spent", eager_us=7.3, best_us=7.3 / speedup if speedup else None,
                          speedup=speedup, floor_us=1.1, pct_of_floor=None, audit_class="custom", evaluations=8,
                          cost_usd=0.0)

    why = "its op's misses pay the guard: 96 µs lost against 12 µs saved"
    cards = _with_packaging([card("fast", 1.39), card("slow", 0.97), card("none", None), card("kept", 2.0)],
                            {"fast": why, "slow": "slower than eager", "none": "no kernel"})
    assert [c.not_packaged for c in cards] == [why, "", "", ""]
    markdown = RunReport(run_id="r", model_spec="m.py", backend="cuda", device="cuda", cards=cards,
                         end_to_end=EndToEnd(measured=False, error="x"), cast_path=None,
                         kernels_packaged=1).markdown()
    assert f"Not packaged: `aten::mul.Tensor` (fast), 1.39x on its own: {why}." in markdown
    assert "(slow)" not in markdown.split("## End to end")[1]


def test_the_speedup_shows_its_interval_and_a_noisy_figure_says_why() -> None:
    e2e = EndToEnd(measured=True, eager_ms=4.0, cast_ms=2.0, cast_speedup=2.0, cast_kernels=1, parity_ok=True,
                   cast_speedup_interval=[1.9, 2.1], speedup_rounds=5,
                   noisy="the speedup's 95% interval is still ±5.0% after 12 rounds")
    line = flat_line(e2e)
    assert ".cast 2.000 ms (x2.00, 95% CI 1.90-2.10, same interleaved series)" in line
    assert "noisy: the speedup's 95% interval is still ±5.0% after 12 rounds" in line
    assert_fits(end_to_end_line(e2e))
    markdown = RunReport(run_id="r", model_spec="m.py", backend="cpu", device="cpu", cards=[], end_to_end=e2e,
                         cast_path=None, kernels_packaged=1).markdown()
    assert "comes from 5 interleaved rounds; its 95% interval is 1.90x to 2.10x" in markdown
    assert "Noisy figure: the speedup's 95% interval is still" in markdown


def test_a_model_that_draws_random_numbers_is_named_in_the_terminal_and_the_report() -> None:
    e2e = EndToEnd(measured=True, eager_ms=4.0, cast_ms=2.0, cast_speedup=2.0, cast_kernels=1, parity_ok=True,
                   draws_random=True)
    assert "random: the model draws random numbers (dropout left in training mode" in flat_line(e2e)
    assert_fits(end_to_end_line(e2e))
    markdown = RunReport(run_id="r", model_spec="m.py", backend="cpu", device="cpu", cards=[], end_to_end=e2e,
                         cast_path=None, kernels_packaged=1).markdown()
    assert "Random draws: the model draws random numbers" in markdown
    assert "random" not in flat_line(e2e.model_copy(update={"draws_random": False}))


def test_each_card_reports_the_spread_of_the_eager_time_it_shows(tmp_path: Path) -> None:
    seed_llm_run(tmp_path, str(ROOT / "examples" / "small_cnn.py"))
    store = RunStore(tmp_path / LLM_RUN_ID)
    untried = seeding.relu_card(time_share=0.1, eager_us=40.0).model_copy(update={"id": "0000untried0000"})
    store.put_cards([CardRow(untried.id, untried.to_json(), 1, True, "pending", "", 0, None)])
    searched, pending = card_reports(store)
    # with a kernel, the series its speedup was timed in; without, the capture's timing
    assert (searched.eager_us, searched.eager_spread_us) == (EAGER_US, SERIES_SPREAD_US)
    assert (pending.eager_us, pending.eager_spread_us) == (40.0, CAPTURE_SPREAD_US)
    store.close()


def _card(**fields: object) -> CardReport:
    values: dict[str, object] = dict(card_id="c1", op="aten::relu.default", kind="aten", time_share=0.5,
                                     status="done", reason="", eager_us=500.0, eager_spread_us=5.0, best_us=250.0,
                                     speedup=2.0, floor_us=None, pct_of_floor=None, audit_class="custom",
                                     evaluations=3, cost_usd=0.0)
    values.update(fields)
    return CardReport.model_validate(values)


def test_the_report_shows_each_eager_time_as_median_and_spread_and_keeps_the_spread_in_json() -> None:
    report = RunReport(
        run_id="r1", model_spec="m.py", backend="cpu", device="test cpu",
        cards=[_card(), _card(card_id="c2", eager_spread_us=None), _card(card_id="c3", eager_us=None,
                                                                         eager_spread_us=None)],
        end_to_end=EndToEnd(measured=False, error="not run"), cast_path=None, kernels_packaged=0,
    )
    markdown = report.markdown()
    assert "| eager µs ± IQR |" in markdown
    rows = {cells[0]: cells[3] for cells in (line.split(" | ") for line in markdown.splitlines())
            if cells[0] in ("| c1", "| c2", "| c3")}
    assert rows == {"| c1": "500 ± 5", "| c2": "500 ± —", "| c3": "—"}
    assert "None" not in markdown
    cards = json.loads(report.model_dump_json())["cards"]
    assert [c["eager_spread_us"] for c in cards] == [5.0, None, None]


def test_a_report_written_before_the_spread_was_kept_still_reads() -> None:
    old = json.loads(RunReport(run_id="r1", model_spec="m.py", backend="cpu", device="", cards=[_card()],
                               end_to_end=EndToEnd(measured=False, error="not run"), cast_path=None,
                               kernels_packaged=0).model_dump_json())
    del old["cards"][0]["eager_spread_us"]
    report = RunReport.model_validate(old)
    assert report.cards[0].eager_spread_us is None and "| 500 ± — |" in report.markdown()


def test_the_plot_draws_each_eager_time_with_a_whisker_as_wide_as_its_spread(tmp_path: Path, monkeypatch) -> None:
    import matplotlib.axes

    report = RunReport(run_id="r1", model_spec="m.py", backend="cpu", device="test cpu",
                       cards=[_card(), _card(card_id="c2", eager_spread_us=None)],
                       end_to_end=EndToEnd(measured=False, error="not run"), cast_path=None, kernels_packaged=0)
    drawn: list[object] = []
    barh = matplotlib.axes.Axes.barh

    def recording(self, *args, **kwargs):  # the real drawing, its whiskers kept for the check
        drawn.append(kwargs.get("xerr"))
        return barh(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "barh", recording)
    plot_report(report, tmp_path / "report.png")
    assert (tmp_path / "report.png").stat().st_size > 0
    assert drawn == [[2.5, 0.0], None]  # eager: ±IQR/2 of its 5 µs; the best kernel: none


def test_a_compiled_only_card_is_marked_in_the_report() -> None:
    def card(card_id: str, compiled_only: bool) -> CardReport:
        return CardReport(card_id=card_id, op="aten::group_norm.default", kind="aten", time_share=0.1, status="done",
                          reason="budget spent", eager_us=9.0, best_us=1.0, speedup=9.0, floor_us=0.5,
                          pct_of_floor=50.0, audit_class="custom", evaluations=3, cost_usd=0.0,
                          compiled_only=compiled_only)

    markdown = RunReport(run_id="r", model_spec="m.py", backend="cuda", device="cuda",
                         cards=[card("eager", False), card("traced", True)],
                         end_to_end=EndToEnd(measured=False, error="x"), cast_path=None, kernels_packaged=2).markdown()
    assert "| traced | `aten::group_norm.default` (compiled only) |" in markdown
    assert "| eager | `aten::group_norm.default` |" in markdown
