"""Which process isolation still lets CUDA run on this machine: one canary per combination.

On the H200 host bubblewrap was missing and the launcher's network + PID namespaces broke every
CUDA call (error 304, cudaErrorOperatingSystem), so GPU candidates ran with a network namespace
only. This probe tries every combination the sandbox builds (its own profiles, through
``isolation.run_isolated`` and the real canary, as ``kernel_isolation`` does) and the ones it
could build (user, mount, IPC and UTS namespaces, a fresh ``/proc`` for the PID namespace,
no_new_privs, a seccomp deny-list, an unprivileged user), each in a fresh child that initialises
CUDA, runs a torch op and launches the sandbox's compiled canary through the kernel ABI. Nothing
needs changing on the machine: a combination it may not create is recorded as failing, with why.

    python bench/gpu/isolation_probe.py OUT_DIR      # writes OUT_DIR/isolation_probe.json

The same file is also the probe's own launcher (``--enter CONFIG -- PROGRAM...``) and canary
(``--canary [LIBRARY]``), so a child needs nothing but this file and the interpreter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# Run as a script, this folder leads sys.path, and its packager.py would shadow the project's
# packager here and in every sandboxed child (they inherit this import path).
sys.path[:] = [str(REPO), *(p for p in sys.path if p and Path(p).resolve() != Path(__file__).resolve().parent)]

from gpu_sandbox_service.launcher import (  # noqa: E402
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
)

NOBODY = 65534
CASE_TIMEOUT_S = 45.0
DEADLINE_S = 100.0
PARALLEL = 4


# -- the probe's launcher: runs in the child, before PROGRAM ----------------------------------------------


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _exec_program(program: list[str], config: dict[str, Any]) -> None:
    from gpu_sandbox_service.launcher import install_seccomp, mount_proc, no_new_privs

    if config.get("proc"):
        if not (config.get("mount") and config.get("pid")):
            raise OSError(0, "a fresh /proc needs its own mount and PID namespaces")
        mount_proc()
    if config.get("drop_user"):
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    if config.get("no_new_privs") or config.get("seccomp"):
        no_new_privs()  # a filter needs it unless the process is privileged; the sandbox sets both
    if config.get("seccomp"):
        install_seccomp()
    try:
        os.execv(program[0], program)
    except OSError as exc:
        raise OSError(exc.errno, f"exec {program[0]}: {exc.strerror}") from exc


def enter(config: dict[str, Any], program: list[str]) -> int:
    """Create the namespaces ``config`` names, then run ``program`` in them (exit 125: could not)."""
    from gpu_sandbox_service.launcher import private_mounts, reap_until, unshare

    try:
        uid, gid = os.getuid(), os.getgid()
        flags = 0
        for key, flag in (("user", CLONE_NEWUSER), ("mount", CLONE_NEWNS), ("net", CLONE_NEWNET),
                          ("pid", CLONE_NEWPID), ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS)):
            if config.get(key):
                flags |= flag
        if flags:
            unshare(flags)
        if config.get("user"):
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"0 {uid} 1")
            _write("/proc/self/gid_map", f"0 {gid} 1")
        if config.get("mount"):
            private_mounts()
        if not config.get("pid"):
            _exec_program(program, config)
        init = os.fork()  # the PID namespace's init: the first child
        if init:
            return reap_until(init)
        child = os.fork()
        if child == 0:
            _exec_program(program, config)
        return reap_until(child)
    except OSError as exc:
        print(f"probe launcher: {exc}", file=sys.stderr, flush=True)
        return 125


# -- the canary: runs in the isolated child -------------------------------------------------------------


def canary(library: str | None) -> int:
    """Initialise CUDA, run a torch op, launch the sandbox's canary kernel; one JSON line of steps."""
    steps: dict[str, str] = {"pid": str(os.getpid()), "uid": str(os.getuid())}
    ok = True
    try:
        import torch

        x = torch.arange(1000, dtype=torch.float32, device="cuda")
        y = x + 1
        torch.cuda.synchronize()
        steps["torch"] = "ok" if bool((y - x == 1).all()) else "wrong result"
    except Exception as exc:
        steps["torch"] = f"{type(exc).__name__}: {exc}"[:600]
    ok = steps["torch"] == "ok"
    if library and ok:
        try:
            from gpu_sandbox_service.canary import run_canary

            steps["kf_canary"] = run_canary("cuda", library) or "ok"
        except Exception as exc:
            steps["kf_canary"] = f"{type(exc).__name__}: {exc}"[:600]
        ok = steps["kf_canary"] == "ok"
    print(json.dumps(steps), flush=True)
    return 0 if ok else 1


# -- the parent: cases, running them, the report ---------------------------------------------------------


@dataclass
class Case:
    """One combination: the probe's launcher with ``config``, or a sandbox profile through ``run_isolated``."""

    name: str
    config: dict[str, bool] = field(default_factory=dict)
    profile: Any = None  # an isolation.Profile


def raw_cases(root: bool, work: Path) -> list[Case]:
    combos = [
        "", "net", "pid", "net+pid", "mount", "mount+pid", "mount+pid+proc", "net+mount+pid+proc", "ipc+uts",
        "user", "user+net", "user+pid", "user+mount+pid+proc", "user+net+mount+pid+proc+ipc+uts",
        "no_new_privs", "seccomp", "net+mount+pid+proc+ipc+uts+seccomp",
        "user+net+mount+pid+proc+ipc+uts+seccomp",
    ]
    if root:
        combos += ["drop_user", "net+mount+pid+proc+ipc+uts+drop_user+seccomp"]
    cases = [Case(f"probe: {c or 'none'}", {k: True for k in c.split("+") if k}) for c in combos]
    return cases + [Case("sandbox: " + p.describe(), profile=p) for p in sandbox_ladder(work)]


def sandbox_ladder(work: Path) -> list[Any]:
    """The profiles a cuda sandbox with run dirs in ``work`` tries, plus the one that failed before (pid
    namespace without its own /proc)."""
    from gpu_sandbox_service.isolation import Profile, detect_features, profiles

    return [*profiles(detect_features(), gpu=True, work_dir=work), Profile(False, True, True)]


def build_canary(work: Path) -> tuple[Path | None, str]:
    """The sandbox's cuda canary source, built with nvcc for this GPU (no CUDA context here)."""
    from gpu_sandbox_service.compiler import INCLUDE_DIR
    from gpu_sandbox_service.kernel_isolation import SOURCES

    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).exists()), None)
    if nvcc is None:
        return None, "nvcc not found"
    arch = "native"
    try:
        cap = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=True).stdout.split()[0]
        arch = "sm_" + cap.replace(".", "")
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    source, library = work / "canary.cu", work / "canary.so"
    source.write_text(SOURCES["cuda"])
    proc = subprocess.run([nvcc, f"-arch={arch}", "-O2", "-shared", "-Xcompiler", "-fPIC", f"-I{INCLUDE_DIR}",
                           "-o", str(library), str(source)], capture_output=True, text=True, timeout=90, check=False)
    if proc.returncode != 0:
        return None, f"nvcc -arch={arch} failed: {(proc.stdout + proc.stderr)[-800:]}"
    return library, f"nvcc -arch={arch}"


def _run_raw(case: Case, library: Path | None, run_dir: Path) -> dict[str, Any]:
    from gpu_sandbox_service.isolation import allowed_environment

    me = [sys.executable, str(Path(__file__).resolve())]
    library_copy = None
    if library is not None:
        library_copy = run_dir / "canary.so"
        shutil.copyfile(library, library_copy)
    argv = [*me, "--enter", json.dumps(case.config), "--", *me, "--canary", *([str(library_copy)] if library_copy
                                                                                else [])]
    env = allowed_environment(run_dir)
    proc = subprocess.Popen(argv, cwd=run_dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=CASE_TIMEOUT_S)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        timed_out = True
    _kill_group(proc.pid)
    return _outcome(proc.returncode, out.decode(errors="replace"), timed_out)


def _run_profile(case: Case, library: Path | None, run_dir: Path) -> dict[str, Any]:
    from gpu_sandbox_service.isolation import ResourceLimits, run_isolated
    from gpu_sandbox_service.kernel_isolation import CANARY
    from gpu_sandbox_service.models import Limits

    if library is None:
        return {"ok": False, "error": "no canary library (see build)"}
    assert case.profile is not None
    shutil.copyfile(library, run_dir / "canary.so")
    limits = Limits()
    outcome = asyncio.run(run_isolated(
        [*CANARY, "cuda", str(run_dir / "canary.so")], run_dir=run_dir,
        limits=ResourceLimits.for_run(limits, "cuda"), timeout_s=CASE_TIMEOUT_S,
        output_cap_bytes=limits.output_cap_bytes, log_tail_bytes=limits.log_tail_bytes, gpu=True,
        profile=case.profile))
    return _outcome(outcome.returncode, outcome.log_tail, outcome.timed_out)


def _outcome(returncode: int | None, output: str, timed_out: bool) -> dict[str, Any]:
    steps: dict[str, Any] = {}
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                steps = json.loads(line)
                break
            except ValueError:
                continue
    ok = returncode == 0 and not timed_out
    error = "" if ok else ("timed out" if timed_out else output.strip()[-800:] or f"exit status {returncode}")
    return {"ok": ok, "returncode": returncode, "steps": steps, "error": error}


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_case(case: Case, library: Path | None, work: Path, started: float) -> dict[str, Any]:
    row: dict[str, Any] = {"case": case.name, "config": case.config,
                           "profile": case.profile.describe() if case.profile else None}
    if time.perf_counter() - started > DEADLINE_S:
        return {**row, "ok": False, "error": "skipped: deadline"}
    case_started = time.perf_counter()
    run_dir = Path(tempfile.mkdtemp(prefix="case-", dir=work))
    run_dir.chmod(0o777)  # an unprivileged user (drop_user) must read and write its run directory
    try:
        row.update(_run_profile(case, library, run_dir) if case.profile else _run_raw(case, library, run_dir))
    except Exception as exc:
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[-800:], traceback=traceback.format_exc()[-2000:])
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    row["seconds"] = round(time.perf_counter() - case_started, 2)
    return row


def _read(path: str, limit: int = 500) -> str | None:
    try:
        return Path(path).read_text().strip()[:limit]
    except OSError:
        return None


def host_facts() -> dict[str, Any]:
    """What decides which namespaces work: privileges, sysctls, container hints, the driver."""
    from gpu_sandbox_service.isolation import detect_features

    bwrap = shutil.which("bwrap")
    status = _read("/proc/self/status", 1 << 16) or ""
    facts: dict[str, Any] = {
        "kernel": platform.release(), "machine": platform.machine(), "python": platform.python_version(),
        "euid": os.geteuid(), "bwrap": bwrap, "sandbox_features": _safe(lambda: detect_features().describe()),
        "unprivileged_userns_clone": _read("/proc/sys/kernel/unprivileged_userns_clone"),
        "max_user_namespaces": _read("/proc/sys/user/max_user_namespaces"),
        "apparmor_restrict_unprivileged_userns": _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        "dockerenv": Path("/.dockerenv").exists(), "cgroup": _read("/proc/1/cgroup"),
        "self_status": {k: v.strip() for k, _, v in (line.partition(":") for line in status.splitlines())
                        if k in ("Seccomp", "NoNewPrivs", "CapEff", "CapBnd")},
        "nvidia_driver": _read("/proc/driver/nvidia/version"),
        "nvidia_devices": sorted(f"{p.name} {oct(p.stat().st_mode & 0o777)}" for p in Path("/dev").glob("nvidia*")),
    }
    if bwrap:
        facts["bwrap_version"] = _safe(lambda: subprocess.run([bwrap, "--version"], capture_output=True, text=True,
                                                              timeout=10).stdout.strip())
    return facts


def _safe(thunk: Any) -> Any:
    try:
        return thunk()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["case | ok | seconds | detail"]
    for r in rows:
        steps = r.get("steps") or {}
        failed_step = steps.get("kf_canary") if steps.get("torch") == "ok" else steps.get("torch")
        detail = "" if r.get("ok") else failed_step or r.get("error", "")
        lines.append(f"{r['case']} | {'yes' if r.get('ok') else 'NO'} | {r.get('seconds', '')} | "
                     f"{' '.join(str(detail).split())[:160]}")
    return "\n".join(lines)


def run(out_dir: Path) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {"script": "isolation_probe", "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    rows: list[dict[str, Any]] = []
    try:
        results["host"] = host_facts()
        with tempfile.TemporaryDirectory(prefix="kforge-isolation-probe-") as scratch:
            work = Path(scratch)
            work.chmod(0o755)
            library, build = build_canary(work)
            results["canary_build"] = build
            cases = raw_cases(os.geteuid() == 0, work)
            with ThreadPoolExecutor(PARALLEL) as pool:
                rows = list(pool.map(lambda c: run_case(c, library, work, started), cases))
    except Exception as exc:
        results["error"] = f"{type(exc).__name__}: {exc}"
        results["traceback"] = traceback.format_exc()[-4000:]
    results["rows"] = rows
    passing = [r["case"] for r in rows if r.get("ok")]
    results["summary"] = {"passing": passing, "failing": [r["case"] for r in rows if not r.get("ok")],
                          "seconds": round(time.perf_counter() - started, 1)}
    (out_dir / "isolation_probe.json").write_text(json.dumps(results, indent=1, default=str))
    print(table(rows))
    print(json.dumps(results["summary"], indent=1))
    return results


def main(argv: list[str]) -> int:
    if argv[:1] == ["--enter"] and len(argv) >= 4 and argv[2] == "--":
        return enter(json.loads(argv[1]), argv[3:])
    if argv[:1] == ["--canary"]:
        return canary(argv[1] if len(argv) > 1 else None)
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    run(Path(argv[0]))
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
