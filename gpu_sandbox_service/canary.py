"""A known-good kernel the sandbox runs before any candidate: ``python -I -m gpu_sandbox_service.canary BACKEND LIB``.

If the canary fails under an isolation profile, every candidate would fail there too, whatever
its code; :mod:`gpu_sandbox_service.kernel_isolation` uses it to pick the strongest profile under
which kernels run at all. This child loads the compiled canary the way the harness loads a
candidate, runs it on a small tensor and checks ``y = x + 1``.
"""

from __future__ import annotations

import sys

import torch

from packager.abi import AbiError, KernelLibrary


def run_canary(backend: str, library: str) -> str | None:
    """None when the canary computed ``x + 1``; otherwise what went wrong."""
    device = "cuda" if backend == "cuda" else "cpu"
    try:
        x = torch.arange(1000, dtype=torch.float32, device=device)
        y = torch.full_like(x, float("nan"))
        stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else None
        status = KernelLibrary(library).launch([x], [y], stream)
        if device == "cuda":
            torch.cuda.synchronize()
    except (AbiError, RuntimeError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if status != 0:
        return f"kf_launch returned {status}"
    if not torch.equal(y, x + 1):
        return "the canary's output is wrong"
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m gpu_sandbox_service.canary BACKEND LIBRARY", file=sys.stderr)
        return 2
    problem = run_canary(*argv)
    print(problem or "canary ok", flush=True)
    return 0 if problem is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
