"""Running a compiler or a candidate process in isolation, from the (threaded, asyncio) server.

Each process starts through :mod:`gpu_sandbox_service.launcher`, wrapped in bubblewrap when it
works here (a read-only view of the filesystem with only the private run directory writable, a
fresh ``/tmp``, no network, its own PID namespace, no capabilities). Without bubblewrap the
launcher creates the network and PID namespaces itself where the kernel permits. Either way the
environment is an allow-list (no keys or tokens reach a candidate), output is capped, and a
timeout kills the whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpu_sandbox_service.models import Limits
from gpu_sandbox_service.pycommand import python_module_command

log = logging.getLogger(__name__)

ENVIRONMENT_ALLOW_LIST = (
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
    "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NVIDIA_VISIBLE_DEVICES",
)
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
RESULT_FD_LIMIT_BYTES = 16 * 1024 * 1024
EXIT_LAUNCH_FAILED = 125  # the launcher could not set up isolation (see launcher.py)


@dataclass(frozen=True)
class Profile:
    """Which namespaces a sandboxed process gets: bubblewrap's, or the launcher's own."""

    bubblewrap: bool
    network: bool
    pid: bool

    def describe(self) -> str:
        where = "bubblewrap (read-only fs)" if self.bubblewrap else "launcher"
        spaces = [name for name, on in (("network", self.network), ("pid", self.pid)) if on]
        return f"{where}, {' + '.join(spaces) + ' namespaces' if spaces else 'no namespaces'}"


def profiles(features: IsolationFeatures, gpu: bool) -> list[Profile]:
    """The profiles to try, strongest first.

    CPU runs get the strongest this machine allows. GPU runs may need less: under the launcher's
    own namespaces every CUDA call failed on an H200 host (cudaErrorOperatingSystem;
    bench/results/gpu_suite_2026-11-30_h200.md), so a GPU sandbox tries each weaker profile with
    a canary kernel (:func:`choose_profile`) and keeps the strongest that works.
    """
    bubblewrap = features.bubblewrap is not None
    namespaces = bubblewrap or features.namespaces
    strongest = Profile(bubblewrap, namespaces, namespaces)
    if not gpu:
        return [strongest]
    weaker = [Profile(bubblewrap, namespaces, False), Profile(bubblewrap, False, False), Profile(False, False, False)]
    return list(dict.fromkeys([strongest, *weaker]))


async def choose_profile(candidates: Sequence[Profile], works: Callable[[Profile], Awaitable[str | None]]
                         ) -> tuple[Profile, list[str]]:
    """The first profile under which ``works`` (None, or why not) succeeds, and why stronger ones failed.

    Raises :class:`RuntimeError` naming every failure when none works.
    """
    failures: list[str] = []
    for profile in candidates:
        problem = await works(profile)
        if problem is None:
            return profile, failures
        failures.append(f"{profile.describe()}: {problem}")
    raise RuntimeError("; ".join(failures) or "no isolation profile to try")


@dataclass(frozen=True)
class IsolationFeatures:
    """What this machine lets the sandbox use; probed once per process."""

    bubblewrap: str | None
    namespaces: bool

    def describe(self) -> str:
        if self.bubblewrap:
            return "bubblewrap (read-only fs, no network, pid namespace)"
        return "namespaces (no network, pid namespace)" if self.namespaces else "process group and rlimits only"


@functools.cache
def detect_features() -> IsolationFeatures:
    """Probe bubblewrap and unshare once; fall back quietly, and log what is missing."""
    bwrap = shutil.which("bwrap")
    if bwrap and _works([bwrap, *_BWRAP_BASE, "--unshare-net", "--unshare-pid", "--dev", "/dev", "--", "/bin/true"]):
        return IsolationFeatures(bwrap, namespaces=True)
    config = json.dumps({"cwd": "/", "new_network": True, "new_pid": True})
    namespaces = _works([*_launcher_argv(config), "/bin/true"])
    log.warning("bubblewrap unavailable: candidates see the real filesystem (namespaces: %s)", namespaces)
    return IsolationFeatures(None, namespaces)


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_BWRAP_BASE = [
    "--ro-bind", "/", "/", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-ipc", "--die-with-parent",
    "--new-session", "--cap-drop", "ALL",
]


def _tmp_paths_needed() -> list[str]:
    """Read-only binds for what the child needs that lies under /tmp, which bubblewrap replaces
    with an empty tmpfs: the interpreter's prefix and import path (a checkout or virtual
    environment under /tmp)."""
    wanted = {sys.prefix, sys.exec_prefix, *(p for p in sys.path if p)}
    paths = sorted({str(Path(p).resolve()) for p in wanted if Path(p).is_dir()})
    under_tmp = [p for p in paths if p == "/tmp" or p.startswith("/tmp/")]
    # a folder already bound through one of its parents needs no bind of its own
    roots = [p for p in under_tmp if not any(p != q and p.startswith(q + "/") for q in under_tmp)]
    return [arg for p in roots for arg in ("--ro-bind", p, p)]


def _launcher_argv(config: str) -> list[str]:
    return [*python_module_command("gpu_sandbox_service.launcher"), config, "--"]


def allowed_environment(run_dir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a sandboxed process: allow-listed names only, never a secret."""
    env = {name: os.environ[name] for name in ENVIRONMENT_ALLOW_LIST if name in os.environ}
    env.update(extra or {})
    env.update({"HOME": str(run_dir), "TMPDIR": str(run_dir), "PYTHONDONTWRITEBYTECODE": "1"})
    return {k: v for k, v in env.items() if not _SECRET_NAME.search(k)}


@dataclass(frozen=True)
class ResourceLimits:
    """rlimits of one sandboxed process."""

    cpu_time_s: int
    max_processes: int
    open_files: int
    file_size_bytes: int
    address_space_bytes: int | None

    @classmethod
    def for_run(cls, limits: Limits, backend: str) -> ResourceLimits:
        memory = limits.run_address_space_bytes if backend == "cpu" else None
        return cls(limits.cpu_time_s, limits.max_processes, limits.open_files, limits.file_size_bytes, memory)

    @classmethod
    def for_compile(cls, limits: Limits) -> ResourceLimits:
        return cls(limits.cpu_time_s, limits.max_processes, limits.open_files, limits.file_size_bytes,
                   limits.compile_address_space_bytes)

    def as_config(self) -> dict[str, int]:
        values = {
            "cpu_time_s": self.cpu_time_s, "max_processes": self.max_processes, "open_files": self.open_files,
            "file_size_bytes": self.file_size_bytes, "core_bytes": 0,
        }
        if self.address_space_bytes is not None:
            values["address_space_bytes"] = self.address_space_bytes
        return values


@dataclass
class ProcessOutcome:
    """How a sandboxed process ended. ``result`` is what it wrote to its result pipe, if any."""

    returncode: int | None
    timed_out: bool = False
    output_overflow: bool = False
    log_tail: str = ""
    result: bytes = b""
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def signal_name(self) -> str | None:
        code = self.returncode
        if code is None:
            return None
        number = -code if code < 0 else code - 128 if code > 128 else 0
        with contextlib.suppress(ValueError):
            return signal.Signals(number).name if number else None
        return None


async def run_isolated(
    argv: Sequence[str],
    *,
    run_dir: Path,
    limits: ResourceLimits,
    timeout_s: float,
    output_cap_bytes: int,
    log_tail_bytes: int,
    env: Mapping[str, str] | None = None,
    gpu: bool = False,
    result_pipe: bool = False,
    profile: Profile | None = None,
) -> ProcessOutcome:
    """Run ``argv`` isolated with ``run_dir`` as its only writable directory.

    ``profile`` defaults to the strongest this machine allows (:func:`profiles`). With
    ``result_pipe`` the program gets ``KF_RESULT_FD``, a pipe to write its answer to; the answer
    is kept apart from its (capped) stdout/stderr, which the candidate shares.
    """
    features = detect_features()
    profile = profile or profiles(features, gpu)[0]
    own = not profile.bubblewrap
    config = {"cwd": str(run_dir), "limits": limits.as_config(),
              "new_network": own and profile.network, "new_pid": own and profile.pid}
    command = [*_launcher_argv(json.dumps(config)), *argv]
    if profile.bubblewrap:
        if features.bubblewrap is None:
            raise RuntimeError("a bubblewrap profile was asked for, but bubblewrap does not work here")
        dev = ["--dev-bind", "/dev", "/dev"] if gpu else ["--dev", "/dev"]
        spaces = [flag for flag, on in (("--unshare-net", profile.network), ("--unshare-pid", profile.pid)) if on]
        run_dir = run_dir.resolve()
        command = [features.bubblewrap, *_BWRAP_BASE, *spaces, *dev, *_tmp_paths_needed(), "--bind", str(run_dir),
                   str(run_dir), "--chdir", str(run_dir), "--", *command]
    environment = dict(env or allowed_environment(run_dir))
    read_fd, write_fd = os.pipe() if result_pipe else (-1, -1)
    pass_fds: tuple[int, ...] = ()
    if result_pipe:
        environment["KF_RESULT_FD"] = str(write_fd)
        pass_fds = (write_fd,)
    started = time.perf_counter()
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=environment, cwd=str(run_dir), start_new_session=True, pass_fds=pass_fds,
        )
    finally:
        if result_pipe:
            os.close(write_fd)
    outcome = ProcessOutcome(returncode=None)
    result_task = asyncio.create_task(_read_result(read_fd)) if result_pipe else None
    try:
        await asyncio.wait_for(_drain(proc, outcome, output_cap_bytes, log_tail_bytes), timeout_s)
        outcome.returncode = await asyncio.wait_for(proc.wait(), timeout_s)
    except asyncio.TimeoutError:
        outcome.timed_out = True
        _kill_group(proc.pid)
        outcome.returncode = await proc.wait()
    finally:
        _kill_group(proc.pid)
        if result_task is not None:
            outcome.result = await _finish(result_task)
    outcome.wall_s = time.perf_counter() - started
    return outcome


async def _drain(proc: asyncio.subprocess.Process, outcome: ProcessOutcome, cap: int, tail_bytes: int) -> None:
    assert proc.stdout is not None
    tail = b""
    total = 0
    while chunk := await proc.stdout.read(1 << 16):
        total += len(chunk)
        tail = (tail + chunk)[-tail_bytes:]
        outcome.log_tail = tail.decode("utf-8", errors="replace")
        if total > cap and not outcome.output_overflow:
            outcome.output_overflow = True
            _kill_group(proc.pid)


async def _read_result(fd: int) -> bytes:
    return await asyncio.to_thread(_read_all, fd)


def _read_all(fd: int) -> bytes:
    data = bytearray()
    try:
        while chunk := os.read(fd, 1 << 16):
            data += chunk
            if len(data) > RESULT_FD_LIMIT_BYTES:
                return b""
    finally:
        os.close(fd)
    return bytes(data)


async def _finish(task: asyncio.Task[bytes]) -> bytes:
    try:
        return await asyncio.wait_for(task, 5.0)
    except asyncio.TimeoutError:
        return b""


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
