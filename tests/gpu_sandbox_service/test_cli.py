"""``sandbox eval`` on a capture directory (cards.json + blobs/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.cli import main
from kforge_domain.card import BLOBS_DIR, CardSet
from tests.gpu_sandbox_service.conftest import load_corpus, softmax_card


@pytest.fixture
def capture_dir(tmp_path: Path) -> tuple[Path, str]:
    card = softmax_card(BlobStore(tmp_path / "capture" / BLOBS_DIR), rows=16, cols=32)
    CardSet(model_spec="test", device="cpu", grad_mode="inference", total_eager_us=1.0, cards=[card]).save(
        tmp_path / "capture")
    return tmp_path / "capture", card.id


def test_eval_json_carries_the_result_fields(capture_dir: tuple[Path, str], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    cards, card_id = capture_dir
    source = tmp_path / "softmax.cpp"
    source.write_text(next(e for e in load_corpus("cpu") if e.name == "softmax_ok").source)
    code = main(["sandbox", "eval", "--cards", str(cards), "--card", card_id, "--source", str(source),
                 "--backend", "cpu", "--json", "--timing-runs", "3", "--work-dir", str(tmp_path / "work")])
    answer = json.loads(capsys.readouterr().out)
    assert code == 0 and answer["status"] == "PASSED" and answer["artifact_bytes"] > 0
    assert answer["latency_us"] > 0 and answer["eager_latency_us"] > 0 and answer["audit_class"] == "custom"


def test_eval_names_a_missing_card_and_exits_non_zero(capture_dir: tuple[Path, str], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    cards, _ = capture_dir
    source = tmp_path / "k.cpp"
    source.write_text("int x;")
    code = main(["sandbox", "eval", "--cards", str(cards), "--card", "nope", "--source", str(source),
                 "--backend", "cpu", "--work-dir", str(tmp_path / "work")])
    assert code == 2 and "nope" in capsys.readouterr().err
