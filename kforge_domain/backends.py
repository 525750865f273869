"""Where a kernel runs: the backends of the kernel contract."""

from __future__ import annotations

#: A kernel's backend: CUDA C++ (``.cu``) or C++ (``.cpp``, OpenMP allowed).
BACKENDS = ("cpu", "cuda")
#: What a user may ask a run or a local sandbox for: a backend, or ``auto`` (cuda when available).
BACKEND_CHOICES = (*BACKENDS, "auto")
