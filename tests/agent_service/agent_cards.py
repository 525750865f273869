"""Cards built programmatically from real calls, the way capture builds them, plus a g++ runner."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from agent_service.offline.cxx import CUDA_PRELUDE
from agent_service.offline.proposer import propose_offline
from capture_service.program_graph import program_graph
from gpu_sandbox_service.cardkit import mutated_inputs
from gpu_sandbox_service.compiler import CPU_FLAGS
from kforge_domain.card import OperatorCard, TensorSpec
from kforge_domain.device import DeviceInfo
from kforge_domain.propose_request import ParentCandidate, ProposeRequest
from packager.abi import KernelLibrary
from packager.variant import (
    decode_call,
    encode_call,
    module_attributes,
    module_variant_key,
    tensor_signature,
    variant_key,
)

REPO = Path(__file__).resolve().parents[2]
INCLUDE = REPO / "gpu_sandbox_service" / "include"
NVCC = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).exists()), None)


def spec(t: torch.Tensor) -> TensorSpec:
    sig = tensor_signature(t)
    return TensorSpec(shape=list(sig.shape), stride=list(sig.stride), dtype=sig.dtype,
                      storage_offset=sig.storage_offset, aligned16=sig.aligned16)


def _outputs(result: Any) -> list[torch.Tensor]:
    return [r for r in (result if isinstance(result, (tuple, list)) else [result]) if isinstance(r, torch.Tensor)]


def aten_card(
    op: Any, args: Sequence[Any], kwargs: dict[str, Any] | None = None
) -> tuple[OperatorCard, list[torch.Tensor]]:
    """The card of calling aten overload ``op`` (``torch.ops.aten.x.y``) and the eager outputs."""
    kwargs = kwargs or {}
    name = f"aten::{op._schema.name.removeprefix('aten::')}.{op._overloadname}"
    key = variant_key(name, args, kwargs)
    tensors = encode_call(args, kwargs)[1]  # in argument order, those in lists (cat's) included
    mutated = mutated_inputs(op, args, kwargs, tensors)
    with torch.inference_mode():
        outs = _outputs(op(*args, **kwargs))
    data = key.to_json()
    card = OperatorCard(id=key.id, kind="aten", op=name, device=tensors[0].device.type, key=data,
                        inputs=[spec(t) for t in tensors], outputs=[spec(o) for o in outs], mutated_inputs=mutated)
    return card, outs


def to_cuda_keeping_strides(t: torch.Tensor) -> torch.Tensor:
    """``t`` on the cuda device with its strides: ``t.cuda()`` makes a sliced or expanded view
    contiguous, which the kernel's guard (checking the card's strides) refuses."""
    compact = t[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in t.stride())]
    moved = torch.empty_strided(compact.shape, compact.stride(), dtype=t.dtype, device="cuda")
    return moved.copy_(compact).expand(t.shape)


def on_cuda(card: OperatorCard) -> OperatorCard:
    """``card`` as captured on a cuda device (a cpu capture's card, for planning cuda kernels here)."""
    tensors = [{**t, "device": "cuda"} for t in card.key["tensors"]]
    return card.model_copy(update={"device": "cuda", "key": {**card.key, "tensors": tensors}})


def module_card(module: torch.nn.Module, args: Sequence[torch.Tensor],
                attributes: dict[str, Any] | None = None) -> tuple[OperatorCard, list[torch.Tensor]]:
    """A module card; ``attributes`` default to what capture records (submodules' by their path), and
    its program's calls are described as capture describes them."""
    key = module_variant_key(module, args, {})
    attributes = module_attributes(module) if attributes is None else attributes
    data = key.to_json()
    state = [t for _, t in module.named_parameters()] + [t for _, t in module.named_buffers()]
    with torch.inference_mode():
        outs = _outputs(module(*args))
    with torch.no_grad():
        program = torch.export.export(module, tuple(a.detach().clone() for a in args))
    graph = program_graph(program, json.loads(key.template))
    card = OperatorCard(id=key.id, kind="module", op=key.op, device=args[0].device.type, key=data,
                        inputs=[spec(t) for t in [*args, *state]], outputs=[spec(o) for o in outs],
                        module_attributes=attributes, module_graph=graph)
    return card, outs


def compile_cpu(source: str, workdir: Path) -> Path:
    """Compile a cpu candidate the way the sandbox does (one .so per distinct source)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    src, lib = workdir / f"k_{digest}.cpp", workdir / f"k_{digest}.so"
    if not lib.exists():
        src.write_text(source)
        subprocess.run(["g++", *CPU_FLAGS, "-I", str(INCLUDE), "-o", str(lib), str(src)],
                       check=True, capture_output=True, text=True)
    return lib


def compile_cuda(source: str, workdir: Path) -> Path:
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    src, lib = workdir / f"k_{digest}.cu", workdir / f"k_{digest}.so"
    src.write_text(source)
    proc = subprocess.run([str(NVCC), "-arch=sm_90", "-O3", "-shared", "-Xcompiler", "-fPIC", "-I", str(INCLUDE),
                           "-o", str(lib), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return lib


def compile_cuda_each(sources: Sequence[str], workdir: Path) -> list[Path]:
    """Each source built by :func:`compile_cuda`, one nvcc per source side by side."""
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        return list(pool.map(lambda source: compile_cuda(source, workdir), sources))


def cuda_bundle(sources: dict[str, str]) -> str:
    """One translation unit holding every kernel, each in its own namespace (one nvcc start for all)."""
    parts = [CUDA_PRELUDE]
    for name, source in sources.items():
        assert source.startswith(CUDA_PRELUDE)
        body = source[len(CUDA_PRELUDE):].replace('extern "C" int kf_launch', "int kf_launch").replace(
            'extern "C" int64_t kf_workspace_bytes', "int64_t kf_workspace_bytes")
        includes = [line for line in body.splitlines() if line.startswith("#include")]
        parts += includes  # headers at file scope, not inside the kernel's namespace
        body = "\n".join(line for line in body.splitlines() if not line.startswith("#include"))
        parts.append("#undef KF_EXP\n#undef KF_TANH\n#undef KF_ERF\n#undef KF_LOG\n"
                     f"namespace {name} {{\n{body}\n}}\n")
    return "\n".join(parts)


def nvcc_object(source: str, path: Path) -> tuple[int, str]:
    """Compile a cuda source (or :func:`cuda_bundle`) for sm_90 into an object file: (status, stderr)."""
    path.write_text(source)
    proc = subprocess.run([str(NVCC), "-arch=sm_90", "-O3", "-c", "-Xcompiler", "-fPIC", "-I", str(INCLUDE),
                           "-o", str(path.with_suffix(".o")), str(path)], capture_output=True, text=True)
    return proc.returncode, proc.stderr


def run_kernel(lib: Path, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> int:
    return KernelLibrary(lib).launch(list(inputs), list(outputs), None)


def root_and_revisions(card: OperatorCard, device: DeviceInfo,
                       revisions: int = 2) -> Iterator[tuple[str, dict[str, Any]]]:
    """(source, knobs) of the offline proposal at the root knobs, then of each revision of the one
    before, ``revisions`` of them or until the family's knob space is spent."""
    parent, tried = None, []
    for step in range(revisions + 1):
        proposal = propose_offline(ProposeRequest(card=card, device=device, backend=device.backend, parent=parent,
                                                   tried_knobs=tried, seed=step))
        if not proposal.has_proposal:
            assert step > 0 and "every knob set" in proposal.no_proposal_reason, proposal.no_proposal_reason
            return
        yield proposal.source, proposal.knobs
        tried.append(proposal.knobs)
        parent = ParentCandidate(candidate_id=f"c{step}", source=proposal.source, knobs=proposal.knobs)


def run_cpu_card(card: OperatorCard, source: str, inputs: Sequence[torch.Tensor], workdir: Path) -> torch.Tensor:
    """The card's output (its exact layout, pre-filled with NaN or -7 so unwritten elements show)
    from the cpu kernel ``source`` run on ``inputs``."""
    out = card.outputs[0]
    dtype = getattr(torch, out.dtype)
    output = torch.empty_strided(out.shape, out.stride, dtype=dtype)
    output.fill_(float("nan") if dtype.is_floating_point else -7)
    assert run_kernel(compile_cpu(source, workdir), inputs, [output]) == 0
    return output


def fresh_like(card: OperatorCard, rng: torch.Generator, positive: Sequence[int] = ()) -> list[torch.Tensor]:
    """New inputs of exactly the card's layouts (strides and offsets kept), random values."""
    tensors = []
    for i, s in enumerate(card.inputs):
        span = sum((n - 1) * st for n, st in zip(s.shape, s.stride, strict=True))
        size = s.storage_offset + 1 + span if s.numel else 0
        storage = torch.randn(max(size, 1), generator=rng).to(getattr(torch, s.dtype))
        if i in positive:
            storage = storage.abs() + 0.5 if storage.is_floating_point() else storage.abs()  # ints: indices in range
        tensors.append(torch.as_strided(storage, s.shape, s.stride, s.storage_offset))
    return tensors


def reference(card: OperatorCard, op: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    args, kwargs = decode_call(card.template, list(inputs))
    with torch.inference_mode():
        return _outputs(op(*args, **kwargs))
