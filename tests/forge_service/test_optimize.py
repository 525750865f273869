"""`kforge optimize` end to end on the cpu backend: real services, real compiler, real sandbox."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from capture_service.spec import load_model_spec
from forge_service.kernel_cache import CACHE_FILE, searcher_of
from forge_service.packaging import kernel_key
from packager import load_cast
from tests.terminal_tables import assert_fits, stacked, table_rows

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(__file__).parent / "models" / "tiny_mlp.py"


def kforge(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forge_service.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    runs = tmp_path_factory.mktemp("runs")
    cast = runs / "tiny.cast"
    proc = kforge("optimize", str(MODEL), "--backend", "cpu", "--budget", "2", "--max-cards", "2", "--json",
                  "--cuda-graphs", "--out", str(cast), "--runs-dir", str(runs))
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcome = json.loads(proc.stdout)
    assert proc.stdout == json.dumps(outcome, indent=2, ensure_ascii=False) + "\n"  # plain JSON, never wrapped
    # The services it started, fork servers included, were released before the event loop closed.
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
    return runs, outcome


def test_a_run_captures_searches_and_packages(first_run: tuple[Path, dict]) -> None:
    runs, out = first_run
    run = out["run"]
    assert run["status"] == "done"
    assert run["evaluations_done"] == 4 and run["evaluations_budget"] == 4
    searched = [c for c in out["cards"] if c["status"] == "done"]
    assert len(searched) == 2
    assert {c["card"]["op"] for c in searched} <= {"aten::silu.default", "aten::softmax.int", "aten::mul.Tensor",
                                                  "aten::_softmax.default"}
    for card in searched:
        assert card["evaluations"] == 2
        assert card["best_candidate_id"], card  # every searched op has a passing kernel
        assert card["audit_class"] == ("custom" if card["speedup"] > 1.0 else "fallback")
    report = out["report"]
    run_dir = Path(run["run_dir"])
    assert all((run_dir / name).is_file() for name in ("report.json", "report.md", "report.png", "model.cast"))
    assert (run_dir / "bundle" / "bundle.json").is_file()  # what `packager build` reads
    assert report["end_to_end"]["measured"], report["end_to_end"]
    assert report["end_to_end"]["parity_ok"]
    # Every deployment mode was measured, and the manifest says what each decided per kernel.
    assert report["compiled_measured"] and report["end_to_end"]["compile_ms"] > 0
    assert report["cuda_graphs_measured"] and report["end_to_end"]["cuda_graphs_ms"] > 0
    manifest = load_cast(runs / "tiny.cast").manifest
    for kernel in manifest.kernels:
        assert kernel.eager.verdict in ("kept", "pruned")
        for mode, pruned in (("compiled", "pruned_compiled_ops"), ("cuda_graphs", "pruned_cuda_graphs_ops")):
            assert kernel.mode_verdict(mode).verdict in ("kept", "pruned")
            left_out = kernel.op in report[pruned] or kernel_key(kernel.op, kernel.card_id) in report[pruned]
            assert (kernel.mode_verdict(mode).verdict == "pruned") == left_out
    if any(k.compiled.verdict == "kept" for k in manifest.kernels):
        assert report["end_to_end"]["cast_compile_parity_ok"]
    if any(k.cuda_graphs.verdict == "kept" for k in manifest.kernels):
        assert report["end_to_end"]["cast_cuda_graphs_parity_ok"]
    verify = subprocess.run([sys.executable, "-m", "packager.cli", "verify", str(runs / "tiny.cast")],
                            capture_output=True, text=True, cwd=ROOT)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_the_cast_gives_eager_outputs_and_counts_its_calls(first_run: tuple[Path, dict]) -> None:
    runs, out = first_run
    cast = load_cast(runs / "tiny.cast")
    loaded = load_model_spec(str(MODEL))
    with torch.inference_mode():
        reference = loaded.model(*loaded.args)
        with cast.applied_to(loaded.model):
            result = loaded.model(*loaded.args)
    torch.testing.assert_close(result, reference, rtol=1e-4, atol=1e-5)
    stats = cast.stats()
    assert len(stats) == out["report"]["kernels_packaged"]
    faster = {c["card_id"] for c in out["report"]["cards"] if c["speedup"] and c["speedup"] > 1.0}
    assert set(stats) <= faster  # only kernels that beat eager are packaged
    for card_id, entry in stats.items():
        # a kernel kept for compiled graphs alone (its eager verdict pruned) never sees an eager call
        calls = 1 if cast.kernels[card_id].serves_eager else 0
        assert entry["calls"] == calls and entry["hits"] + sum(entry["fallbacks"].values()) == calls


def test_runs_and_report_read_the_store(first_run: tuple[Path, dict]) -> None:
    runs, out = first_run
    listed = kforge("runs", "--json", "--runs-dir", str(runs))
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)] == [out["run"]["run_id"]]
    report = kforge("report", out["run"]["run_id"], "--runs-dir", str(runs))
    assert report.returncode == 0 and "## End to end" in report.stdout and "| cast.compile |" in report.stdout
    run_dir = Path(out["run"]["run_dir"])
    assert report.stdout == (run_dir / "report.md").read_text().rstrip("\n") + "\n"  # not wrapped to a width
    as_json = kforge("report", out["run"]["run_id"], "--runs-dir", str(runs), "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == json.loads((run_dir / "report.json").read_text())


def _again(out: dict, runs: Path) -> tuple[list[str], dict, sqlite3.Connection]:
    """The first run's searched cards optimized again with the kernel cache under ``runs``: their
    ids, the run's JSON and its store."""
    # The same cards again: which two carry the most eager time can flip between runs on a busy machine.
    searched = [c["card"]["id"] for c in out["cards"] if c["status"] == "done"]
    targets = [arg for card_id in searched for arg in ("--target-card", card_id)]
    proc = kforge("optimize", str(MODEL), "--backend", "cpu", "--budget", "2", "--max-cards", "2", "--json",
                  "--runs-dir", str(runs), "--no-compile-baseline", *targets)
    assert proc.returncode == 0, proc.stderr[-3000:]
    second = json.loads(proc.stdout)
    return searched, second, sqlite3.connect(Path(second["run"]["run_dir"]) / "run.sqlite")


def test_a_second_run_starts_from_the_kernel_cache_and_may_leave_torch_compile_out(
        first_run: tuple[Path, dict]) -> None:
    runs, out = first_run
    assert out["report"]["end_to_end"]["compile_ms"] > 0
    searched, second, db = _again(out, runs)
    first_candidates = db.execute("SELECT card_id, proposer FROM candidates WHERE seq = 0").fetchall()
    assert sorted(card for card, _ in first_candidates) == sorted(searched)
    assert {p for _, p in first_candidates} == {"cache"}
    # the earlier search of each card was complete, so the cached kernel alone finishes it
    assert second["run"]["evaluations_done"] == len(first_candidates)
    e2e = second["report"]["end_to_end"]
    assert e2e["measured"] and e2e["eager_ms"] > 0 and e2e.get("compile_ms") is None, e2e


def test_cards_searched_with_other_templates_are_searched_again_from_the_cached_kernel(
        first_run: tuple[Path, dict], tmp_path: Path) -> None:
    runs, out = first_run
    cache = sqlite3.connect(tmp_path / CACHE_FILE)  # the first run's cache, as an older release left it
    sqlite3.connect(runs / CACHE_FILE).backup(cache)
    cache.execute("UPDATE kernels SET proposer = 'offline@0000000000000000'")
    cache.commit()
    cached = dict(cache.execute("SELECT card_id, knobs_json FROM kernels").fetchall())
    cache.close()
    # the first kernel these templates render for each card, whichever of the first run's won
    earlier = sqlite3.connect(Path(out["run"]["run_dir"]) / "run.sqlite")
    first_knobs = {card: json.loads(knobs) for card, knobs in
                   earlier.execute("SELECT card_id, knobs_json FROM candidates WHERE seq = 0")}
    searched, _, db = _again(out, tmp_path)
    rows = db.execute("SELECT card_id, seq, proposer, knobs_json FROM candidates ORDER BY card_id, seq").fetchall()
    for card_id in searched:
        (first, *rest) = [(proposer, json.loads(knobs)) for c, _, proposer, knobs in rows if c == card_id]
        assert first == ("cache", json.loads(cached[card_id]))
        # the search goes on from these templates' own first kernel (the cached knob set may be
        # proposed again: it no longer counts as tried)
        assert [p for p, _ in rest] == ["offline"] and rest[0][1] == first_knobs[card_id], rows
    cache = sqlite3.connect(tmp_path / CACHE_FILE)
    assert {p for (p,) in cache.execute("SELECT proposer FROM kernels")} == {searcher_of("offline")}


def test_an_unknown_model_fails_with_a_clear_message(tmp_path: Path) -> None:
    proc = kforge("optimize", str(tmp_path / "missing.py"), "--backend", "cpu", "--runs-dir", str(tmp_path))
    assert proc.returncode != 0
    assert "missing.py" in proc.stdout + proc.stderr


def test_progress_shows_on_stderr_while_json_keeps_stdout(tmp_path: Path) -> None:
    proc = kforge("optimize", str(MODEL), "--backend", "cpu", "--budget", "2", "--max-cards", "1", "--json",
                  "--no-compile-baseline", "--runs-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # stdout holds the outcome and nothing else
    (card,) = [c for c in out["cards"] if c["status"] == "done"]
    lines = proc.stderr.splitlines()
    assert "\r" not in proc.stderr, "not a terminal: plain lines"
    assert any(line.endswith("captured 5 cards") and line.startswith("[0:") for line in lines), lines
    updates = [line for line in lines if line.startswith(f"{card['card']['op']} ({card['card']['id']}): ")]
    assert ": 0/2 evaluations, no passing kernel yet | run 0/2 evaluations, " in updates[0], updates
    assert updates[0].endswith(" elapsed, estimate after the first evaluation"), updates
    last = updates[-1]
    assert re.search(r": 2/2 evaluations, best [0-9.]+ µs, [0-9.]+x \| run 2/2 evaluations, \d+:\d\d elapsed, "
                     r"about 0:00 of search left$", last), last
    assert f"best {card['best_latency_us']:.3g} µs, {card['speedup']:.2f}x" in last
    middle = [line for line in updates if ": 1/2 evaluations" in line]
    assert middle and re.search(r"run 1/2 evaluations, \d+:\d\d elapsed, about \d+:\d\d of search left$",
                                middle[0]), updates
    # the end-to-end check, minutes on a large model, shows its steps without -v too
    steps = [line for line in lines if re.match(r"\[\d+:\d\d\] (packaging|measur)", line)]
    assert steps[0].endswith("] packaging the best kernels and checking the model end to end"), lines
    assert any(line.endswith("measuring the model end to end with model.cast: eager against the .cast")
               for line in steps), steps
    assert any(" measured model.cast (" in line and " eager " in line for line in steps), steps
    assert any(re.search(r"^\[\d+:\d\d\] end to end: eager [0-9.]+ ms", line) for line in lines), lines


def test_candidates_proposed_at_once_are_different_kernels(tmp_path: Path) -> None:
    proc = kforge("optimize", str(MODEL), "--backend", "cpu", "--budget", "3", "--max-cards", "1", "--parallel", "3",
                  "--json", "--no-compile-baseline", "--runs-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(json.loads(proc.stdout)["run"]["run_dir"])
    con = sqlite3.connect(run_dir / "run.sqlite")
    try:
        knobs = [row[0] for row in con.execute("SELECT knobs_json FROM candidates WHERE source IS NOT NULL")]
    finally:
        con.close()
    assert len(knobs) == 3 and len(set(knobs)) == 3, knobs  # the three in flight at the start included


def test_a_time_limit_stops_the_search_and_still_packages_and_measures(tmp_path: Path) -> None:
    # Five cards of a small transformer hold more work than 20 s on any machine: a search that converges
    # on every card before the limit would leave the limit untested.
    model = ROOT / "examples" / "small_transformer.py"
    proc = kforge("optimize", str(model), "--backend", "cpu", "--budget", "200", "--max-cards", "6", "--json",
                  "--time-limit", "20", "--runs-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["run"]["status"] == "done" and out["run"]["evaluations_done"] < 400
    run_dir = Path(out["run"]["run_dir"])
    events = sqlite3.connect(run_dir / "run.sqlite").execute("SELECT message FROM events").fetchall()
    assert ("time limit of 20 s reached",) in events
    assert (run_dir / "model.cast").is_file() and out["report"]["end_to_end"]["measured"]


def test_cards_with_nothing_to_propose_never_take_a_slot_and_the_summary_adds_only_operator_shares(
        tmp_path: Path) -> None:
    proc = kforge("optimize", str(ROOT / "tests" / "forge_service" / "models" / "norm_block.py"), "--backend", "cpu",
                  "--budget", "1", "--max-cards", "1", "--runs-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if (p / "run.sqlite").is_file()]
    db = sqlite3.connect(run_dir / "run.sqlite")
    cards = {card_id: (json.loads(card_json), status, reason)
             for card_id, card_json, status, reason in db.execute("SELECT id, card_json, status, reason FROM cards")}
    assert [card["kind"] for card, status, _ in cards.values() if status != "skipped"] == ["aten"]
    assert not db.execute("SELECT card_id FROM events WHERE message LIKE 'nothing to propose:%'").fetchall()
    modules = {card["op"]: reason for card, _, reason in cards.values() if card["kind"] == "module"}
    for op, reason in modules.items():
        expected = "served by the one aten card it runs" if op.endswith("LayerNorm") else "the proposer has nothing"
        assert reason.startswith(expected), (op, reason)
    skipped = [card for card, status, _ in cards.values() if status == "skipped"]
    assert any(card["kind"] == "module" for card in skipped) and any(card["kind"] == "aten" for card in skipped)
    share = sum(card["time_share"] for card in skipped if card["kind"] != "module")
    text = " ".join(proc.stdout.split())
    assert f"{len(skipped)} other cards (operators: {share:.1%} of eager time) stay on eager" in text
    # What the terminal shows fits 100 columns, each searched op in full above its card id.
    assert_fits(proc.stdout)
    searched = {(card["op"], card_id) for card_id, (card, status, _) in cards.items() if status != "skipped"}
    assert {stacked(row, "op\ncard") for row in table_rows(proc.stdout, "share")} == searched
    assert "end to end (guards on): eager" in text


def test_the_next_card_is_proposed_while_the_card_before_runs_its_last_candidate(
        first_run: tuple[Path, dict]) -> None:
    """A card that has sent its last candidate lets the next one start: the next card's first
    candidate exists before the last verdict of the card before (forge_service.card_pipeline)."""
    _, out = first_run
    db = sqlite3.connect(Path(out["run"]["run_dir"]) / "run.sqlite")
    rows = db.execute("SELECT c.card_id, c.created_at, r.created_at FROM candidates c "
                      "JOIN results r ON r.candidate_id = c.id ORDER BY c.rowid").fetchall()
    first, second = rows[0][0], next(card for card, _, _ in rows if card != rows[0][0])
    last_verdict_of_first = max(verdict for card, _, verdict in rows if card == first)
    first_of_second = min(created for card, created, _ in rows if card == second)
    assert first_of_second < last_verdict_of_first, rows
    order = [card for card, _, _ in rows]
    assert order == [first] * 2 + [second] * 2  # each card's own candidates stay in turn


def test_a_time_limit_spent_before_any_candidate_says_so_and_the_run_still_ends(tmp_path: Path) -> None:
    proc = kforge("optimize", str(MODEL), "--backend", "cpu", "--json", "--time-limit", "1", "--no-compile-baseline",
                  "--runs-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["run"]["status"] == "done" and out["run"]["evaluations_done"] == 0
    events = [m for (m,) in sqlite3.connect(Path(out["run"]["run_dir"]) / "run.sqlite").execute(
        "SELECT message FROM events")]
    assert any(m.startswith("no candidate was evaluated: the time limit counts from the run's start") for m in events)


def test_under_a_time_limit_every_card_gets_a_first_round_before_any_card_gets_more(tmp_path: Path) -> None:
    proc = kforge("optimize", str(MODEL), "--backend", "cpu", "--budget", "3", "--max-cards", "2", "--json",
                  "--time-limit", "600", "--no-compile-baseline", "--runs-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    db = sqlite3.connect(Path(json.loads(proc.stdout)["run"]["run_dir"]) / "run.sqlite")
    rounds = [re.search(r"a first round of (\d+)$", message) for (message,) in
              db.execute("SELECT message FROM events WHERE kind = 'card_started' ORDER BY seq")]
    first_round = {int(m.group(1)) for m in rounds if m}
    assert len(first_round) == 1 and sum(1 for m in rounds if m) == 2  # one round each, then the rest
    (size,) = first_round
    order = [card_id for (card_id,) in db.execute("SELECT card_id FROM candidates ORDER BY rowid")]
    assert len(order) == 6 and order.count(order[0]) == 3
    # every card's first round was proposed before any card's next evaluation
    assert len(set(order[:2 * size])) == 2 and all(order[:2 * size].count(c) == size for c in set(order))
    statuses = db.execute("SELECT status, reason FROM cards WHERE selected = 1").fetchall()
    assert statuses == [("done", "budget spent")] * 2
