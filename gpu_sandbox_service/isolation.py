"""Running a compiler or a candidate process in isolation, from the (threaded, asyncio) server.

Each process starts through :mod:`gpu_sandbox_service.launcher`, wrapped in bubblewrap when it
works here (a read-only view of the filesystem with only the private run directory writable, a
fresh ``/tmp``). Without bubblewrap the launcher creates the namespaces itself where the kernel
permits: network, PID with a mount namespace and a fresh ``/proc`` (and in it the same read-only
view with a fresh ``/tmp``), IPC and UTS. Either way it
sets no_new_privs, installs a seccomp deny-list where the architecture is known, and, when the
server runs as root, drops to ``nobody`` where that user can run the interpreter in the work dir.
The environment is an allow-list (no keys or tokens reach a candidate), output is capped, and a
timeout kills the whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from gpu_sandbox_service.harness.phases import GATE_FDS, GO, READY
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
    """What a sandboxed process gets: bubblewrap's view or the launcher's own namespaces, and more.

    ``own_proc``: a mount namespace with a fresh ``/proc`` for the PID namespace (bubblewrap's
    ``--proc``), in which the launcher alone also makes the filesystem read-only but the run dir
    and mounts a fresh ``/tmp``; ``unprivileged``: it runs as ``nobody`` rather than as the
    server's root.
    """

    bubblewrap: bool
    network: bool
    pid: bool
    own_proc: bool = False
    ipc_uts: bool = False
    seccomp: bool = False
    unprivileged: bool = False

    def describe(self) -> str:
        where = "bubblewrap" if self.bubblewrap else "launcher"
        if self.read_only_fs:
            where += " (read-only fs)"
        pid = "pid (own /proc)" if self.own_proc else "pid"
        spaces = [name for name, on in (("network", self.network), (pid, self.pid), ("ipc + uts", self.ipc_uts)) if on]
        text = f"{where}, {' + '.join(spaces) + ' namespaces' if spaces else 'no namespaces'}"
        extras = [name for name, on in (("seccomp deny-list", self.seccomp), ("unprivileged user", self.unprivileged))
                  if on]
        return ", ".join([text, *extras])

    @property
    def read_only_fs(self) -> bool:
        """Whether all but the run dir is read-only and ``/tmp`` private: bubblewrap's view, or the
        launcher's own in its mount namespace."""
        return self.bubblewrap or self.own_proc

    def lacks(self, required: Profile) -> list[str]:
        """What ``required`` has that this profile does not, named for a person."""
        return [PROTECTIONS[f.name] for f in fields(self) if getattr(required, f.name) and not getattr(self, f.name)]


PROTECTIONS = {
    "bubblewrap": "bubblewrap (read-only filesystem)", "network": "network namespace", "pid": "PID namespace",
    "own_proc": "a private /proc and read-only filesystem (mount namespace)", "ipc_uts": "IPC and UTS namespaces",
    "seccomp": "seccomp deny-list", "unprivileged": "an unprivileged user",
}
#: What ``kforge serve sandbox --require-isolation`` insists on for compiles and candidates: no
#: network, no view of other processes, no syscalls that mount, trace or make namespaces. Not
#: bubblewrap (the GPU host has none) nor the unprivileged user (it depends on where the
#: interpreter and the work dir live); both are used whenever they are available. A read-only
#: filesystem comes with ``own_proc``: the launcher makes one in the mount namespace it creates.
REQUIRED_ISOLATION = Profile(bubblewrap=False, network=True, pid=True, own_proc=True, ipc_uts=True, seccomp=True)


def profiles(features: IsolationFeatures, gpu: bool, work_dir: Path | None = None) -> list[Profile]:
    """The profiles to try, strongest first; ``work_dir`` holds the run dirs (see :func:`user_blocker`).

    CPU runs get the strongest this machine allows. GPU runs may need less (a namespace harmless
    on one host broke CUDA on another), so a GPU sandbox tries them in turn with a canary kernel
    (:mod:`gpu_sandbox_service.kernel_isolation`), giving up one protection per step, those most
    likely to upset a driver first, each with bubblewrap and then with the launcher alone, and
    keeps the strongest that works.
    """
    levels = [strongest_profile(features, work_dir)]
    if not gpu:
        return levels
    for weaker in ({"unprivileged": False}, {"seccomp": False}, {"pid": False, "own_proc": False},
                   {"network": False}, {"ipc_uts": False}):
        levels.append(replace(levels[-1], **weaker))
    ladder = [p for level in levels for p in (level, _launcher_alone(level, features))]
    return list(dict.fromkeys(ladder))


def _launcher_alone(profile: Profile, features: IsolationFeatures) -> Profile:
    """``profile`` without bubblewrap, keeping only what the launcher can create here."""
    pid = profile.pid and features.namespaces
    return replace(profile, bubblewrap=False, network=profile.network and features.namespaces, pid=pid,
                   own_proc=pid and profile.own_proc and features.own_proc,
                   ipc_uts=profile.ipc_uts and features.ipc_uts)


def strongest_profile(features: IsolationFeatures, work_dir: Path | None) -> Profile:
    bubblewrap = features.bubblewrap is not None
    namespaces = bubblewrap or features.namespaces
    unprivileged = features.user is not None and work_dir is not None and user_blocker(work_dir) is None
    return Profile(bubblewrap, namespaces, namespaces, own_proc=bubblewrap or (namespaces and features.own_proc),
                   ipc_uts=bubblewrap or features.ipc_uts, seccomp=features.seccomp, unprivileged=unprivileged)


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
    """What this machine lets the sandbox use; probed once per process.

    ``namespaces``: the launcher's network + PID namespaces; ``own_proc``: a mount namespace with
    a fresh /proc in them; ``user``: the (uid, gid) to run as when the server runs as root.
    """

    bubblewrap: str | None
    namespaces: bool
    own_proc: bool = False
    ipc_uts: bool = False
    seccomp: bool = False
    user: tuple[int, int] | None = None

    def describe(self) -> str:
        if self.bubblewrap:
            return "bubblewrap (read-only fs, no network, pid namespace)"
        return "namespaces (no network, pid namespace)" if self.namespaces else "process group and rlimits only"


_ALL_NAMESPACES = {"new_network": True, "new_pid": True, "new_mount": True, "read_only_fs": True, "new_ipc": True,
                   "new_uts": True}


@functools.cache
def detect_features() -> IsolationFeatures:
    """Probe bubblewrap, the launcher's namespaces and seccomp once; log what is missing."""
    bwrap = shutil.which("bwrap")
    probe = [bwrap, *_BWRAP_BASE, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--dev", "/dev",
             "--", "/bin/true"] if bwrap else []
    bubblewrap = bwrap if bwrap and _works(probe) else None
    if _launches({**_ALL_NAMESPACES, "seccomp": True}):
        features = IsolationFeatures(bubblewrap, True, own_proc=True, ipc_uts=True, seccomp=True, user=nobody())
    else:
        features = IsolationFeatures(
            bubblewrap, _launches({"new_network": True, "new_pid": True}),
            own_proc=_launches({"new_pid": True, "new_mount": True, "read_only_fs": True}),
            ipc_uts=_launches({"new_ipc": True, "new_uts": True}), seccomp=_launches({"seccomp": True}), user=nobody())
    if bubblewrap is None:
        log.warning("bubblewrap unavailable: candidates see the real filesystem (launcher: %s)",
                    strongest_profile(features, None).describe())
    return features


def _launches(config: dict[str, bool]) -> bool:
    with tempfile.TemporaryDirectory(prefix="kforge-probe-") as folder:
        full = {"cwd": folder, "keep": _tmp_folders_needed(), **config}
        return _works([*_launcher_argv(json.dumps(full)), "/bin/true"])


def nobody() -> tuple[int, int] | None:
    """Whom to run sandboxed processes as: ``nobody`` when the server is root, else no one else."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return NOBODY, NOBODY
    return entry.pw_uid, entry.pw_gid


NOBODY = 65534
_USER_CHECK = """
import importlib.util, os, sys
paths, work = sys.argv[1:-1], sys.argv[-1]
sys.path[:0] = paths
problems = [f"cannot import {m}" for m in ("torch", "gpu_sandbox_service", "packager")
            if importlib.util.find_spec(m) is None]
problems += [] if os.access(work, os.X_OK) else [f"cannot reach {work}"]
print("; ".join(problems))
sys.exit(1 if problems else 0)
"""


@functools.cache
def user_blocker(work_dir: Path) -> str | None:
    """Why the unprivileged user cannot run the sandbox's Python children in ``work_dir`` (None: it can).

    Dropping root only works where that user can execute the interpreter, import the project and
    torch, and reach the work dir; a private home (``/root``, a 0700 temporary dir) stops it.
    """
    user = nobody()
    if user is None:
        return f"the server already runs unprivileged (uid {os.geteuid()})"
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    config = json.dumps({"cwd": "/", "user": list(user)})
    argv = [*_launcher_argv(config), sys.executable, "-I", "-c", _USER_CHECK, *paths, str(Path(work_dir).resolve())]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"checking as uid {user[0]} failed: {exc}"
    if done.returncode == 0:
        return None
    why = (done.stdout + done.stderr).strip().splitlines()
    return f"as uid {user[0]}: {why[-1] if why else f'exit status {done.returncode}'}"


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_BWRAP_BASE = [
    "--ro-bind", "/", "/", "--proc", "/proc", "--tmpfs", "/tmp", "--die-with-parent", "--new-session",
    "--cap-drop", "ALL",
]


def _tmp_folders_needed() -> list[str]:
    """What the child needs that lies under /tmp, which bubblewrap and the launcher replace with an
    empty tmpfs, to bind back read-only: the interpreter's prefix and import path (a checkout or
    virtual environment under /tmp)."""
    wanted = {sys.prefix, sys.exec_prefix, *(p for p in sys.path if p)}
    paths = sorted({str(Path(p).resolve()) for p in wanted if Path(p).is_dir()})
    under_tmp = [p for p in paths if p == "/tmp" or p.startswith("/tmp/")]
    # a folder already bound through one of its parents needs no bind of its own
    return [p for p in under_tmp if not any(p != q and p.startswith(q + "/") for q in under_tmp)]


def _launcher_argv(config: str) -> list[str]:
    return [*python_module_command("gpu_sandbox_service.launcher"), config, "--"]


def launcher_config(profile: Profile, run_dir: Path, limits: ResourceLimits,
                    user: tuple[int, int] | None) -> dict[str, object]:
    """What the launcher applies under ``profile`` (namespaces only where bubblewrap does not)."""
    own = not profile.bubblewrap
    config: dict[str, object] = {
        "cwd": str(run_dir), "limits": limits.as_config(), "no_new_privs": True, "seccomp": profile.seccomp,
        "new_network": own and profile.network, "new_pid": own and profile.pid,
        "new_mount": own and profile.own_proc, "new_ipc": own and profile.ipc_uts, "new_uts": own and profile.ipc_uts,
    }
    if own and profile.own_proc:
        config.update(read_only_fs=True, keep=_tmp_folders_needed())
    if profile.unprivileged:
        if user is None:
            raise RuntimeError("an unprivileged profile was asked for, but the server is not root")
        config["user"] = list(user)
    return config


def bubblewrap_command(bwrap: str, profile: Profile, run_dir: Path, gpu: bool) -> list[str]:
    """bubblewrap's part of the command line; the launcher inside keeps what it needs to drop root."""
    dev = ["--dev-bind", "/dev", "/dev"] if gpu else ["--dev", "/dev"]
    spaces = [flag for flag, on in (("--unshare-net", profile.network), ("--unshare-pid", profile.pid),
                                    ("--unshare-ipc", profile.ipc_uts), ("--unshare-uts", profile.ipc_uts)) if on]
    caps = ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if profile.unprivileged else []
    keep = [arg for p in _tmp_folders_needed() for arg in ("--ro-bind", p, p)]
    return [bwrap, *_BWRAP_BASE, *caps, *spaces, *dev, *keep, "--bind", str(run_dir), str(run_dir),
            "--chdir", str(run_dir), "--"]


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
    turn: Callable[[], contextlib.AbstractAsyncContextManager[object]] | None = None,
) -> ProcessOutcome:
    """Run ``argv`` isolated with ``run_dir`` as its only writable directory.

    ``profile`` defaults to the strongest this machine allows for run dirs beside ``run_dir``
    (:func:`profiles`). With
    ``result_pipe`` the program gets ``KF_RESULT_FD``, a pipe to write its answer to; the answer
    is kept apart from its (capped) stdout/stderr, which the candidate shares.

    With ``turn`` the program starts before its turn comes: it gets ``KF_GATE_FDS`` (see
    :func:`~gpu_sandbox_service.harness.phases.wait_for_turn`), says when it is ready (its imports
    done), and waits there while ``turn()`` (entered only then) waits for its turn, which it then
    holds until the program ends. The timeout counts from the turn; a program that says nothing
    within ``timeout_s`` is killed as timed out.
    """
    features = detect_features()
    run_dir = run_dir.resolve()
    profile = profile or profiles(features, gpu, run_dir.parent)[0]
    config = launcher_config(profile, run_dir, limits, features.user)
    command = [*_launcher_argv(json.dumps(config)), *argv]
    if profile.bubblewrap:
        if features.bubblewrap is None:
            raise RuntimeError("a bubblewrap profile was asked for, but bubblewrap does not work here")
        command = [*bubblewrap_command(features.bubblewrap, profile, run_dir, gpu), *command]
    if features.user is not None and profile.unprivileged:
        os.chown(run_dir, *features.user)  # the one directory the dropped user may write
    environment = dict(env or allowed_environment(run_dir))
    read_fd, write_fd = os.pipe() if result_pipe else (-1, -1)
    pass_fds: tuple[int, ...] = ()
    if result_pipe:
        environment["KF_RESULT_FD"] = str(write_fd)
        pass_fds = (write_fd,)
    gate = _Gate() if turn is not None else None
    if gate is not None:
        environment[GATE_FDS] = gate.child_fds
        pass_fds += gate.child_ends
    started = time.perf_counter()
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=environment, cwd=str(run_dir), start_new_session=True, pass_fds=pass_fds,
        )
    finally:
        if result_pipe:
            os.close(write_fd)
        if gate is not None:
            gate.close_child_ends()
    outcome = ProcessOutcome(returncode=None)
    result_task = asyncio.create_task(_read_result(read_fd)) if result_pipe else None
    try:
        async with contextlib.AsyncExitStack() as held:
            if gate is not None and turn is not None:
                ready = await asyncio.wait_for(asyncio.to_thread(gate.wait_ready), timeout_s)
                if ready:  # else it ended (or failed) before its turn: what it said is read below
                    await held.enter_async_context(turn())
                    gate.open()
                started = time.perf_counter()
            try:  # within the turn: a program that overruns is gone before the turn passes on
                await asyncio.wait_for(_drain(proc, outcome, output_cap_bytes, log_tail_bytes), timeout_s)
                outcome.returncode = await asyncio.wait_for(proc.wait(), timeout_s)
            except asyncio.TimeoutError:
                await _end_timed_out(proc, outcome)
    except asyncio.TimeoutError:  # silent at its start
        await _end_timed_out(proc, outcome)
    finally:
        _kill_group(proc.pid)
        if outcome.returncode is None:  # cancelled (a standby no re-measure came for): reap it
            outcome.returncode = await proc.wait()
        if gate is not None:
            gate.close()
        if result_task is not None:
            outcome.result = await _finish(result_task)
    outcome.wall_s = time.perf_counter() - started
    return outcome


async def _end_timed_out(proc: asyncio.subprocess.Process, outcome: ProcessOutcome) -> None:
    outcome.timed_out = True
    _kill_group(proc.pid)
    outcome.returncode = await proc.wait()


class _Gate:
    """The two pipes between :func:`run_isolated` and a program held at its start."""

    def __init__(self) -> None:
        self._go_read, self._go_write = os.pipe()
        self._ready_read, self._ready_write = os.pipe()
        self.child_ends = (self._go_read, self._ready_write)
        self.child_fds = f"{self._go_read},{self._ready_write}"

    def close_child_ends(self) -> None:
        for fd in self.child_ends:
            os.close(fd)

    def wait_ready(self) -> bool:
        """Blocks until the program says it is ready (True) or ends first (False); the only reader
        of the ready pipe, which it closes."""
        try:
            return os.read(self._ready_read, len(READY)) == READY
        finally:
            os.close(self._ready_read)

    def open(self) -> None:
        with contextlib.suppress(OSError):  # it may have ended since it said it was ready
            os.write(self._go_write, GO)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._go_write)


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
