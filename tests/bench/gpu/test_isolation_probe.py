"""The isolation probe's own launcher and seccomp filter, checked without a GPU."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu import isolation_probe

PROBE = [sys.executable, str(Path(isolation_probe.__file__).resolve())]


def test_a_fresh_proc_is_only_ever_mounted_in_its_own_mount_and_pid_namespaces(tmp_path: Path) -> None:
    for case in isolation_probe.raw_cases(root=True, work=tmp_path):
        if case.config.get("proc"):
            assert case.config.get("mount") and case.config.get("pid"), case.name
    proc = subprocess.run([*PROBE, "--enter", json.dumps({"proc": True}), "--", "/bin/true"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 125 and "needs its own mount and PID namespaces" in proc.stderr


def test_an_unprivileged_user_is_tried_only_by_root(tmp_path: Path) -> None:
    assert not any(c.config.get("drop_user") for c in isolation_probe.raw_cases(root=False, work=tmp_path))
    assert any(c.config.get("drop_user") for c in isolation_probe.raw_cases(root=True, work=tmp_path))


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the deny-list has x86_64 numbers")
def test_under_the_seccomp_filter_denied_calls_fail_and_others_run() -> None:
    def run(*argv: str) -> int:
        return subprocess.run([*PROBE, "--enter", json.dumps({"seccomp": True}), "--", *argv], capture_output=True,
                              timeout=60, check=False).returncode

    assert run("/bin/true") == 0
    assert run(sys.executable, "-c", "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x40000000) != -1)") == 0
