"""One AppTest per page against a real forge service on loopback holding a real `kforge optimize` run
and seeded ones (an LLM run, a failed run)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pandas as pd
import pytest

from servicekit.security import Security
from tests.ui.apptest import chart_data, code_texts, open_page, page_text, texts
from tests.ui.seeding import (
    ANSWER,
    BEST_SOURCE,
    COMPILE_LOG,
    CONV_FALLBACK,
    FAILED_ERROR,
    FAILED_RUN_ID,
    FAILURES_RUN_ID,
    LLM_PROPOSER,
    LLM_RUN_ID,
    PROMPT,
)
from ui.cast_audit import audit_cast_bytes
from ui.client import ForgeClient
from ui.connection import FORGE_ENV_VAR, ForgeTarget
from ui.tables import OTHER_CARDS
from ui.tree_graph import BEST_COLOUR
from ui.views.run import NOT_COMPILED

pytestmark = pytest.mark.usefixtures("forge_env")


def _metrics(at: object) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}  # type: ignore[attr-defined]


def test_runs_page_lists_every_run_with_progress_cost_and_speedup() -> None:
    at = open_page("runs")
    frame = at.dataframe[0].value.set_index("run")
    assert frame.loc[LLM_RUN_ID, "proposer"] == LLM_PROPOSER and frame.loc[LLM_RUN_ID, "status"] == "done"
    assert frame.loc[LLM_RUN_ID, "evaluations"] == "3/3" and frame.loc[LLM_RUN_ID, "cost $"] == pytest.approx(0.0375)
    assert frame.loc[LLM_RUN_ID, "e2e speedup"] == 1.25
    assert frame.loc[FAILED_RUN_ID, "status"] == "failed"
    assert any(FAILED_ERROR in w for w in texts(at.warning))
    assert at.text_input(key="new_run_model_spec") is not None
    assert not at.error


def test_run_page_shows_progress_cards_and_the_time_plot() -> None:
    at = open_page("run", run=LLM_RUN_ID)
    metrics = _metrics(at)
    assert metrics["Spent / granted"] == "3 / 3" and metrics["End-to-end speedup"] == "×1.25"
    assert metrics["Cost"] == "$0.0375" and metrics["Status"] == "done"
    # a finished run says how it ended, not a share of its budget
    assert not at.get("progress") and "done: the evaluation budget is spent (3 of 3 budgeted evaluations)" in texts(
        at.caption)
    row = at.dataframe[0].value.iloc[0]
    # eager time as median ± IQR, from the series timed beside the best kernel
    assert (row["op"], row["eager µs"], row["best µs"], row["speedup"], row["% of floor"], row["class"]) == (
        "aten::relu.default", "500.00 ± 5.00", 250.0, 2.0, 40.0, "custom")
    chart = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert chart["encoding"]["x"]["field"] == "time µs"
    report = next(m for m in texts(at.markdown) if "# Run " + LLM_RUN_ID in m)
    assert "| eager µs ± IQR |" in report and "| 500 ± 5 |" in report
    assert not at.error


def test_the_chosen_run_stays_chosen_on_the_next_page_without_a_query() -> None:
    at = open_page("run", run=LLM_RUN_ID)  # not the first run listed, which a page falls back to
    at.query_params.clear()  # the sidebar's links carry no query parameters
    at.switch_page("screens/card.py").run()
    assert not at.exception and at.selectbox[0].value == LLM_RUN_ID
    assert at.query_params["run"] == LLM_RUN_ID


def test_run_page_shows_why_a_run_failed() -> None:
    at = open_page("run", run=FAILED_RUN_ID)
    assert any(FAILED_ERROR in e for e in texts(at.error))
    assert any(c.startswith("failed after 0 of") for c in texts(at.caption))
    assert any("not been captured" in i for i in texts(at.info))


def test_card_page_draws_the_revision_tree_with_the_best_lineage() -> None:
    at = open_page("card", run=LLM_RUN_ID)
    dot = at.get("graphviz_chart")[0].proto.spec
    for candidate in ("a1a1a1a1", "b2b2b2b2", "c3c3c3c3", "×2.00", "compile_error", BEST_COLOUR):
        assert candidate in dot
    frame = at.dataframe[0].value.set_index("candidate")
    assert frame.loc["c3c3c3c3c3c3", "best lineage"] and not frame.loc["b2b2b2b2b2b2", "best lineage"]
    # each candidate's subtree as the search sees it: a1 holds three evaluations, two of them passed
    assert "n=3 v=+0.46" in dot and "n=1 v=—" in dot
    assert frame["visits"].to_dict() == {"a1a1a1a1a1a1": 3, "b2b2b2b2b2b2": 1, "c3c3c3c3c3c3": 1}
    # the eager time the header shows is the one the best kernel's speedup divides: it says so
    metrics = _metrics(at)
    assert metrics["Eager, same series as best"] == "500.00 ± 5.00 µs" and metrics["Speedup"] == "×2.00"
    assert metrics["Best"] == "250.00 ± 2.00 µs"  # the best kernel's median and spread, from the same series
    assert "Eager in the model" not in metrics
    helps = {m.label: m.proto.help for m in at.metric}
    assert "in the model at capture: 500.00 ± 6.00 µs" in helps["Eager, same series as best"]
    assert frame.loc["c3c3c3c3c3c3", "value"] == pytest.approx(0.6931, abs=1e-4)
    assert at.selectbox(key="card:card").value == frame.index[0] or at.selectbox(key="card:card").value
    assert not at.error


def test_candidate_page_shows_source_diff_logs_and_the_llm_exchange() -> None:
    at = open_page("candidate", run=LLM_RUN_ID, candidate="b2b2b2b2b2b2")
    assert any("COMPILE_ERROR" in w for w in texts(at.warning))
    codes = code_texts(at)
    diff = next(c for c in codes if c.startswith("--- a1a1a1a1a1a1 (parent)"))
    assert "-  return 0;" in diff and "+  return 0" in diff
    assert COMPILE_LOG in codes and PROMPT in codes and ANSWER in codes
    assert _metrics(at)["Cost"] == "$0.0125"


def test_candidate_page_opens_on_the_best_candidate_with_its_timings() -> None:
    at = open_page("candidate", run=LLM_RUN_ID)
    assert at.selectbox(key="candidate:candidate").value == "c3c3c3c3c3c3"
    metrics = _metrics(at)
    assert metrics["Kernel"] == "250.00 ± 2.00 µs" and metrics["Eager, same series"] == "500.00 ± 5.00 µs"
    assert metrics["Rel. L2 error"] == "0.00e+00"
    assert BEST_SOURCE.rstrip() in code_texts(at)
    assert any("re-measured" in s for s in texts(at.success))


def test_providers_page_compares_proposers_of_one_model() -> None:
    at = open_page("providers")
    assert at.selectbox(key="providers:model").value == "small_cnn"
    frame = at.dataframe[0].value.set_index("run")
    assert frame.loc[LLM_RUN_ID, "cost $"] == pytest.approx(0.0375) and frame.loc[LLM_RUN_ID, "LLM calls"] == 3


def test_package_page_audits_a_runs_cast_exported_over_grpc() -> None:
    at = open_page("package", run=LLM_RUN_ID)
    assert at.selectbox(key="package:run").value == LLM_RUN_ID
    metrics = _metrics(at)
    assert (metrics["custom"], metrics["backend wrapper"], metrics["fallback"]) == ("1", "0", "1")
    kernels = at.dataframe[0].value
    assert kernels["op"].tolist() == ["aten::relu.default"] and kernels["speedup"].tolist() == [2.0]
    assert "its own kernel" in kernels["why"].item()
    assert at.dataframe[1].value.to_dict("records") == [{"reason": CONV_FALLBACK[2], "cards": 1}]
    assert at.dataframe[2].value["card"].tolist() == [CONV_FALLBACK[0]]
    assert not at.error


def test_package_page_names_what_is_wrong_with_a_path(tmp_path: Path) -> None:
    at = open_page("package")
    at.radio[0].set_value("A path on the dashboard's host").run()
    at.text_input[0].input(str(tmp_path / "absent.cast")).run()
    assert any("no such file" in e for e in texts(at.error))
    (tmp_path / "junk.cast").write_bytes(b"not a zip")
    at.text_input[0].input(str(tmp_path / "junk.cast")).run()
    assert any("Not a usable .cast" in e for e in texts(at.error))


def test_every_page_shows_a_forge_that_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(FORGE_ENV_VAR, f"127.0.0.1:{port}")
    for page in ("runs", "run", "card", "candidate", "failures", "providers", "package"):
        at = open_page(page)
        assert any("not reachable" in e for e in texts(at.error)), page


# -- the run made by a real `kforge optimize` -----------------------------------------------------
@pytest.fixture(scope="module")
def forge(forge_address: str) -> ForgeClient:
    """The forge's own answers, which the pages must show."""
    return ForgeClient(ForgeTarget(forge_address, Security()))


def test_runs_page_lists_the_optimized_run(optimized_run_id: str, forge: ForgeClient) -> None:
    run = forge.get_run(optimized_run_id)
    frame = open_page("runs").dataframe[0].value.set_index("run")
    row = frame.loc[optimized_run_id]
    assert (row["model"], row["proposer"], row["status"], row["backend"]) == ("small_cnn", "offline", "done", "cpu")
    assert row["evaluations"] == f"{run.evaluations_done}/{run.evaluations_budget}"
    if run.best_e2e_speedup is not None:
        assert row["e2e speedup"] == pytest.approx(run.best_e2e_speedup)
    else:  # the .cast kept no kernel: no end-to-end speedup to show
        assert pd.isna(row["e2e speedup"])


def test_run_page_of_the_optimized_run_shows_its_searched_card(optimized_run_id: str, forge: ForgeClient) -> None:
    at = open_page("run", run=optimized_run_id)
    run = forge.get_run(optimized_run_id)
    metrics = _metrics(at)
    assert metrics["Spent / granted"] == f"{run.evaluations_done} / {run.evaluations_budget}"
    shown = f"×{run.best_e2e_speedup:.2f}" if run.best_e2e_speedup is not None else "—"
    assert metrics["End-to-end speedup"] == shown
    searched = [c for c in forge.list_cards(optimized_run_id) if c.evaluations]
    assert searched
    frame = at.dataframe[0].value.set_index("card")
    for card in searched:
        assert frame.loc[card.card_id[:8], "evaluations"] == card.evaluations
        assert frame.loc[card.card_id[:8], "speedup"] == pytest.approx(card.speedup)
    links = [link.proto.label for link in at.get("page_link")]
    assert any(searched[0].card_id[:8] in label for label in links)
    assert at.get("vega_lite_chart") and not at.error


def test_card_and_candidate_pages_of_the_optimized_run(optimized_run_id: str, forge: ForgeClient) -> None:
    card = next(c for c in forge.list_cards(optimized_run_id) if c.evaluations)
    tree = forge.card_tree(optimized_run_id, card.card_id)
    at = open_page("card", run=optimized_run_id, card=card.card_id)
    dot = at.get("graphviz_chart")[0].proto.spec
    assert all(n.candidate_id[:8] in dot for n in tree.nodes)
    frame = at.dataframe[0].value.set_index("candidate")
    assert len(frame) == len(tree.nodes)
    evaluated = [n for n in tree.nodes if n.status != "PENDING"]
    assert evaluated and all(n.visits >= 1 for n in evaluated)
    assert sum(n.visits for n in tree.nodes if not n.parent_id) == card.evaluations
    assert any(n.value for n in tree.nodes)
    for n in tree.nodes:
        assert frame.loc[n.candidate_id, "visits"] == n.visits and f"n={n.visits} v=" in dot

    child = next((n for n in tree.nodes if n.parent_id), tree.nodes[0])
    at = open_page("candidate", run=optimized_run_id, card=card.card_id, candidate=child.candidate_id)
    cand = forge.candidate(optimized_run_id, child.candidate_id)
    codes = code_texts(at)
    assert cand.source.rstrip() in codes
    if child.parent_id:
        assert any(c.startswith(f"--- {child.parent_id} (parent)") for c in codes)
    assert any("without an LLM call" in i for i in texts(at.info))
    assert not at.error


def test_providers_page_compares_the_offline_and_llm_runs(optimized_run_id: str) -> None:
    at = open_page("providers")
    assert at.selectbox(key="providers:model").value == "small_cnn"
    frame = at.dataframe[0].value.set_index("run")
    assert frame.loc[optimized_run_id, "proposer"] == "offline" and frame.loc[optimized_run_id, "cost $"] == 0
    assert frame.loc[LLM_RUN_ID, "proposer"] == LLM_PROPOSER
    assert len(at.get("vega_lite_chart")) == 2
    assert not any("Only one proposer" in i for i in texts(at.info))


def test_package_page_audits_the_optimized_runs_cast(optimized_run_id: str, forge: ForgeClient) -> None:
    audit = audit_cast_bytes(forge.export_cast(optimized_run_id))
    at = open_page("package", run=optimized_run_id)
    frames = [d.value for d in at.dataframe]
    shown = [card for frame in frames if "card" in frame.columns for card in frame["card"]]
    assert sorted(shown) == sorted(r.card_id for r in audit.rows)
    assert all(frame["why"].str.len().gt(0).all() for frame in frames if "why" in frame.columns)
    assert _metrics(at)["fallback"] == str(audit.count("fallback"))
    assert not at.error


def test_the_time_plot_shows_one_kind_of_card_at_a_time(optimized_run_id: str, forge: ForgeClient) -> None:
    kind_of = {c.card_id[:8]: c.kind for c in forge.list_cards(optimized_run_id) if c.eager_us}
    assert set(kind_of.values()) == {"aten", "module"}, "small_cnn has aten and module cards"
    at = open_page("run", run=optimized_run_id)
    for kind in ("aten", "module"):
        at.radio(key="time_plot_kind").set_value(kind).run()
        shown = {label[-9:-1] for label in chart_data(at)["card"] if label != OTHER_CARDS}
        assert shown and {kind_of[card] for card in shown} == {kind}


def test_every_eager_time_of_a_real_run_shows_its_spread(optimized_run_id: str, forge: ForgeClient) -> None:
    report = json.loads((Path(forge.get_run(optimized_run_id).run_dir) / "report.json").read_text())
    timed = [c for c in report["cards"] if c["eager_us"]]
    assert timed and all(c["eager_spread_us"] is not None for c in timed), timed
    at = open_page("run", run=optimized_run_id)
    shown = at.dataframe[0].value.set_index("card")["eager µs"]
    for card in timed:
        if card["card_id"][:8] in shown.index:
            assert shown[card["card_id"][:8]] == f"{card['eager_us']:.2f} ± {card['eager_spread_us']:.2f}"
    assert any("| eager µs ± IQR |" in m and " ± " in m for m in texts(at.markdown))


# Every page over each kind of run; "{optimized}" stands for the run of the real `kforge optimize`.
PAGE_VISITS = [
    ("runs", {}), ("run", {"run": "{optimized}"}), ("run", {"run": LLM_RUN_ID}), ("run", {"run": FAILED_RUN_ID}),
    ("card", {"run": "{optimized}"}), ("card", {"run": LLM_RUN_ID}), ("candidate", {"run": "{optimized}"}),
    ("candidate", {"run": LLM_RUN_ID}), ("candidate", {"run": LLM_RUN_ID, "candidate": "b2b2b2b2b2b2"}),
    ("providers", {}), ("package", {"run": "{optimized}"}), ("package", {"run": LLM_RUN_ID}),
    ("failures", {"run": "{optimized}"}), ("failures", {"run": LLM_RUN_ID}), ("run", {"run": FAILURES_RUN_ID}),
    ("failures", {"run": FAILURES_RUN_ID}), ("card", {"run": FAILURES_RUN_ID}), ("candidate", {"run": FAILURES_RUN_ID}),
]


@pytest.mark.parametrize(("page", "query"), PAGE_VISITS,
                         ids=[f"{page}-{'-'.join(query.values()) or 'all'}" for page, query in PAGE_VISITS])
def test_no_page_shows_a_literal_none_or_a_traceback(optimized_run_id: str, page: str, query: dict[str, str]) -> None:
    at = open_page(page, **{key: value.format(optimized=optimized_run_id) for key, value in query.items()})
    shown = page_text(at)
    assert shown and [text for text in shown if "None" in text or "Traceback" in text] == []


def test_the_run_headline_shows_torch_compile_beside_the_cast(optimized_run_id: str, forge: ForgeClient) -> None:
    e2e = json.loads((Path(forge.get_run(optimized_run_id).run_dir) / "report.json").read_text())["end_to_end"]
    assert e2e["measured"] and e2e["compile_ms"] > 0, e2e
    at = open_page("run", run=optimized_run_id)
    metrics = _metrics(at)
    assert metrics["torch.compile end to end"] == f"×{e2e['compile_speedup']:.2f}"
    cast = "—" if e2e["cast_kernels"] == 0 else f"×{e2e['cast_speedup']:.2f}"
    assert metrics[".cast end to end"] == cast
    assert any(f"eager {e2e['eager_ms']:.3f} ms" in c and f"torch.compile {e2e['compile_ms']:.3f} ms" in c
               for c in texts(at.caption))


def test_the_run_headline_says_when_torch_compile_was_not_measured() -> None:
    at = open_page("run", run=LLM_RUN_ID)
    metric = {m.label: m for m in at.metric}
    assert metric[".cast end to end"].value == "×1.25"
    assert metric["torch.compile end to end"].value == "—" and metric["torch.compile end to end"].help == NOT_COMPILED
