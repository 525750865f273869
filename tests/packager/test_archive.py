import json
import zipfile
from pathlib import Path

import pytest

from packager import (
    CastCorruptError,
    CastIntegrityError,
    CastSignatureError,
    CastVersionError,
    load_cast,
)
from packager.archive import INDEX_FILE, read_archive, write_archive


def _rewrite(src: Path, dst: Path, *, drop: str | None = None, add: dict[str, bytes] | None = None,
             replace: dict[str, bytes] | None = None) -> None:
    """Re-zip a cast the way an attacker with a ZIP tool would: members changed, index untouched."""
    with zipfile.ZipFile(src) as old, zipfile.ZipFile(dst, "w") as new:
        for name in old.namelist():
            if name == drop:
                continue
            new.writestr(name, (replace or {}).get(name, old.read(name)))
        for name, data in (add or {}).items():
            new.writestr(name, data)


def _index(path: Path) -> dict:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read(INDEX_FILE))


def test_every_file_is_listed_with_its_sha256(relu_softmax_cast) -> None:
    verified = read_archive(relu_softmax_cast.path)
    index = _index(relu_softmax_cast.path)
    assert set(index["files"]) == set(verified.files) and "manifest.json" in verified.files
    assert any(name.endswith("kernel.so") for name in verified.files)
    assert not verified.signed


def test_tampered_byte_is_refused(relu_softmax_cast, tmp_path: Path) -> None:
    data = bytearray(relu_softmax_cast.path.read_bytes())
    with zipfile.ZipFile(relu_softmax_cast.path) as archive:
        info = archive.getinfo("manifest.json")
    data[info.header_offset + 30 + len(info.filename) + 5] ^= 0xFF  # a byte of the compressed manifest
    bad = tmp_path / "bad.cast"
    bad.write_bytes(bytes(data))
    with pytest.raises(CastIntegrityError, match=r"manifest\.json"):
        load_cast(bad)


def test_replaced_file_is_refused_by_its_checksum(relu_softmax_cast, tmp_path: Path) -> None:
    bad = tmp_path / "bad.cast"
    source = next(n for n in read_archive(relu_softmax_cast.path).files if n.endswith("source.cpp"))
    _rewrite(relu_softmax_cast.path, bad, replace={source: b"int kf_launch() { return 0; }"})
    with pytest.raises(CastIntegrityError, match="does not match its sha256"):
        load_cast(bad)


def test_truncated_archive_is_refused(relu_softmax_cast, tmp_path: Path) -> None:
    bad = tmp_path / "short.cast"
    bad.write_bytes(relu_softmax_cast.path.read_bytes()[:-200])
    with pytest.raises(CastCorruptError, match="damaged or truncated"):
        load_cast(bad)


def test_unlisted_file_is_refused(relu_softmax_cast, tmp_path: Path) -> None:
    bad = tmp_path / "extra.cast"
    _rewrite(relu_softmax_cast.path, bad, add={"kernels/extra.so": b"\x7fELF"})
    with pytest.raises(CastIntegrityError, match=r"'kernels/extra\.so' is in the archive but not in the checksum list"):
        load_cast(bad)


def test_missing_file_is_refused(relu_softmax_cast, tmp_path: Path) -> None:
    bad = tmp_path / "missing.cast"
    _rewrite(relu_softmax_cast.path, bad, drop="manifest.json")
    with pytest.raises(CastIntegrityError, match=r"'manifest\.json' is listed but missing"):
        load_cast(bad)


def test_edited_checksum_list_is_refused(relu_softmax_cast, tmp_path: Path) -> None:
    index = _index(relu_softmax_cast.path)
    index["files"]["manifest.json"] = "0" * 64
    bad = tmp_path / "list.cast"
    _rewrite(relu_softmax_cast.path, bad, replace={INDEX_FILE: json.dumps(index).encode()})
    with pytest.raises(CastIntegrityError, match="checksum list"):
        load_cast(bad)


def test_wrong_format_version_is_refused(relu_softmax_cast, tmp_path: Path) -> None:
    index = _index(relu_softmax_cast.path)
    index["format_version"] = 99
    bad = tmp_path / "v99.cast"
    _rewrite(relu_softmax_cast.path, bad, replace={INDEX_FILE: json.dumps(index).encode()})
    with pytest.raises(CastVersionError, match="format version 99 is not supported"):
        load_cast(bad)


def test_not_a_zip_and_no_file_are_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.cast"
    text.write_text("hello")
    with pytest.raises(CastCorruptError, match=r"not a readable \.cast"):
        load_cast(text)
    with pytest.raises(CastCorruptError, match="no such file"):
        load_cast(tmp_path / "absent.cast")


def test_signature_verifies_only_with_the_right_key(tmp_path: Path) -> None:
    path = tmp_path / "signed.cast"
    write_archive(path, {"manifest.json": b"{}"}, signing_key=b"secret")
    assert read_archive(path, key=b"secret").signature_verified
    assert read_archive(path).signed and not read_archive(path).signature_verified
    with pytest.raises(CastSignatureError, match="does not verify"):
        read_archive(path, key=b"other")


def test_re_hashed_tampering_is_caught_by_the_signature(tmp_path: Path) -> None:
    path = tmp_path / "signed.cast"
    write_archive(path, {"manifest.json": b"{}"}, signing_key=b"secret")
    forged = tmp_path / "forged.cast"
    write_archive(forged, {"manifest.json": b'{"evil": 1}'}, signing_key=b"attacker")
    with pytest.raises(CastSignatureError):
        read_archive(forged, key=b"secret")
    unsigned = tmp_path / "unsigned.cast"
    write_archive(unsigned, {"manifest.json": b"{}"})
    with pytest.raises(CastSignatureError, match="not signed"):
        read_archive(unsigned, key=b"secret")


def test_duplicate_member_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.cast"
    write_archive(path, {"manifest.json": b"{}"})
    with zipfile.ZipFile(path, "a") as archive, pytest.warns(UserWarning):
        archive.writestr("manifest.json", b'{"x": 1}')
    with pytest.raises(CastIntegrityError, match="more than once"):
        read_archive(path)


def test_failed_write_keeps_the_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "keep.cast"
    write_archive(path, {"manifest.json": b"{}"})
    before = path.read_bytes()
    with pytest.raises(ValueError, match="reserved"):
        write_archive(path, {INDEX_FILE: b"x"})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.cast"]
