"""The launcher: a tiny program between the sandbox and a compiler or candidate process.

``python -I -m gpu_sandbox_service.launcher CONFIG_JSON -- PROGRAM ARGS...`` applies, after exec
and before it execs PROGRAM: its own session, death with its parent, the namespaces asked for
(network, PID, mount, IPC, UTS; an outer bubblewrap provides them otherwise), resource limits,
a private working directory, an unprivileged user, no_new_privs and a seccomp deny-list. Doing
this in a separate program keeps ``preexec_fn`` (unsafe in a threaded server) out of the server.

With a PID namespace the launcher's first child is the namespace's init: with a mount namespace
of its own it mounts a fresh ``/proc`` (CUDA fails with error 304 in a PID namespace that still
sees the host's ``/proc``, as bench/gpu/isolation_probe.py measured on an H200 host), then it
reaps orphans and exits with PROGRAM's status, which makes the kernel kill whatever PROGRAM left.

With ``read_only_fs`` (a mount namespace of its own, no outer bubblewrap) it gives the view
bubblewrap gives: every mount read-only but the working directory, a fresh size-limited tmpfs on
``/tmp`` (with the ``keep`` folders under ``/tmp`` bound back read-only), and ``/proc`` replaced by
the PID namespace's own. ``/dev`` itself is read-only too, which stops creating files there but
not writing to a device (CUDA's ``/dev/nvidia*`` still open read-write); the mounts under it
(``/dev/shm``, ``/dev/pts``) stay as they are, as under bubblewrap's GPU profile. All of it
happens before seccomp, which refuses mount.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import re
import resource
import signal
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
                   | CLONE_NEWNET)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_NOATIME, MS_NODIRATIME = 1, 2, 4, 8, 32, 1024, 2048
MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 4096, 1 << 14, 1 << 18, 1 << 21, 1 << 24
#: A mount's flags (statvfs's ST_*) that a bind remount must repeat, as the MS_* it repeats them with.
KEPT_MOUNT_FLAGS = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC,
                    os.ST_NOATIME: MS_NOATIME, os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME}
PRIVATE_TMP_BYTES = 512 << 20
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 22, 38
SECCOMP_MODE_FILTER = 2
EXIT_LAUNCH_FAILED = 125

_NAMESPACES = {"new_network": CLONE_NEWNET, "new_pid": CLONE_NEWPID, "new_mount": CLONE_NEWNS,
               "new_ipc": CLONE_NEWIPC, "new_uts": CLONE_NEWUTS}

_RLIMITS = {
    "cpu_time_s": resource.RLIMIT_CPU,
    "max_processes": resource.RLIMIT_NPROC,
    "open_files": resource.RLIMIT_NOFILE,
    "file_size_bytes": resource.RLIMIT_FSIZE,
    "core_bytes": resource.RLIMIT_CORE,
    "address_space_bytes": resource.RLIMIT_AS,
}

#: Syscalls no compiler or kernel needs and an escape would: tracing, mounts, modules, keys, kexec,
#: namespaces, bpf. They fail with EPERM; so does clone() asking for a namespace.
DENIED_SYSCALLS = (
    "ptrace", "personality", "pivot_root", "chroot", "mount", "umount2", "swapon", "reboot", "init_module",
    "delete_module", "kexec_load", "kexec_file_load", "add_key", "request_key", "keyctl", "unshare", "setns",
    "perf_event_open", "open_by_handle_at", "process_vm_readv", "process_vm_writev", "finit_module", "bpf",
    "userfaultfd", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
)
# Numbers shared by both architectures (added after the tables were unified).
_UNIFIED = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
            "mount_setattr": 442, "clone3": 435}
_X86_64 = {
    "ptrace": 101, "personality": 135, "pivot_root": 155, "chroot": 161, "mount": 165, "umount2": 166,
    "swapon": 167, "reboot": 169, "init_module": 175, "delete_module": 176, "kexec_load": 246,
    "kexec_file_load": 320, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272, "setns": 308,
    "perf_event_open": 298, "open_by_handle_at": 304, "process_vm_readv": 310, "process_vm_writev": 311,
    "finit_module": 313, "bpf": 321, "userfaultfd": 323, "clone": 56,
}
_AARCH64 = {
    "ptrace": 117, "personality": 92, "pivot_root": 41, "chroot": 51, "mount": 40, "umount2": 39, "swapon": 224,
    "reboot": 142, "init_module": 105, "delete_module": 106, "kexec_load": 104, "kexec_file_load": 294,
    "add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97, "setns": 268, "perf_event_open": 241,
    "open_by_handle_at": 265, "process_vm_readv": 270, "process_vm_writev": 271, "finit_module": 273, "bpf": 280,
    "userfaultfd": 282, "clone": 220,
}
# machine -> (AUDIT_ARCH_*, syscall numbers, whether x32 numbers must be refused too)
SECCOMP_ARCHES = {"x86_64": (0xC000003E, _X86_64 | _UNIFIED, True),
                  "aarch64": (0xC00000B7, _AARCH64 | _UNIFIED, False)}
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_X32_SYSCALL_BIT = 0x40000000
_ARGS0_LOW = 16  # offsetof(struct seccomp_data, args[0]), low word on little-endian machines


def seccomp_supported(machine: str | None = None) -> bool:
    """Whether the deny-list knows this architecture's syscall numbers."""
    return (machine or platform.machine()) in SECCOMP_ARCHES


def seccomp_filter(machine: str) -> bytes:
    """The classic-BPF deny-list for ``machine``.

    Another architecture's calls (32-bit compat, x32) are refused outright, since their numbers
    differ; clone3 answers ENOSYS so that libc falls back to clone, whose flags can be checked.
    """
    audit, numbers, x32 = SECCOMP_ARCHES[machine]
    program: list[str | tuple[int, str | None, str | None, int]] = [
        (_LD_ABS, None, None, 4), (_JEQ, None, "deny", audit), (_LD_ABS, None, None, 0)]
    if x32:
        program.append((_JGE, "deny", None, _X32_SYSCALL_BIT))
    program += [(_JEQ, "enosys", None, numbers["clone3"]), (_JEQ, "clone", None, numbers["clone"])]
    program += [(_JEQ, "deny", None, numbers[name]) for name in DENIED_SYSCALLS]
    program += [(_RET, None, None, _ALLOW), "clone", (_LD_ABS, None, None, _ARGS0_LOW),
                (_JSET, "deny", None, NAMESPACE_FLAGS), (_RET, None, None, _ALLOW),
                "deny", (_RET, None, None, _ERRNO | errno.EPERM), "enosys", (_RET, None, None, _ERRNO | errno.ENOSYS)]
    return _assemble(program)


def _assemble(program: list[str | tuple[int, str | None, str | None, int]]) -> bytes:
    """struct sock_filter[]: strings are labels, jump targets name them (None: the next instruction)."""
    labels: dict[str, int] = {}
    instructions: list[tuple[int, str | None, str | None, int]] = []
    for line in program:
        if isinstance(line, str):
            labels[line] = len(instructions)
        else:
            instructions.append(line)

    def offset(at: int, target: str | None) -> int:
        return 0 if target is None else labels[target] - at - 1

    return b"".join(struct.pack("HBBI", code, offset(i, jt), offset(i, jf), k)
                    for i, (code, jt, jf, k) in enumerate(instructions))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _die_with_parent() -> None:
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def unshare(flags: int) -> None:
    _check(_libc().unshare(flags), "unshare")


def private_mounts() -> None:
    """Mounts made from here on (the fresh /proc) stay in this namespace."""
    _check(_libc().mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")


def _mount(source: bytes | None, target: str, fstype: bytes | None, flags: int, data: bytes | None = None) -> None:
    _check(_libc().mount(source, target.encode(), fstype, flags, data), f"mount {target}")


def mount_points(mountinfo: str) -> list[str]:
    """Every mount point that ``/proc/self/mountinfo`` lists, once each, in its order (octal escapes undone)."""
    points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
              for line in mountinfo.splitlines() if line.strip()]
    return list(dict.fromkeys(points))


def _within(path: str, trees: list[str]) -> bool:
    return any(path == tree or path.startswith(tree.rstrip("/") + "/") for tree in trees)


def _remount_read_only(path: str) -> bool:
    """Make the mount visible at ``path`` read-only, keeping its other flags; False when none is
    (a mount hidden under a later one is listed but cannot be reached, nor remounted)."""
    try:
        kept = os.statvfs(path).f_flag
    except FileNotFoundError:
        return False
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    for st, ms in KEPT_MOUNT_FLAGS.items():
        flags |= ms if kept & st else 0
    if not kept & (os.ST_NOATIME | os.ST_RELATIME):
        flags |= MS_STRICTATIME
    try:
        _mount(None, path, None, flags)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return False
        raise
    return True


def _bind(source: int, target: str, read_only: bool) -> None:
    """Bind the folder open as ``source`` (an O_PATH descriptor) at ``target``, creating it if need be."""
    os.makedirs(target, exist_ok=True)
    _mount(f"/proc/self/fd/{source}".encode(), target, None, MS_BIND | MS_REC)
    if read_only and not _remount_read_only(target):
        raise OSError(errno.EINVAL, f"cannot make {target} read-only")


def _read_only_view(writable: str, keep: list[str]) -> None:
    """Every mount read-only but ``writable`` (bound onto itself), /proc and those under /dev; a fresh /tmp.

    ``keep``: folders under /tmp the program needs (its interpreter, say), bound back read-only.
    """
    writable = os.path.realpath(writable)
    keep = [os.path.realpath(p) for p in keep]
    folders = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in [writable, *keep]}
    try:
        _mount(b"tmpfs", "/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, f"size={PRIVATE_TMP_BYTES},mode=1777".encode())
        for path in keep:
            if _within(path, ["/tmp"]):
                _bind(folders[path], path, read_only=True)
        _bind(folders[writable], writable, read_only=False)
    finally:
        for fd in folders.values():
            os.close(fd)
    with open("/proc/self/mountinfo") as mountinfo:
        points = mount_points(mountinfo.read())
    left = ["/tmp", writable, "/proc"]  # the fresh /tmp and the binds in it were made above
    for point in points:
        if not _within(point, left) and not point.startswith("/dev/"):
            _remount_read_only(point)


def mount_proc() -> None:
    _check(_libc().mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")


def _apply_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        which = _RLIMITS[name]
        resource.setrlimit(which, (value, value))


def _drop_user(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def no_new_privs() -> None:
    _check(_libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")


def install_seccomp() -> None:
    machine = platform.machine()
    if not seccomp_supported(machine):
        raise OSError(errno.ENOSYS, f"seccomp: no deny-list for {machine}")
    code = seccomp_filter(machine)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HxxxxxxP", len(code) // 8, ctypes.addressof(buffer))
    _check(_libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0), "prctl(seccomp)")


def _exec(program: list[str], config: dict[str, object]) -> None:
    os.chdir(str(config["cwd"]))
    _apply_limits(dict(config.get("limits", {})))  # type: ignore[call-overload]
    user = config.get("user")
    if isinstance(user, list):
        _drop_user(int(user[0]), int(user[1]))
    if config.get("no_new_privs") or config.get("seccomp"):
        no_new_privs()
    if config.get("seccomp"):
        install_seccomp()
    try:
        os.execv(program[0], program)
    except OSError as exc:
        raise OSError(exc.errno, f"exec {program[0]}: {exc.strerror}") from exc


def reap_until(child: int) -> int:
    """Act as init: reap everything, return the exit code of ``child`` (128+N for signal N)."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return EXIT_LAUNCH_FAILED
        if pid == child:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _enter_namespaces(config: dict[str, object]) -> None:
    flags = 0
    for key, flag in _NAMESPACES.items():
        if config.get(key):
            flags |= flag
    if flags:
        unshare(flags)
    if config.get("new_mount"):
        private_mounts()
    if config.get("read_only_fs"):
        if not config.get("new_mount"):
            raise OSError(errno.EINVAL, "read_only_fs needs new_mount")
        _read_only_view(str(config["cwd"]), [str(p) for p in config.get("keep", [])])  # type: ignore[attr-defined]


def _run_as_init(program: list[str], config: dict[str, object]) -> int:
    """PID 1 of the new namespace: its own /proc, then PROGRAM as its only child."""
    _die_with_parent()
    if config.get("new_mount"):
        mount_proc()
    child = os.fork()
    if child == 0:
        _exec(program, config)
    return reap_until(child)


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
        _enter_namespaces(config)
        if not config.get("new_pid"):
            _exec(program, config)
        init = os.fork()
        if init:
            return reap_until(init)
        return _run_as_init(program, config)
    except OSError as exc:
        print(f"launcher: cannot isolate {program[0]}: {exc}", file=sys.stderr)
        return EXIT_LAUNCH_FAILED


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
