"""The strongest isolation under which a kernel still runs, found with a canary kernel.

Namespaces that are harmless on one host break CUDA on another (on an H200 host every CUDA call
failed under the launcher's own namespaces with cudaErrorOperatingSystem). Rather than fail
every candidate there, the sandbox builds a known-good kernel with its own compiler, runs it
through :mod:`gpu_sandbox_service.canary` under each profile of
:func:`gpu_sandbox_service.isolation.profiles`, strongest first, keeps the first that works and
logs what it gave up and why. When not even the weakest works, the device is unusable here and
the sandbox says so before any candidate is evaluated.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from gpu_sandbox_service.compiler import Compiler
from gpu_sandbox_service.isolation import (
    REQUIRED_ISOLATION,
    ProcessOutcome,
    Profile,
    choose_profile,
    detect_features,
    profiles,
    strongest_profile,
    user_blocker,
)
from gpu_sandbox_service.pycommand import python_module_command
from servicekit.errors import FailedPrecondition

log = logging.getLogger(__name__)

CANARY = python_module_command("gpu_sandbox_service.canary")

_HEAD = '#include <stdint.h>\n#include "kf_abi.h"\n'
_ENTRY = 'extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *stream)'

SOURCES = {
    "cpu": _HEAD + _ENTRY + """ {
  if (n_in != 1 || n_out != 1) return 1;
  const float *x = (const float *)in[0].data; float *y = (float *)out[0].data;
  for (int64_t i = 0; i < in[0].shape[0]; ++i) y[i] = x[i] + 1.0f;
  return 0;
}
""",
    "cuda": "#include <cuda_runtime.h>\n" + _HEAD + """
__global__ void kf_canary(const float *x, float *y, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
""" + _ENTRY + """ {
  if (n_in != 1 || n_out != 1) return 1;
  int64_t n = in[0].shape[0];
  kf_canary<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
      (const float *)in[0].data, (float *)out[0].data, n);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 100 + (int)err;
}
""",
}


# Runs a program (argv) isolated under a profile with run_dir as its only writable directory, the
# way the evaluator runs a candidate (its slot, limits and environment).
Spawn = Callable[[list[str], Path, Profile], Awaitable[ProcessOutcome]]


async def choose_kernel_profile(backend: str, compiler: Compiler, scratch: Path, spawn: Spawn,
                                candidates: Sequence[Profile] | None = None) -> Profile:
    """The profile ``backend``'s candidates run under; FailedPrecondition if kernels cannot run at all.

    ``candidates`` default to :func:`profiles` for the backend, strongest first.
    """
    built = await compiler.compile(SOURCES[backend], [])
    if built.library is None:
        raise FailedPrecondition(f"the sandbox cannot build its canary kernel ({built.error}): {built.log[-1500:]}")
    library = built.library

    async def problem_under(profile: Profile) -> str | None:
        run_dir = scratch / f"canary-{uuid.uuid4().hex}"
        run_dir.mkdir()
        try:
            shutil.copyfile(library, run_dir / "canary.so")
            outcome = await spawn([*CANARY, backend, str(run_dir / "canary.so")], run_dir, profile)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        if outcome.returncode == 0:
            return None
        if outcome.timed_out:
            return "timed out"
        return outcome.log_tail.strip()[-500:] or f"exit status {outcome.returncode}"

    try:
        ladder = candidates or profiles(detect_features(), gpu=backend == "cuda", work_dir=scratch)
        profile, failures = await choose_profile(ladder, problem_under)
    except RuntimeError as exc:
        raise FailedPrecondition(f"not even a trivial kernel runs in this sandbox: {exc}") from exc
    for failure in failures:
        log.warning("%s candidates get weaker isolation; the canary failed under %s", backend, failure)
    log.info("%s candidates run under %s", backend, profile.describe())
    return profile


def served_profiles(backend: str, scratch: Path, kernel_isolation: str) -> dict[str, Profile]:
    """What runs under which profile in a sandbox whose run dirs lie in ``scratch``.

    Compiles and cpu candidates get the strongest profile; cuda candidates the one the canary
    chose, which the evaluator describes as ``kernel_isolation``.
    """
    strongest = strongest_profile(detect_features(), scratch)
    kernel = strongest
    if backend == "cuda":
        ladder = profiles(detect_features(), gpu=True, work_dir=scratch)
        chosen = next((p for p in ladder if p.describe() == kernel_isolation), None)
        if chosen is None:
            raise FailedPrecondition(f"cuda candidates run under an unknown profile: {kernel_isolation}")
        kernel = chosen
    return {"compiles": strongest, f"{backend} candidates": kernel}


def isolation_statement(served: dict[str, Profile], scratch: Path) -> list[str]:
    """One line per kind of process, and why the unprivileged user is not used where it is not."""
    lines = [f"{what}: {profile.describe()}" for what, profile in served.items()]
    blocker = user_blocker(scratch)
    if blocker is not None:
        lines.append(f"processes keep the server's user, not nobody: {blocker}")
    return lines


def require_isolation(served: dict[str, Profile]) -> None:
    """FailedPrecondition naming what is missing wherever a profile is weaker than the required one."""
    gaps = [f"{what} lack {', '.join(missing)}" for what, p in served.items()
            if (missing := p.lacks(REQUIRED_ISOLATION))]
    if gaps:
        raise FailedPrecondition(f"--require-isolation: {'; '.join(gaps)} "
                                 f"(required: {REQUIRED_ISOLATION.describe()})")
