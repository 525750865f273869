"""The launcher's strongest profile, seen from inside real children: namespaces, /proc, seccomp, user."""

from __future__ import annotations

import asyncio
import os
import platform
import struct
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_sandbox_service import server as sandbox_server
from gpu_sandbox_service.isolation import (
    REQUIRED_ISOLATION,
    IsolationFeatures,
    ProcessOutcome,
    Profile,
    ResourceLimits,
    detect_features,
    nobody,
    profiles,
    run_isolated,
    strongest_profile,
    user_blocker,
)
from gpu_sandbox_service.kernel_isolation import require_isolation
from gpu_sandbox_service.launcher import SECCOMP_ARCHES, mount_points, seccomp_filter
from servicekit.errors import FailedPrecondition
from tests.gpu_sandbox_service.conftest import TEST_LIMITS

LIMITS = ResourceLimits(cpu_time_s=60, max_processes=4096, open_files=256, file_size_bytes=1 << 20,
                        address_space_bytes=None)
LAUNCHER_ONLY = Profile(bubblewrap=False, network=True, pid=True, own_proc=True, ipc_uts=True, seccomp=True)
# What the H200 host offered: no bubblewrap, every namespace and seccomp, running as root.
H200_LIKE = IsolationFeatures(None, True, own_proc=True, ipc_uts=True, seccomp=True, user=(65534, 65534))
# Seen from a child: its pid, the pids its /proc lists, network interfaces, namespaces it shares with
# the test, whether unshare, clone(CLONE_NEWUTS) and mount work, and its seccomp / no_new_privs state.
INSIDE = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
mine = [os.readlink(f"/proc/self/ns/{ns}") for ns in ("net", "pid", "mnt", "ipc", "uts")]
print(json.dumps({
    "pid": os.getpid(), "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "interfaces": [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]],
    "shared": [ns for ns, parent in zip(mine, sys.argv[1:]) if ns == parent],
    "unshare": libc.unshare(0x04000000), "clone": libc.syscall(56, 0x04000000 | 17, 0, 0, 0, 0),
    "mount": libc.mount(b"none", b"/mnt", b"tmpfs", 0, None), "errno": ctypes.get_errno(),
    "seccomp": status["Seccomp"].strip(), "no_new_privs": status["NoNewPrivs"].strip()}))
"""

def run(argv: list[str], run_dir: Path, profile: Profile) -> ProcessOutcome:
    return asyncio.run(run_isolated(argv, run_dir=run_dir, limits=LIMITS, timeout_s=30.0, output_cap_bytes=1 << 20,
                                    log_tail_bytes=1 << 16, profile=profile))


def _namespaces() -> list[str]:
    return [os.readlink(f"/proc/self/ns/{ns}") for ns in ("net", "pid", "mnt", "ipc", "uts")]


@pytest.fixture
def launcher_only() -> Profile:
    features = detect_features()
    if not (features.namespaces and features.own_proc and features.ipc_uts and features.seccomp):
        pytest.skip(f"the launcher cannot create every namespace or seccomp here: {features}")
    return LAUNCHER_ONLY


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A run dir every user can reach (pytest's own tmp dirs are private to root)."""
    with tempfile.TemporaryDirectory(prefix="kforge-launcher-") as folder:
        Path(folder).chmod(0o755)
        run_dir = Path(folder) / "run"
        run_dir.mkdir()
        yield run_dir


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the child calls clone by its x86_64 number")
def test_a_child_sees_only_its_own_processes_network_and_namespaces(tmp_path: Path, launcher_only: Profile) -> None:
    import json

    outcome = run([sys.executable, "-c", INSIDE, *_namespaces()], tmp_path, launcher_only)
    assert outcome.returncode == 0, outcome.log_tail
    seen = json.loads(outcome.log_tail.strip().splitlines()[-1])
    assert seen["pid"] == 2 and seen["procs"] == [1, 2]  # init (the launcher) and itself, from its own /proc
    assert seen["interfaces"] == ["lo"] and seen["shared"] == []
    assert seen["unshare"] == seen["clone"] == seen["mount"] == -1 and seen["errno"] == 1  # EPERM
    assert seen["seccomp"] == "2" and seen["no_new_privs"] == "1"


def test_the_namespaces_die_with_the_program(tmp_path: Path, launcher_only: Profile) -> None:
    outcome = run(["/bin/sh", "-c", "sleep 300 & echo started"], tmp_path, launcher_only)
    assert outcome.returncode == 0 and "started" in outcome.log_tail and outcome.wall_s < 10


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root server drops to nobody")
def test_an_unprivileged_profile_runs_as_nobody_and_writes_only_its_run_dir(shared_dir: Path,
                                                                            launcher_only: Profile) -> None:
    user = nobody()
    assert user is not None
    script = "id -u; id -g; touch inside; touch ../outside || echo denied"
    outcome = run(["/bin/sh", "-c", script], shared_dir, replace(launcher_only, unprivileged=True))
    lines = outcome.log_tail.split()
    assert outcome.returncode == 0, outcome.log_tail
    assert lines[:2] == [str(user[0]), str(user[1])] and lines[-1] == "denied"
    assert (shared_dir / "inside").stat().st_uid == user[0] and not (shared_dir.parent / "outside").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root server drops to nobody")
def test_nobody_in_the_read_only_view_has_a_private_tmp_and_working_devices(shared_dir: Path,
                                                                            launcher_only: Profile) -> None:
    script = ("echo x > /dev/null && head -c 4 /dev/urandom >/dev/null && touch /tmp/scratch inside && echo usable;"
              " touch /dev/kf-created; touch /var/tmp/kf-created-$$")
    outcome = run(["/bin/sh", "-c", script], shared_dir, replace(launcher_only, unprivileged=True))
    assert "usable" in outcome.log_tail and (shared_dir / "inside").exists(), outcome.log_tail
    assert outcome.log_tail.count("Read-only file system") == 2 and not Path("/dev/kf-created").exists()


def test_mount_points_are_listed_once_with_escapes_undone() -> None:
    mountinfo = ("22 27 0:21 / /proc rw,relatime - proc proc rw\n"
                 "29 26 0:26 / /dev/pts rw,relatime - devpts devpts rw\n"
                 "30 29 0:27 / /dev/pts rw,relatime - devpts devpts rw\n"
                 "31 27 0:28 / /srv/with\\040space ro,nosuid - tmpfs tmpfs ro\n")
    assert mount_points(mountinfo) == ["/proc", "/dev/pts", "/srv/with space"]


def test_nobody_is_not_used_where_it_cannot_reach_the_work_dir(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert user_blocker(private) is not None
    assert not strongest_profile(detect_features(), private).unprivileged


def test_a_gpu_host_like_the_h200_tries_every_namespace_with_seccomp_first(shared_dir: Path) -> None:
    ladder = profiles(H200_LIKE, gpu=True, work_dir=shared_dir)
    expected = replace(LAUNCHER_ONLY, unprivileged=user_blocker(shared_dir) is None)
    assert ladder[0] == expected and ladder[-1] == Profile(False, False, False)
    assert next(p for p in ladder if not p.unprivileged) == LAUNCHER_ONLY
    assert all(p.own_proc for p in ladder if p.pid)  # CUDA broke in a PID namespace without its own /proc
    assert not ladder[0].lacks(REQUIRED_ISOLATION)


@pytest.mark.parametrize("machine", sorted(SECCOMP_ARCHES))
def test_the_seccomp_filter_assembles_with_jumps_in_range(machine: str) -> None:
    code = seccomp_filter(machine)
    instructions = [struct.unpack("HBBI", code[i:i + 8]) for i in range(0, len(code), 8)]
    assert len(code) % 8 == 0 and instructions[-2:] == [(0x06, 0, 0, 0x50001), (0x06, 0, 0, 0x50026)]
    jumps = [(i, jt, jf) for i, (code, jt, jf, _) in enumerate(instructions) if code & 0x07 == 0x05]
    assert jumps and all(i + 1 + max(jt, jf) < len(instructions) for i, jt, jf in jumps)


def test_require_isolation_names_what_a_profile_lacks() -> None:
    with pytest.raises(FailedPrecondition) as info:
        require_isolation({"compiles": LAUNCHER_ONLY, "cuda candidates": Profile(False, True, False)})
    assert "compiles" not in str(info.value)
    assert all(gap in str(info.value) for gap in ("PID namespace", "private /proc and read-only filesystem",
                                                  "seccomp deny-list"))


def test_serving_states_each_profile_and_can_require_the_strongest(tmp_path: Path, launcher_only: Profile) -> None:
    said: list[str] = []

    async def serve() -> None:
        bound = await sandbox_server.start(backend="cpu", work_dir=tmp_path, limits=TEST_LIMITS,
                                           require_isolation=True, say=said.append)
        await bound.stop(0)

    asyncio.run(serve())
    strongest = strongest_profile(detect_features(), tmp_path / "runs").describe()
    assert f"sandbox isolation: compiles: {strongest}" in said
    assert f"sandbox isolation: cpu candidates: {strongest}" in said


def test_serve_sandbox_takes_require_isolation() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    sandbox_server.add_serve_arguments(parser)
    assert parser.parse_args(["--require-isolation"]).require_isolation
    assert not parser.parse_args([]).require_isolation
