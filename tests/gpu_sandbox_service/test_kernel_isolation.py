"""Choosing the strongest isolation under which kernels run, with real processes and a real canary."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from gpu_sandbox_service.canary import main as canary_main
from gpu_sandbox_service.compiler import Compiler, detect_toolchain
from gpu_sandbox_service.isolation import (
    ProcessOutcome,
    Profile,
    ResourceLimits,
    choose_profile,
    detect_features,
    profiles,
    run_isolated,
)
from gpu_sandbox_service.kernel_isolation import SOURCES, choose_kernel_profile
from servicekit.errors import FailedPrecondition
from tests.gpu_sandbox_service.conftest import TEST_LIMITS

LIMITS = ResourceLimits(cpu_time_s=60, max_processes=4096, open_files=256, file_size_bytes=1 << 20,
                        address_space_bytes=None)
# Fails in any network namespace but the test's own: a stand-in for a device that breaks there.
HOST_NETWORK = os.readlink("/proc/self/ns/net")
NEEDS_HOST_NETWORK = f"import os, sys; sys.exit(os.readlink('/proc/self/ns/net') != {HOST_NETWORK!r})"


def _compiler(tmp_path: Path) -> Compiler:
    return Compiler(detect_toolchain("cpu", "cpu"), tmp_path / "cache", tmp_path / "scratch", TEST_LIMITS)


async def _spawn(argv: list[str], run_dir: Path, profile: Profile) -> ProcessOutcome:
    return await run_isolated(argv, run_dir=run_dir, limits=LIMITS, timeout_s=20.0, output_cap_bytes=1 << 16,
                              log_tail_bytes=1024, profile=profile)


def test_the_cpu_canary_runs_under_the_strongest_profile(tmp_path: Path) -> None:
    chosen = asyncio.run(choose_kernel_profile("cpu", _compiler(tmp_path), tmp_path / "scratch", _spawn))
    assert chosen == profiles(detect_features(), gpu=False)[0]


def test_a_broken_canary_names_each_profile_it_failed_under(tmp_path: Path) -> None:
    async def spawn_broken(argv: list[str], run_dir: Path, profile: Profile) -> ProcessOutcome:
        (run_dir / "canary.so").write_bytes(b"not a shared object")
        return await _spawn(argv, run_dir, profile)

    ladder = profiles(detect_features(), gpu=True)
    with pytest.raises(FailedPrecondition, match="not even a trivial kernel runs") as info:
        asyncio.run(choose_kernel_profile("cpu", _compiler(tmp_path), tmp_path / "scratch", spawn_broken, ladder))
    assert all(p.describe() in str(info.value) for p in ladder)


def test_gpu_profiles_weaken_step_by_step_to_none() -> None:
    ladder = profiles(detect_features(), gpu=True)
    assert ladder[-1] == Profile(bubblewrap=False, network=False, pid=False)
    assert len(set(ladder)) == len(ladder)
    assert ladder[0] == profiles(detect_features(), gpu=False)[0]


def test_the_first_profile_that_works_is_kept_and_the_stronger_failures_named(tmp_path: Path) -> None:
    ladder = profiles(detect_features(), gpu=True)

    async def problem_under(profile: Profile) -> str | None:
        outcome = await _spawn([sys.executable, "-c", NEEDS_HOST_NETWORK], tmp_path, profile)
        return None if outcome.returncode == 0 else f"exit status {outcome.returncode}"

    chosen, failures = asyncio.run(choose_profile(ladder, problem_under))
    assert not chosen.network
    stronger = ladder[: ladder.index(chosen)]
    assert all(p.network for p in stronger) and len(failures) == len(stronger)
    assert all(f.startswith(p.describe()) for f, p in zip(failures, stronger, strict=True))


def test_no_working_profile_names_every_failure() -> None:
    ladder = profiles(detect_features(), gpu=True)

    async def never(profile: Profile) -> str | None:
        return "cudaErrorOperatingSystem"

    with pytest.raises(RuntimeError) as info:
        asyncio.run(choose_profile(ladder, never))
    assert str(info.value).count("cudaErrorOperatingSystem") == len(ladder)


def test_the_canary_child_checks_what_the_kernel_computed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    compiler = _compiler(tmp_path)
    good = asyncio.run(compiler.compile(SOURCES["cpu"], [])).library
    wrong = asyncio.run(compiler.compile(SOURCES["cpu"].replace("+ 1.0f", "+ 2.0f"), [])).library
    assert good is not None and wrong is not None
    assert canary_main(["cpu", str(good)]) == 0 and "canary ok" in capsys.readouterr().out
    assert canary_main(["cpu", str(wrong)]) == 1 and "output is wrong" in capsys.readouterr().out
    assert canary_main(["cpu", str(tmp_path / "missing.so")]) == 1 and "cannot load" in capsys.readouterr().out
