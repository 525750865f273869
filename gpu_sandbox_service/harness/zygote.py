"""The fork server of one run slot: imports torch and the harness once, then forks one fresh child
per candidate, which runs the harness exactly as a fresh process would. It also imports what
loading a module card's exported program needs (torch.export's deserialiser, about 1.7 s of
imports), so a module card's candidates do not pay it each.

It starts isolated like a candidate (same launcher, namespaces, rlimits and environment) and is
run as ``zygote SOCKET [PRIVATE_DIR ...]``: it connects to the sandbox's socket (which the sandbox
unlinks before any candidate exists), then reads one job a line and answers one outcome a line.
A ``held`` job's child does everything that does not need the candidate (CUDA, inputs,
references) while the candidate still builds, then waits: the sandbox's next line says ``go``
(the library is in the child's folder; its timeout starts now) or ``cancel`` (it is killed).
What it never does: initialise CUDA (a forked CUDA context is unusable), run candidate code, or
read anything a child wrote. Between candidates it kills every process a child left behind and
empties the private directories it was given (bubblewrap's fresh ``/tmp``), so no file or process
of one candidate reaches the next; it is not dumpable, so a child can neither ptrace it nor read
its memory through ``/proc``. If it cannot clean up, it answers and exits, and is replaced.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import torch
import torch._export.serde.serialize  # what loading a module card's program imports

from gpu_sandbox_service.harness import __main__ as harness
from gpu_sandbox_service.harness.phases import GO, GO_FD
from gpu_sandbox_service.isolation import RESULT_FD_LIMIT_BYTES

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
EXIT_CHILD_SETUP = 126
KILL_ROUNDS = 200


def _prctl(option: int, value: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _children() -> list[int]:
    """Pids (in this process's namespace) of this process's live children, read from /proc."""
    me = os.readlink("/proc/self")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{entry}/status").read_text().splitlines()
                          if ":" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == me:
            nspids = fields.get("NSpid", entry).split()
            found.append(int(nspids[-1]))  # the innermost namespace's pid is ours: children share it
    return found


def kill_descendants() -> bool:
    """Kill and reap every process below this one; orphans come back to it as the subreaper."""
    for _ in range(KILL_ROUNDS):
        children = _children()
        if not children:
            return True
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                continue
    return not _children()


Snapshot = dict[str, tuple[int, int]]


def snapshot(folder: Path) -> Snapshot:
    """(inode, mode) of everything in ``folder`` on its own filesystem: what bubblewrap put there
    (the folders above bind mounts), which stays; mounted folders are not entered."""
    top = os.lstat(folder)
    device = top.st_dev
    found: Snapshot = {str(folder): (top.st_ino, top.st_mode)}
    for path, folders, files in os.walk(folder):
        for name in [*folders, *files]:
            entry = os.lstat(os.path.join(path, name))
            found[os.path.join(path, name)] = (entry.st_ino, entry.st_mode)
        folders[:] = [f for f in folders if os.lstat(os.path.join(path, f)).st_dev == device]
    return found


def restore(folder: Path, kept: Snapshot) -> bool:
    """Remove what a child added to ``folder``, give kept folders their modes back; True when
    ``folder`` is as it was."""
    for path, mode in ((p, m) for p, (_, m) in kept.items()):
        with contextlib.suppress(OSError):
            if os.lstat(path).st_mode != mode:
                os.chmod(path, mode)
    for path in sorted(set(snapshot_tolerant(folder)) - set(kept), key=len):
        if os.path.lexists(path):
            _remove(Path(path))
    return snapshot_tolerant(folder) == kept


def snapshot_tolerant(folder: Path) -> Snapshot:
    try:
        return snapshot(folder)
    except OSError:
        return {}


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        with contextlib.suppress(OSError):  # a candidate may have made its folders unreadable
            os.chmod(entry, 0o700)
        for path, folders, _ in os.walk(entry):
            for name in folders:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(path, name), 0o700)
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            entry.unlink()


def _child(job: dict[str, object], out_w: int, result_w: int, go_r: int | None, closing: list[int]) -> None:
    """In the fresh child: its own session, its own directory, then the harness; never returns."""
    try:
        for fd in closing:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.close(out_w)
        directory = os.path.abspath(str(job["dir"]))
        os.chdir(directory)
        os.environ.update({"HOME": directory, "TMPDIR": directory, "KF_RESULT_FD": str(result_w)})
        if go_r is not None:
            os.environ[GO_FD] = str(go_r)
        code = harness.main()
        sys.stdout.flush()
        sys.stderr.flush()
        ctypes.CDLL(None).fflush(None)
    except BaseException:  # nothing may unwind into the zygote's loop
        code = EXIT_CHILD_SETUP
    os._exit(code)


class Lines:
    """The sandbox's messages, one JSON object a line. Read here rather than through a buffered
    file, so that a held child's ``go`` read along with its job is not hidden from ``select``."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self.buffer = bytearray()
        self.closed = False

    def take(self) -> dict[str, object] | None:
        """The next whole message already received, if any."""
        end = self.buffer.find(b"\n")
        if end < 0:
            return None
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        message = json.loads(line)
        return message if isinstance(message, dict) else {}

    def fill(self) -> None:
        """What the socket holds now (one read); ``closed`` once the sandbox hung up."""
        chunk = self.connection.recv(1 << 16)
        self.buffer += chunk
        self.closed = not chunk

    def read(self) -> dict[str, object] | None:
        """The next message, waiting for it; None once the socket closed."""
        while (message := self.take()) is None:
            if self.closed:
                return None
            self.fill()
        return message


class Zygote:
    def __init__(self, connection: socket.socket, private_dirs: list[Path]) -> None:
        self.connection = connection
        self.lines = Lines(connection)
        self.private_dirs = {folder: snapshot(folder) for folder in private_dirs}
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)

    def run(self, job: dict[str, object]) -> dict[str, object]:
        """Fork the candidate's child, collect its output and result, and leave nothing behind."""
        if torch.cuda.is_initialized():  # would make every child's CUDA unusable
            raise RuntimeError("CUDA was initialised in the fork server")
        out_r, out_w = os.pipe()
        result_r, result_w = os.pipe()
        go_r, go_w = os.pipe() if job.get("held") else (None, None)
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            _child(job, out_w, result_w, go_r, [self.connection.fileno(), out_r, result_r, self.wake_r, self.wake_w,
                                                *([go_w] if go_w is not None else [])])
        for fd in (out_w, result_w, go_r):
            if fd is not None:
                os.close(fd)
        outcome = self._collect(pid, out_r, result_r, go_w, started, float(job["timeout_s"]),  # type: ignore[arg-type]
                                int(job["output_cap"]), int(job["log_tail"]))  # type: ignore[call-overload]
        clean = kill_descendants()
        clean = all([restore(folder, kept) for folder, kept in self.private_dirs.items()]) and clean
        outcome["wall_s"] = time.perf_counter() - started
        outcome["clean"] = clean
        return outcome

    def _collect(self, pid: int, out_r: int, result_r: int, go_w: int | None, started: float, timeout_s: float,
                 cap: int, tail_bytes: int) -> dict[str, object]:
        """Output, result and exit status of child ``pid``; ``go_w`` (a held child's) starts its
        timeout when the sandbox says go."""
        tail, result = b"", bytearray()
        total, overflow, timed_out, status = 0, False, False, None
        open_fds = {out_r, result_r}
        deadline = started + timeout_s if go_w is None else None
        while open_fds or status is None:
            if status is None:
                done, raw = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = raw
                    kill_descendants()  # whatever it left holds our pipes: the pipes end with it
            word = None if go_w is None else "ended" if status is not None else self._steer(go_w)
            if word is not None:
                assert go_w is not None
                os.close(go_w)
                go_w = None
                deadline = time.perf_counter() + timeout_s
                if word == "cancel":
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
            if status is not None and not open_fds:
                break
            remaining = None if deadline is None else deadline - time.perf_counter()
            if remaining is not None and remaining <= 0 and status is None:
                timed_out = True
                break
            watched = [*open_fds, self.wake_r, *([self.connection.fileno()] if go_w is not None else [])]
            ready, _, _ = select.select(watched, [], [], None if remaining is None else max(remaining, 0.05))
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
            if self.connection.fileno() in ready:
                self.lines.fill()
            for fd in [fd for fd in ready if fd in open_fds]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    open_fds.discard(fd)
                    os.close(fd)
                elif fd == out_r:
                    total += len(chunk)
                    tail = (tail + chunk)[-tail_bytes:]
                    if total > cap and not overflow:
                        overflow = True
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(pid, signal.SIGKILL)
                elif len(result) + len(chunk) <= RESULT_FD_LIMIT_BYTES:
                    result += chunk
        if status is None:  # timed out, or the output cap was hit
            os.killpg(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        for fd in open_fds:
            os.close(fd)
        return {"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out,
                "output_overflow": overflow, "log_tail": tail.decode("utf-8", "replace"),
                "result": base64.b64encode(bytes(result)).decode()}

    def _steer(self, go_w: int) -> str | None:
        """The sandbox's word on a held child: ``go`` (told through ``go_w`` to go on to its
        candidate), ``cancel`` (to be killed; also when the sandbox hung up), None while it waits."""
        while (message := self.lines.take()) is not None:
            if message.get("go"):
                with contextlib.suppress(OSError):  # it may have ended on its own meanwhile
                    os.write(go_w, GO)
                return "go"
            if message.get("cancel"):
                return "cancel"
        return "cancel" if self.lines.closed else None

    def serve(self) -> None:
        self._send({"ready": True})
        while (job := self.lines.read()) is not None:
            if "dir" not in job:
                continue  # a go or cancel that came after its held child had ended
            outcome = self.run(job)
            self._send(outcome)
            if not outcome["clean"] or self.lines.closed:
                return

    def _send(self, message: dict[str, object]) -> None:
        self.connection.sendall(json.dumps(message).encode() + b"\n")


def main(argv: list[str]) -> int:
    private_dirs = [Path(p) for p in argv[1:] if Path(p).is_dir()]
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(argv[0])
    Zygote(connection, private_dirs).serve()
    kill_descendants()
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
