import json
import zipfile
from pathlib import Path

import pytest

from packager.cli import main
from packager.format import FallbackEntry, build_cast
from tests.packager.conftest import MODEL
from tests.terminal_tables import assert_fits, stacked, table_rows

LONG_OP = "torch.nn.modules.normalization.GroupNorm.with_a_qualified_name_far_longer_than_any_column"
LONG_REASON = ("left on eager: the model ran slower with the .cast (0.640 ms against 0.598 ms eager) and this "
               "op's kernels were estimated to save the least")


def test_inspect_lists_kernels_and_fallbacks(relu_softmax_cast, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(relu_softmax_cast.path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {k["card_id"] for k in data["kernels"]} == {relu_softmax_cast.relu.id, relu_softmax_cast.softmax.id}
    assert data["fallbacks"][0]["audit_class"] == "fallback" and data["signed"] is False
    assert main(["inspect", str(relu_softmax_cast.path)]) == 0
    table = capsys.readouterr().out
    assert "aten::relu.default" in table and "no kernel beat eager" in table


def test_inspect_fits_100_columns_with_every_op_and_reason_in_full(
        relu_softmax_cast, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(relu_softmax_cast.path)]) == 0
    kernels = capsys.readouterr().out
    assert_fits(kernels)
    rows = {stacked(row, "op\ncard") for row in table_rows(kernels, "guard µs")}
    assert rows == {(card.op, card.id) for card in (relu_softmax_cast.relu, relu_softmax_cast.softmax)}
    long = tmp_path / "long.cast"
    build_cast(long, MODEL, [], [FallbackEntry("0123456789abcdef", LONG_OP, LONG_REASON)])
    assert main(["inspect", str(long)]) == 0
    fallbacks = capsys.readouterr().out
    assert_fits(fallbacks)
    (row,) = table_rows(fallbacks, "class")
    assert stacked(row, "op\ncard") == (LONG_OP, "0123456789abcdef")
    assert " ".join(row["reason"]) == LONG_REASON


def test_inspect_json_is_the_manifest_unwrapped(relu_softmax_cast, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(relu_softmax_cast.path), "--json"]) == 0
    printed = capsys.readouterr().out
    assert printed == json.dumps(json.loads(printed), indent=1, sort_keys=True) + "\n"


def test_verify_passes_a_good_cast_and_fails_a_damaged_one(
    relu_softmax_cast, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", str(relu_softmax_cast.path)]) == 0
    assert capsys.readouterr().out.startswith("OK ")
    bad = tmp_path / "extra.cast"
    bad.write_bytes(relu_softmax_cast.path.read_bytes())
    with zipfile.ZipFile(bad, "a") as archive:
        archive.writestr("payload.sh", "echo hi")
    assert main(["verify", str(bad)]) == 1
    assert "'payload.sh' is in the archive but not in the checksum list" in capsys.readouterr().err


def test_verify_with_a_key_needs_a_signed_cast(relu_softmax_cast, tmp_path: Path, capsys) -> None:
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    assert main(["verify", str(relu_softmax_cast.path), "--key-file", str(key)]) == 1
    assert "not signed" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.write_text("")
    assert main(["verify", str(relu_softmax_cast.path), "--key-file", str(empty)]) == 1
    assert "is empty" in capsys.readouterr().err


def test_build_names_a_missing_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["build", "run-404", "-o", str(tmp_path / "x.cast"), "--runs-dir", str(tmp_path)])
    assert code == 1 and "no run directory 'run-404'" in capsys.readouterr().err
    assert not (tmp_path / "x.cast").exists()
