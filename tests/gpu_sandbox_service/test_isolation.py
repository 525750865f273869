"""The runtime isolation on its own, with the static audit off: attacks that slip past the audit
must still fail to reach secrets, the network, the filesystem or the process table."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gpu_sandbox_service import isolation
from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.evaluator import Evaluator
from gpu_sandbox_service.isolation import (
    Profile,
    ResourceLimits,
    allowed_environment,
    detect_features,
    profiles,
    run_isolated,
)
from gpu_sandbox_service.models import Limits
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from tests.gpu_sandbox_service.conftest import TEST_LIMITS, load_corpus, softmax_card

ENTRIES = {e.name: e for e in load_corpus("cpu_isolation")}
LIMITS = ResourceLimits(cpu_time_s=60, max_processes=4096, open_files=256, file_size_bytes=1 << 20,
                        address_space_bytes=None)


def run(argv: list[str], run_dir: Path, **options: object):  # type: ignore[no-untyped-def]
    defaults: dict[str, object] = {"limits": LIMITS, "timeout_s": 20.0, "output_cap_bytes": 1 << 20,
                                   "log_tail_bytes": 4096}
    return asyncio.run(run_isolated(argv, run_dir=run_dir, **{**defaults, **options}))  # type: ignore[arg-type]


def test_environment_is_an_allow_list_without_secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "kforge-secret")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/lib")
    env = allowed_environment(tmp_path, {"GITHUB_TOKEN": "kforge-secret", "CUDA_VISIBLE_DEVICES": "1"})
    assert "OPENAI_API_KEY" not in env and "GITHUB_TOKEN" not in env
    assert env["LD_LIBRARY_PATH"] == "/opt/lib" and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    sleeper = f"sleep 300.{os.getpid()}"  # a command line no other process has
    outcome = run(["/bin/sh", "-c", f"{sleeper} & {sleeper}"], tmp_path, timeout_s=1.0)
    assert outcome.timed_out and outcome.wall_s < 10
    assert _gone(sleeper)


def test_output_is_capped_and_the_writer_killed(tmp_path: Path) -> None:
    outcome = run(["/bin/sh", "-c", "yes kforge"], tmp_path, output_cap_bytes=1 << 16, log_tail_bytes=64)
    assert outcome.output_overflow and not outcome.timed_out
    assert 0 < len(outcome.log_tail) <= 64


def _strongest(bubblewrap: bool, work_dir: Path) -> Profile:
    """The strongest profile of the GPU ladder with or without bubblewrap; skips where it gives no read-only view."""
    ladder = [p for p in profiles(detect_features(), gpu=True, work_dir=work_dir) if p.bubblewrap == bubblewrap]
    if not ladder or not ladder[0].read_only_fs:
        pytest.skip(f"no {'bubblewrap' if bubblewrap else 'launcher'} profile with a read-only view here")
    return ladder[0]


VIEWS = pytest.mark.parametrize("bubblewrap", [True, False], ids=["bubblewrap", "launcher-only"])


@VIEWS
def test_rest_of_the_filesystem_is_read_only(tmp_path: Path, bubblewrap: bool) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    profile = _strongest(bubblewrap, tmp_path)
    in_repository = Path(__file__).with_name("escaped-from-the-sandbox")
    under_prefix = Path(sys.prefix) / "escaped-from-the-sandbox"
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="kforge-host-") as host_file:
        script = (f"touch inside; touch {outside}; touch {in_repository}; touch {under_prefix}; touch /etc/kf-escaped;"
                  f" cat {host_file.name} || echo host-file-hidden; ls -A /tmp")
        outcome = run(["/bin/sh", "-c", script], run_dir, profile=profile)
    assert profile.describe().startswith(("bubblewrap (read-only fs)", "launcher (read-only fs)"))
    assert (run_dir / "inside").exists()
    assert not outside.exists()  # /tmp is a private tmpfs in the sandbox
    assert not in_repository.exists() and not under_prefix.exists() and not Path("/etc/kf-escaped").exists()
    for escaped in (in_repository, under_prefix, "/etc/kf-escaped"):  # refused, not hidden in a private copy
        assert f"{escaped}': Read-only file system" in outcome.log_tail, outcome.log_tail
    assert "host-file-hidden" in outcome.log_tail
    seen_in_tmp = set(outcome.log_tail.split("host-file-hidden")[-1].split())
    assert seen_in_tmp <= {_first_folder_under_tmp(p) for p in (run_dir, *map(Path, sys.path), Path(sys.prefix))}


def _first_folder_under_tmp(path: Path) -> str | None:
    """What an empty /tmp must hold for ``path`` to be bound into it: its first folder there."""
    parts = path.resolve().parts
    return parts[2] if parts[:2] == ("/", "tmp") and len(parts) > 2 else None


@VIEWS
def test_a_compile_writes_its_temporaries_to_the_private_tmp(tmp_path: Path, bubblewrap: bool) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "hello.cpp").write_text('#include <cstdio>\nint main() { std::puts("hello from the run dir"); }\n')
    env = {**allowed_environment(run_dir), "TMPDIR": "/tmp"}
    script = "g++ -v -o hello hello.cpp 2>&1 | grep -c ' /tmp/cc' && ./hello"
    outcome = run(["/bin/sh", "-c", script], run_dir, profile=_strongest(bubblewrap, tmp_path), env=env,
                  log_tail_bytes=1 << 16)
    assert outcome.returncode == 0, outcome.log_tail
    assert "hello from the run dir" in outcome.log_tail and int(outcome.log_tail.split()[0]) > 0


def test_file_size_limit_applies(tmp_path: Path) -> None:
    outcome = run(["/bin/sh", "-c", "head -c 4000000 /dev/zero > big"], tmp_path)
    assert outcome.returncode != 0 and (tmp_path / "big").stat().st_size <= 1 << 20


@pytest.fixture(scope="module")
def evaluator_without_audit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Evaluator, BlobStore]:
    root = tmp_path_factory.mktemp("isolation")
    store = BlobStore(root / "blobs")
    limits = Limits(**{**TEST_LIMITS.model_dump(), "static_audit": False})
    return Evaluator(root, "cpu", store, limits), store


def evaluate_entry(evaluator_and_store: tuple[Evaluator, BlobStore], name: str, **substitutions: str) -> str:
    evaluator, store = evaluator_and_store
    source = ENTRIES[name].source
    for key, value in substitutions.items():
        source = source.replace(f"@{key}@", value)
    request = EvaluateRequest(candidate_id=name, card=softmax_card(store), source=source, backend="cpu",
                                options=EvaluationOptions(fresh_input_sets=1, timing_runs=3))
    result = asyncio.run(evaluator.evaluate(request))
    assert result.status.value == ENTRIES[name].expected, f"{result.error_message}\n{result.log_tail}"
    return result.status.value


def test_secrets_do_not_reach_a_candidate(evaluator_without_audit: tuple[Evaluator, BlobStore],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "kforge-secret")
    monkeypatch.setenv("KFORGE_TOKEN", "kforge-secret")
    evaluate_entry(evaluator_without_audit, "leak_environment")


def test_a_candidate_cannot_reach_the_network(evaluator_without_audit: tuple[Evaluator, BlobStore]) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        evaluate_entry(evaluator_without_audit, "network_connect", PORT=str(listener.getsockname()[1]))


def test_a_candidate_cannot_write_outside_its_run_dir(evaluator_without_audit: tuple[Evaluator, BlobStore],
                                                      tmp_path: Path) -> None:
    target = tmp_path / "escaped"
    evaluate_entry(evaluator_without_audit, "write_outside", PATH=str(target))
    assert not target.exists()


@pytest.fixture
def without_bubblewrap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This machine as the GPU host sees it: no bwrap on the PATH, so the launcher isolates alone."""
    which = isolation.shutil.which
    monkeypatch.setattr(isolation.shutil, "which",
                        lambda name, *a, **k: None if name == "bwrap" else which(name, *a, **k))
    detect_features.cache_clear()
    try:
        yield
    finally:
        detect_features.cache_clear()


def test_a_candidate_cannot_write_outside_its_run_dir_without_bubblewrap(
        without_bubblewrap: None, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    evaluator = Evaluator(tmp_path_factory.mktemp("launcher-only"), "cpu", BlobStore(tmp_path / "blobs"),
                          Limits(**{**TEST_LIMITS.model_dump(), "static_audit": False}))
    if not evaluator.isolation.startswith("launcher (read-only fs)"):
        pytest.skip(f"the launcher gives no read-only view here: {evaluator.isolation}")
    in_repository = Path(__file__).with_name("escaped-from-the-sandbox")
    for target in (tmp_path / "escaped", in_repository):
        evaluate_entry((evaluator, evaluator.blobs), "write_outside", PATH=str(target))
        assert not target.exists()


def test_no_candidate_process_outlives_its_evaluation(evaluator_without_audit: tuple[Evaluator, BlobStore]) -> None:
    evaluate_entry(evaluator_without_audit, "fork_orphan")
    assert not _processes_named("kf-orphan")


def _gone(fragment: str, wait_s: float = 5.0) -> bool:
    """No process with this command line, allowing killed ones a moment to be reaped."""
    deadline = time.monotonic() + wait_s
    while _processes_named(fragment):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _processes_named(fragment: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in (comm, cmdline.strip()) and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def test_launcher_alone_gives_network_and_pid_namespaces(tmp_path: Path) -> None:
    """The fallback when bubblewrap is absent (e.g. a GPU host image): the launcher isolates."""
    import json
    import subprocess
    import sys

    config = {"cwd": str(tmp_path), "new_network": True, "new_pid": True, "limits": {"open_files": 64}}
    script = "echo pid=$$; ulimit -n; grep -c : /proc/net/dev"
    done = subprocess.run([sys.executable, "-I", "-m", "gpu_sandbox_service.launcher", json.dumps(config), "--",
                           "/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, check=False)
    if "cannot isolate" in done.stderr:
        pytest.skip(f"namespaces are not permitted here: {done.stderr.strip()}")
    lines = done.stdout.split()
    assert done.returncode == 0 and lines[0] == "pid=2" and lines[1] == "64"
    assert lines[2] == "1"  # only the loopback interface of a fresh network namespace


GATED = """
import pathlib, sys
pathlib.Path("started").write_text("imports done")
sys.path.insert(0, {repo!r})
from gpu_sandbox_service.harness.phases import wait_for_turn
wait_for_turn()
pathlib.Path("ran").write_text("had its turn")
"""


def test_a_gated_program_starts_before_its_turn_and_runs_only_in_it(tmp_path: Path) -> None:
    """A re-measure's process imports while another holds the device, and touches it only in its turn."""
    repo = str(Path(__file__).resolve().parents[2])
    held = asyncio.Lock()
    seen: dict[str, bool] = {}

    async def scenario() -> object:
        await held.acquire()  # another candidate holds the slot
        task = asyncio.create_task(run_isolated(
            [sys.executable, "-c", GATED.format(repo=repo)], run_dir=tmp_path, limits=LIMITS, timeout_s=1.0,
            output_cap_bytes=1 << 20, log_tail_bytes=4096, turn=lambda: held))
        end = time.monotonic() + 30
        while not (tmp_path / "started").exists() and time.monotonic() < end:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # longer than the timeout, which counts from the turn
        seen["started"], seen["ran"] = (tmp_path / "started").exists(), (tmp_path / "ran").exists()
        held.release()
        return await task

    outcome = asyncio.run(scenario())
    assert seen == {"started": True, "ran": False}
    assert not outcome.timed_out and outcome.returncode == 0, outcome.log_tail  # type: ignore[attr-defined]
    assert (tmp_path / "ran").read_text() == "had its turn"


def test_a_gated_program_that_never_says_ready_times_out_without_its_turn(tmp_path: Path) -> None:
    taken: list[bool] = []

    @contextlib.asynccontextmanager
    async def turn() -> AsyncIterator[None]:
        taken.append(True)
        yield

    outcome = run([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, timeout_s=1.0, turn=turn)
    assert outcome.timed_out and not taken
