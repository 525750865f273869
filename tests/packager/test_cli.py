import json
import zipfile
from pathlib import Path

import pytest
import torch

from packager.bundle import BUNDLE_FILE, RunBundle, read_bundle, write_bundle
from packager.cli import main
from packager.format import FallbackEntry, build_cast
from tests.packager.conftest import MODEL, RELU, entry, relu_card
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
    assert code == 1 and "no run bundle or run directory 'run-404'" in capsys.readouterr().err
    assert not (tmp_path / "x.cast").exists()


def test_build_asks_for_a_bundle_where_a_run_directory_holds_none(tmp_path: Path, capsys) -> None:
    (tmp_path / "run-1").mkdir()
    (tmp_path / "run-1" / "run.sqlite").write_bytes(b"")
    assert main(["build", "run-1", "-o", str(tmp_path / "x.cast"), "--runs-dir", str(tmp_path)]) == 1
    assert "holds none: export the run's bundle first (kforge export-bundle run-1)" in capsys.readouterr().err


@pytest.fixture
def bundle(tmp_path: Path, artifacts: dict[str, bytes]) -> Path:
    relu = relu_card(torch.randn(4, 8))
    path = tmp_path / "bundle"
    write_bundle(path, RunBundle(MODEL, (entry(relu, RELU, artifacts["relu"]),),
                                 (FallbackEntry("abc", "aten::addmm.default", "no kernel beat eager", calls=2),)))
    return path


def test_build_writes_the_cast_of_a_bundle(bundle: Path, tmp_path: Path, capsys) -> None:
    assert main(["build", str(bundle), "-o", str(tmp_path / "x.cast")]) == 0
    assert "1 kernels, 1 cards on eager" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "x.cast"), "--json"]) == 0
    built = json.loads(capsys.readouterr().out)
    (kernel,) = read_bundle(bundle).kernels
    assert built["kernels"][0]["candidate_id"] == kernel.candidate_id and built["model"]["run_id"] == "run-1"


def _edit_manifest(bundle: Path, edit) -> None:
    data = json.loads((bundle / BUNDLE_FILE).read_text())
    edit(data)
    (bundle / BUNDLE_FILE).write_text(json.dumps(data))


@pytest.mark.parametrize(("damage", "message"), [
    (lambda b: (next(b.rglob("kernel.so"))).write_bytes(b"\x7fELF evil"), "kernel.so does not match its sha256"),
    (lambda b: next(b.rglob("source.cpp")).unlink(), "cannot read kernels/"),
    (lambda b: (b / BUNDLE_FILE).write_text("{"), "bundle.json is not valid JSON"),
    (lambda b: (b / BUNDLE_FILE).unlink(), "holds none"),
    (lambda b: _edit_manifest(b, lambda d: d.update(version=9)), "bundle version 9; this packager reads version 1"),
    (lambda b: _edit_manifest(b, lambda d: d["kernels"][0].update(latency_us="fast")),
     "latency_us = 'fast' is not of type"),
    (lambda b: _edit_manifest(b, lambda d: d["kernels"][0].pop("toolchain")), "missing fields ['toolchain']"),
    (lambda b: _edit_manifest(b, lambda d: d["kernels"][0].update(arch="../../etc")),
     "card_id and arch must be safe names"),
    (lambda b: _edit_manifest(b, lambda d: d["files"].clear()), "is not in the bundle's checksum list"),
    (lambda b: _edit_manifest(b, lambda d: d["fallbacks"][0].update(shell="rm")), "unknown fields ['shell']"),
])
def test_build_refuses_a_damaged_or_altered_bundle_by_name(bundle: Path, tmp_path: Path, capsys, damage,
                                                           message: str) -> None:
    damage(bundle)
    assert main(["build", str(bundle), "-o", str(tmp_path / "x.cast")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "x.cast").exists()
