"""The systemd unit for the GPU host: well-formed, secured, stopping gracefully."""

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "kforge-sandbox.service"


def _unit() -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


def test_unit_runs_the_sandbox_with_tls_and_a_token_from_credentials():
    unit = _unit()
    service = unit["Service"]
    exec_start = " ".join(service["ExecStart"].replace("\\\n", " ").split())
    assert "kforge serve sandbox" in exec_start
    assert "--tls-cert /etc/kforge/tls/server.pem" in exec_start
    assert "--tls-ca /etc/kforge/tls/ca.pem" in exec_start
    assert "--token-file ${CREDENTIALS_DIRECTORY}/token" in exec_start
    assert "--insecure" not in exec_start
    assert service["User"] == "kforge" and service["KillSignal"] == "SIGTERM"
    assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
    assert "PrivateDevices" not in service  # it would hide the GPUs
    assert unit["Install"]["WantedBy"] == "multi-user.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_knows_every_key(tmp_path):
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text())
    result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    problems = [
        line for line in (result.stdout + result.stderr).splitlines()
        if any(word in line for word in ("Unknown key", "Unknown section", "Failed to parse", "Invalid", "bad-setting"))
    ]  # fmt: skip
    assert problems == []
