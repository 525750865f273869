"""Compiling a candidate into a shared object exporting ``kf_launch``, isolated and cached.

The cache key is (source hash, flags, toolchain, arch, kf_abi.h hash): the same candidate built
for the same device is compiled once, and compile errors are cached as well (they are as
deterministic as successes). Timeouts are not cached.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpu_sandbox_service.isolation import ResourceLimits, run_isolated
from gpu_sandbox_service.models import Limits

INCLUDE_DIR = Path(__file__).parent / "include"
ABI_HEADER = INCLUDE_DIR / "kf_abi.h"
SOURCE_SUFFIX = {"cpu": ".cpp", "cuda": ".cu"}
#: g++'s flags for a cpu kernel, without the include path (see :meth:`Toolchain.flags`).
CPU_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC", "-std=c++17"]


@dataclass(frozen=True)
class Toolchain:
    """The compiler of a backend: its path, its version string and the target arch."""

    backend: str
    compiler: str
    version: str
    arch: str

    def flags(self, libraries: list[str] = []) -> list[str]:  # noqa: B006 - never mutated
        """Compiler flags for this backend, without input and output paths.

        cuda: ``-nodlink`` skips nvcc's device-link step (nvlink, a fatbinary and a host compile of
        its stub), which for a whole-program build (no ``-rdc``) only adds an empty cubin: the
        candidate's object registers its own fatbin. The kernels' cubin is byte for byte the same.
        Most of a build is the front ends parsing the CUDA headers (host preprocessing, cudafe++,
        device preprocessing, cicc, host compile), which no flag that keeps the SASS cuts; host
        ``-O1``, ``-pipe`` and SASS without PTX saved nothing measurable (bench/nvcc_phases.py).

        cpu: ``-fno-math-errno`` lets g++ treat ``sqrtf`` as the one instruction it is (no kernel
        reads errno, and no result changes): a batch norm's ``1 / sqrtf(var + eps)`` is then hoisted
        out of the loop and vectorised, where it was a libm call per element (a [16, 48, 24, 24]
        float32 batch norm, one thread: 906 µs without it, 264 µs with it, eager 233 µs).
        """
        if self.backend == "cpu":
            return [*CPU_FLAGS, f"-I{INCLUDE_DIR}"]
        return ["-arch=" + self.arch, "-O3", "-shared", "-nodlink", "-Xcompiler", "-fPIC", "-std=c++17",
                f"-I{INCLUDE_DIR}", *[f"-l{lib}" for lib in libraries]]


def detect_toolchain(backend: str, arch: str) -> Toolchain:
    """Find g++ (cpu) or nvcc (cuda) and read its version; raises FileNotFoundError if absent."""
    name = "g++" if backend == "cpu" else "nvcc"
    path = shutil.which(name)
    if path is None and backend == "cuda":
        candidate = Path("/usr/local/cuda/bin/nvcc")
        path = str(candidate) if candidate.exists() else None
    if path is None:
        raise FileNotFoundError(f"{name} not found on PATH: the {backend} backend cannot compile")
    if backend == "cpu":
        out = subprocess.run([path, "-dumpfullversion"], capture_output=True, text=True, timeout=30, check=True)
        version = f"g++ {out.stdout.strip()}"
    else:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=True)
        match = re.search(r"release (\d+\.\d+)", out.stdout)
        version = f"nvcc {match.group(1) if match else 'unknown'}"
    return Toolchain(backend, path, version, arch)


@dataclass(frozen=True)
class CompileOutcome:
    """``library`` on success, else ``error``; never both."""

    library: Path | None
    error: str
    log: str
    compile_s: float
    flags: str
    cached: bool = False
    timed_out: bool = False


class Compiler:
    """Compiles candidates for one toolchain, caching artifacts under ``cache_dir``."""

    def __init__(self, toolchain: Toolchain, cache_dir: Path, scratch_dir: Path, limits: Limits) -> None:
        self.toolchain = toolchain
        self.cache_dir = cache_dir
        self.scratch_dir = scratch_dir
        self.limits = limits
        cache_dir.mkdir(parents=True, exist_ok=True)
        scratch_dir.mkdir(parents=True, exist_ok=True)

    def cache_key(self, source: str, flags: list[str]) -> str:
        parts = [hashlib.sha256(source.encode()).hexdigest(), flags, self.toolchain.version, self.toolchain.arch,
                 hashlib.sha256(ABI_HEADER.read_bytes()).hexdigest()]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    async def compile(self, source: str, libraries: list[str], timeout_s: float | None = None) -> CompileOutcome:
        """Build ``source`` into a shared object (from the cache when it was built before)."""
        flags = self.toolchain.flags(libraries)
        flag_text = " ".join(flags)
        key = self.cache_key(source, flags)
        artifact = self.cache_dir / f"{key}.so"
        failure = self.cache_dir / f"{key}.err"
        if artifact.is_file():
            return CompileOutcome(artifact, "", "", 0.0, flag_text, cached=True)
        if failure.is_file():
            log = failure.read_text()
            return CompileOutcome(None, "compilation failed (cached)", log, 0.0, flag_text, cached=True)
        run_dir = self.scratch_dir / f"compile-{uuid.uuid4().hex}"
        run_dir.mkdir()
        try:
            return await self._compile_in(run_dir, source, flags, artifact, failure, timeout_s)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    async def _compile_in(self, run_dir: Path, source: str, flags: list[str], artifact: Path, failure: Path,
                          timeout_s: float | None) -> CompileOutcome:
        source_path = run_dir / f"candidate{SOURCE_SUFFIX[self.toolchain.backend]}"
        source_path.write_text(source)
        output = run_dir / "candidate.so"
        timeout = timeout_s or self.limits.compile_timeout_s
        started = time.perf_counter()
        outcome = await run_isolated(
            [self.toolchain.compiler, *flags, "-o", str(output), str(source_path)],
            run_dir=run_dir, limits=ResourceLimits.for_compile(self.limits), timeout_s=timeout,
            output_cap_bytes=self.limits.output_cap_bytes, log_tail_bytes=self.limits.log_tail_bytes,
        )
        elapsed = time.perf_counter() - started
        flag_text = " ".join(flags)
        log = outcome.log_tail.replace(str(run_dir) + "/", "")
        if outcome.timed_out:
            return CompileOutcome(None, f"compilation exceeded the {timeout:g} s limit", log, elapsed, flag_text,
                                  timed_out=True)
        if outcome.output_overflow:
            return CompileOutcome(None, "the compiler's output exceeded its cap", log, elapsed, flag_text)
        if outcome.returncode != 0 or not output.is_file():
            reason = f"killed by {outcome.signal_name}" if outcome.signal_name else f"exit status {outcome.returncode}"
            error = f"compilation failed ({reason})"
            if outcome.returncode is not None and 0 < outcome.returncode < 125:
                failure.write_text(log)  # a plain compiler error; kills and launch failures may not recur
            return CompileOutcome(None, error, log, elapsed, flag_text)
        staged = artifact.with_suffix(f".{uuid.uuid4().hex}.tmp")
        shutil.copyfile(output, staged)
        staged.chmod(0o644)
        staged.replace(artifact)
        return CompileOutcome(artifact, "", log, elapsed, flag_text)
