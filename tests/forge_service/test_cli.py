"""What `kforge ...` prints: JSON for scripts, tables for people."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from forge_service.cli import as_json, card_table
from kernel_forge.common.v1 import types_pb2
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from servicekit.terminal import COLUMNS
from tests.terminal_tables import assert_fits, stacked, table_rows
from tests.ui.seeding import FAILED_RUN_ID, LLM_PROPOSER, LLM_RUN_ID, seed_failed_run, seed_llm_run

ROOT = Path(__file__).resolve().parents[2]


def test_zero_counts_are_printed_and_an_unmeasured_speedup_is_not() -> None:
    printed = as_json(forge_pb2.Run(run_id="r1", status="failed"))
    assert printed["cards_total"] == 0 and printed["evaluations_done"] == 0 and printed["run_id"] == "r1"
    assert "best_e2e_speedup" not in printed
    assert as_json(forge_pb2.Run(best_e2e_speedup=1.5))["best_e2e_speedup"] == 1.5


def kforge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forge_service.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "COLUMNS": "60"})


def test_runs_fit_100_columns_with_whole_ids_and_names_and_json_stays_unwrapped(tmp_path: Path) -> None:
    seed_llm_run(tmp_path, str(ROOT / "examples" / "small_cnn.py"))
    seed_failed_run(tmp_path)
    listed = kforge("runs", "--runs-dir", str(tmp_path))
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert_fits(listed.stdout)
    rows = {row["run"][0]: stacked(row, "model\nproposer") for row in table_rows(listed.stdout, "run")}
    assert rows == {LLM_RUN_ID: ("small_cnn", LLM_PROPOSER), FAILED_RUN_ID: ("missing_model", "offline")}
    as_json = kforge("runs", "--runs-dir", str(tmp_path), "--json")
    assert as_json.returncode == 0, as_json.stderr[-3000:]
    runs = json.loads(as_json.stdout)
    assert {r["run_id"] for r in runs} == {LLM_RUN_ID, FAILED_RUN_ID}
    assert as_json.stdout == json.dumps(runs, indent=2, ensure_ascii=False) + "\n"  # not wrapped at $COLUMNS


def test_the_card_table_shows_each_eager_time_as_median_and_spread_within_100_columns() -> None:
    def card(card_id: str, **fields: float) -> types_pb2.OperatorCard:
        return types_pb2.OperatorCard(id=card_id * 16, op="aten::native_layer_norm.default", time_share=0.25,
                                      **fields)

    cards = [  # timed beside a kernel; at capture, with and without a spread; not timed
        forge_pb2.RunCard(card=card("a", eager_us=500.0, eager_spread_us=6.0), status="done",
                          eager_latency_us=1234.5, eager_spread_us=12.25, best_latency_us=600.0, speedup=2.06,
                          audit_class="custom"),
        forge_pb2.RunCard(card=card("b", eager_us=40.0, eager_spread_us=0.5), status="pending", audit_class="fallback"),
        forge_pb2.RunCard(card=card("c", eager_us=40.0), status="pending", audit_class="fallback"),
        forge_pb2.RunCard(card=card("d"), status="no_proposal", reason="the proposer had nothing",
                          audit_class="fallback"),
    ]
    out = io.StringIO()
    Console(file=out, width=COLUMNS).print(card_table(cards))
    text = out.getvalue()
    assert_fits(text)
    eager = {stacked(row, "op\ncard")[1]: row["eager µs ± IQR"] for row in table_rows(text, "share")}
    assert eager == {"a" * 16: ["1234.50 ± 12.25"], "b" * 16: ["40.00 ± 0.50"], "c" * 16: ["40.00 ± —"],
                     "d" * 16: ["—"]}
    assert "None" not in text
