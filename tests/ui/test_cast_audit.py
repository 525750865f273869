from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from packager.format import FallbackEntry, ModelIdentity, build_cast
from tests.ui.seeding import relu_card, relu_kernel
from ui.cast_audit import CastAuditError, audit_cast, audit_cast_bytes


@pytest.fixture(scope="module")
def cast_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    card = relu_card(time_share=0.5, eager_us=500.0)
    path = tmp_path_factory.mktemp("cast") / "model.cast"
    build_cast(path, ModelIdentity("examples/small_cnn.py", "small_cnn", "run-1"),
               [relu_kernel(card, 500.0, 100.0)],
               [FallbackEntry("conv0", "aten::convolution.default", "vendor op: not searched")])
    return path


def test_audit_lists_kernels_with_their_numbers_and_fallbacks_with_their_reason(cast_path: Path) -> None:
    audit = audit_cast(cast_path)
    assert (audit.model_name, audit.run_id, audit.archs) == ("small_cnn", "run-1", ("cpu-x86_64",))
    assert (audit.count("custom"), audit.count("backend_wrapper"), audit.count("fallback")) == (1, 0, 1)
    kernel, fallback = audit.rows
    assert kernel.audit_class == "custom" and kernel.speedup == pytest.approx(5.0)
    assert kernel.effective_speedup is not None and kernel.effective_speedup <= kernel.speedup
    assert "its own kernel" in kernel.why and "guard" in kernel.why
    assert (fallback.card_id, fallback.audit_class, fallback.why) == ("conv0", "fallback", "vendor op: not searched")


def test_bytes_give_the_same_audit_and_errors_name_the_upload(cast_path: Path) -> None:
    assert audit_cast_bytes(cast_path.read_bytes(), "mine.cast").rows == audit_cast(cast_path).rows
    with pytest.raises(CastAuditError, match=r"mine\.cast is empty"):
        audit_cast_bytes(b"", "mine.cast")
    with pytest.raises(CastAuditError, match=r"mine\.cast"):
        audit_cast_bytes(b"not a zip at all", "mine.cast")


def test_a_tampered_package_is_refused(cast_path: Path, tmp_path: Path) -> None:
    tampered = tmp_path / "tampered.cast"
    with zipfile.ZipFile(cast_path) as src, zipfile.ZipFile(tampered, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, data.replace(b"-O3", b"-O0") if item.filename == "manifest.json" else data)
    with pytest.raises(CastAuditError, match=r"manifest\.json"):
        audit_cast(tampered)
    with pytest.raises(CastAuditError, match="no such file"):
        audit_cast(tmp_path / "absent.cast")
