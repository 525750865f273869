"""The dashboard's client against a real forge service on loopback."""

from __future__ import annotations

import math
import socket
from pathlib import Path

import grpc
import pytest

from forge_service.runs import CAST_FILE
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from servicekit.security import Security
from tests.ui.seeding import (
    ANSWER,
    COMPILE_LOG,
    FAILED_ERROR,
    FAILED_RUN_ID,
    FAILURES,
    FAILURES_RUN_ID,
    LLM_PROPOSER,
    LLM_RUN_ID,
    SLOWER_ID,
)
from ui.client import ForgeClient, ForgeError
from ui.connection import ForgeTarget


@pytest.fixture(scope="module")
def client(forge_address: str) -> ForgeClient:
    return ForgeClient(ForgeTarget(forge_address, Security()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_runs_cards_tree_and_candidates_come_back_as_plain_data(client: ForgeClient, runs_dir: Path) -> None:
    runs = {r.run_id: r for r in client.list_runs()}
    assert runs[LLM_RUN_ID].proposer == LLM_PROPOSER and runs[LLM_RUN_ID].best_e2e_speedup == 1.25
    assert runs[FAILED_RUN_ID].error == FAILED_ERROR
    (card,) = client.list_cards(LLM_RUN_ID)
    assert card.speedup == 2.0 and card.evaluations == 3
    tree = client.card_tree(LLM_RUN_ID, card.card_id)
    assert tree.best_lineage() == ["c3c3c3c3c3c3", "a1a1a1a1a1a1"]
    nodes = {n.candidate_id: n for n in tree.nodes}
    # the forge replays the card's tree: visits and value cover each candidate's subtree
    assert [nodes[c].visits for c in ("a1a1a1a1a1a1", "b2b2b2b2b2b2", "c3c3c3c3c3c3")] == [3, 1, 1]
    assert nodes["a1a1a1a1a1a1"].value == pytest.approx((math.log(500 / 400) + math.log(500 / 250)) / 2)
    assert nodes["c3c3c3c3c3c3"].value == pytest.approx(math.log(2.0)) and nodes["b2b2b2b2b2b2"].value is None
    broken = client.candidate(LLM_RUN_ID, "b2b2b2b2b2b2")
    assert broken.status == "COMPILE_ERROR" and broken.log_tail == COMPILE_LOG
    assert broken.exchanges[0].response == ANSWER
    assert "# Run " + LLM_RUN_ID in client.report_markdown(LLM_RUN_ID)
    cast = client.export_cast(LLM_RUN_ID)
    assert cast == (runs_dir / LLM_RUN_ID / CAST_FILE).read_bytes()


def test_run_events_replay_a_finished_run_in_order_with_each_candidates_verdict(client: ForgeClient) -> None:
    events = client.run_events(FAILURES_RUN_ID)
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert (events[0].message, events[-1].kind, events[-1].run_status) == ("run started", "status", "done")
    verdicts = {e.candidate_id: e.candidate_status for e in events if e.kind == "candidate"}
    assert verdicts == {SLOWER_ID: "PASSED", **{cid: status.value for cid, _, status, *_ in FAILURES}}
    assert next(e.speedup for e in events if e.candidate_id == SLOWER_ID) == pytest.approx(0.87)
    assert client.run_events(LLM_RUN_ID) == []  # seeded without events: the stream ends at once


def test_refusals_carry_the_forge_status_and_say_what_failed(client: ForgeClient) -> None:
    with pytest.raises(ForgeError, match="NOT_FOUND: no run 'nope'") as info:
        client.get_run("nope")
    assert info.value.code == grpc.StatusCode.NOT_FOUND and not info.value.unavailable
    with pytest.raises(ForgeError, match=r"has no \.cast yet"):
        client.export_cast(FAILED_RUN_ID)
    with pytest.raises(ForgeError, match="not executing"):
        client.cancel_run(LLM_RUN_ID)
    with pytest.raises(ForgeError, match="INVALID_ARGUMENT"):
        client.start_run(forge_pb2.RunConfig(model_spec="m.py", backend="tpu"))


def test_a_forge_that_is_down_is_reported_as_unreachable() -> None:
    address = f"127.0.0.1:{_free_port()}"
    client = ForgeClient(ForgeTarget(address, Security()), timeout_s=2.0)
    with pytest.raises(ForgeError, match=f"forge service at {address} is not reachable") as info:
        client.list_runs()
    assert info.value.unavailable
    with pytest.raises(ForgeError, match="not reachable"):
        client.run_events(LLM_RUN_ID)
