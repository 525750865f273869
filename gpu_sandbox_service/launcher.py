"""The launcher: a tiny program between the sandbox and a compiler or candidate process.

``python -I -m gpu_sandbox_service.launcher CONFIG_JSON -- PROGRAM ARGS...`` applies, after exec
and before it execs PROGRAM: its own session, death with its parent, network and PID namespaces
(when asked and the kernel permits; the outer bubblewrap view provides them otherwise), resource
limits, a private working directory and, where possible, an unprivileged user. Doing this in a
separate program keeps ``preexec_fn`` (unsafe in a threaded server) out of the server.

With a PID namespace the launcher's first child is the namespace's init: it reaps orphans and
exits with PROGRAM's status, which makes the kernel kill whatever PROGRAM left behind.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
EXIT_LAUNCH_FAILED = 125

_RLIMITS = {
    "cpu_time_s": resource.RLIMIT_CPU,
    "max_processes": resource.RLIMIT_NPROC,
    "open_files": resource.RLIMIT_NOFILE,
    "file_size_bytes": resource.RLIMIT_FSIZE,
    "core_bytes": resource.RLIMIT_CORE,
    "address_space_bytes": resource.RLIMIT_AS,
}


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _unshare(flags: int) -> None:
    if _libc().unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare: {os.strerror(errno)}")


def _apply_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        which = _RLIMITS[name]
        resource.setrlimit(which, (value, value))


def _drop_user(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _exec(program: list[str], config: dict[str, object]) -> None:
    os.chdir(str(config["cwd"]))
    _apply_limits(dict(config.get("limits", {})))  # type: ignore[call-overload]
    user = config.get("user")
    if isinstance(user, list):
        _drop_user(int(user[0]), int(user[1]))
    os.execv(program[0], program)


def _reap_until(child: int) -> int:
    """Act as init: reap everything, return the exit code of ``child`` (128+N for signal N)."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return EXIT_LAUNCH_FAILED
        if pid == child:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: launcher CONFIG_JSON -- PROGRAM [ARGS...]", file=sys.stderr)
        return EXIT_LAUNCH_FAILED
    config = json.loads(argv[0])
    program = argv[2:]
    try:
        if os.getsid(0) != os.getpid():
            os.setsid()
        _die_with_parent()
        flags = (CLONE_NEWNET if config.get("new_network") else 0) | (CLONE_NEWPID if config.get("new_pid") else 0)
        if flags:
            _unshare(flags)
        if not config.get("new_pid"):
            _exec(program, config)
        init = os.fork()
        if init:
            return _reap_until(init)
        _die_with_parent()
        child = os.fork()
        if child == 0:
            _exec(program, config)
        return _reap_until(child)
    except OSError as exc:
        print(f"launcher: cannot isolate {program[0]}: {exc}", file=sys.stderr)
        return EXIT_LAUNCH_FAILED


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
