"""The isolation probe's own launcher and seccomp filter, checked without a GPU."""

from __future__ import annotations

import json
import platform
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu import isolation_probe

PROBE = [sys.executable, str(Path(isolation_probe.__file__).resolve())]


def test_the_seccomp_filter_jumps_to_allow_or_eperm() -> None:
    code = isolation_probe._seccomp_filter()
    program = [struct.unpack("HBBI", code[i:i + 8]) for i in range(0, len(code), 8)]
    allow, eperm = len(program) - 2, len(program) - 1
    assert program[allow] == (0x06, 0, 0, 0x7FFF0000) and program[eperm] == (0x06, 0, 0, 0x00050001)
    assert 1 + 1 + program[1][2] == allow  # another architecture: no filtering
    denied = {k: i + 1 + jt for i, (op, jt, _, k) in enumerate(program) if op == 0x15 and i > 1}
    assert set(denied) == set(isolation_probe.SECCOMP_DENY_X86_64.values()) and set(denied.values()) == {eperm}


def test_a_fresh_proc_is_only_ever_mounted_in_its_own_mount_and_pid_namespaces() -> None:
    for case in isolation_probe.raw_cases(root=True, bubblewrap=True):
        if case.config.get("proc"):
            assert case.config.get("mount") and case.config.get("pid"), case.name
    proc = subprocess.run([*PROBE, "--enter", json.dumps({"proc": True}), "--", "/bin/true"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 125 and "needs its own mount and PID namespaces" in proc.stderr


def test_an_unprivileged_user_is_tried_only_by_root() -> None:
    assert not any(c.config.get("drop_user") for c in isolation_probe.raw_cases(root=False, bubblewrap=False))
    assert any(c.config.get("drop_user") for c in isolation_probe.raw_cases(root=True, bubblewrap=False))


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the deny-list has x86_64 numbers")
def test_under_the_seccomp_filter_denied_calls_fail_and_others_run() -> None:
    def run(*argv: str) -> int:
        return subprocess.run([*PROBE, "--enter", json.dumps({"seccomp": True}), "--", *argv], capture_output=True,
                              timeout=60, check=False).returncode

    assert run("/bin/true") == 0
    assert run(sys.executable, "-c", "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x40000000) != -1)") == 0
