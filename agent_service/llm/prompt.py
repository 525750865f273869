"""Prompts built from the versioned template files under ``agent_service/prompts/<version>/``.

A prompt says what the op computes (a PyTorch reference snippet for the card), its exact
arguments, the device, the kernel contract with ``kf_abi.h``, and — for a revision — the
parent's source and measurements, the lineage, failed siblings, the do-not-repeat list and the
last failure. Changing the wording means a new version folder, so runs stay comparable.
"""

from __future__ import annotations

import json
from pathlib import Path
from string import Template
from typing import Any

from kforge_domain.card import OperatorCard, TensorSpec
from kforge_domain.propose_request import ProposeRequest, Revision
from packager.variant import ATTRIBUTES_KWARG, STATE_KWARG

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
ABI_HEADER = Path(__file__).resolve().parents[2] / "gpu_sandbox_service" / "include" / "kf_abi.h"


class PromptTemplateError(FileNotFoundError):
    """A prompt version or one of its files is missing."""


def load_template(version: str, name: str) -> Template:
    path = PROMPTS_DIR / version / f"{name}.md"
    if not path.is_file():
        raise PromptTemplateError(f"prompt template {name}.md of version {version!r} not found under {PROMPTS_DIR}")
    return Template(path.read_text())


def abi_header_text() -> str:
    if not ABI_HEADER.is_file():
        raise PromptTemplateError(f"kf_abi.h not found at {ABI_HEADER}")
    return ABI_HEADER.read_text().strip()


def _python_value(value: Any, names: list[str]) -> str:
    """A template value as Python source, tensors by their argument names."""
    if isinstance(value, dict) and len(value) == 1:
        ((tag, payload),) = value.items()
        if tag == "tensor":
            return names[payload]
        if tag == "list":
            return "[" + ", ".join(_python_value(v, names) for v in payload) + "]"
        if tag == "float":
            return f"float({payload!r})"
        if tag == "dtype":
            return f"torch.{payload}"
        if tag == "device":
            return f"torch.device({payload!r})"
        if tag == "enum":
            return str(payload)
    return repr(value)


def reference_snippet(card: OperatorCard) -> str:
    """PyTorch code that computes the card's outputs from its inputs."""
    names = [f"in{i}" for i in range(len(card.inputs))]
    args = card.template.get("args", [])
    kwargs = {k: v for k, v in card.template.get("kwargs", {}).items() if k not in (STATE_KWARG, ATTRIBUTES_KWARG)}
    call = [_python_value(a, names) for a in args] + [f"{k}={_python_value(v, names)}" for k, v in kwargs.items()]
    signature = ", ".join(names)
    if card.kind == "aten":
        base, _, overload = card.op.removeprefix("aten::").partition(".")
        body = f"torch.ops.aten.{base}.{overload or 'default'}({', '.join(call)})"
    else:
        body = f"module.forward({', '.join(call)})"
    return f"import torch\n\ndef reference({signature}):\n    return {body}"


def _module_note(card: OperatorCard) -> str:
    if card.kind != "module":
        return ""
    state = card.template.get("kwargs", {}).get(STATE_KWARG, {}).get("list", [])
    pairs = []
    for entry in state:
        items = entry.get("list", []) if isinstance(entry, dict) else []
        if len(items) == 2 and isinstance(items[1], dict) and "tensor" in items[1]:
            pairs.append(f"`{items[0]}` is in{items[1]['tensor']}")
    attributes = json.dumps(card.module_attributes, sort_keys=True) if card.module_attributes else "none recorded"
    return (f"\n`module` is an instance of `{card.op}`; the kernel replaces its whole forward. "
            f"Its parameters and buffers are inputs too: {', '.join(pairs) or 'none'}. "
            f"Its scalar attributes: {attributes}.\n")


def _spec_line(i: int, spec: TensorSpec, prefix: str) -> str:
    return (f"- `{prefix}[{i}]`: shape {spec.shape}, stride {spec.stride}, dtype {spec.dtype}, "
            f"storage offset {spec.storage_offset}, 16-byte aligned: {'yes' if spec.aligned16 else 'no'}")


def _device_text(request: ProposeRequest) -> str:
    d = request.device
    facts = [f"backend {request.backend}"]
    for label, value in (("name", d.name), ("arch", d.arch), ("toolchain", d.toolchain)):
        if value:
            facts.append(f"{label} {value}")
    if d.sm_count:
        facts.append(f"{d.sm_count} {'SMs' if request.backend == 'cuda' else 'cores'}")
    if d.l2_bytes:
        facts.append(f"L2 {d.l2_bytes / 2**20:.0f} MiB")
    if d.copy_bandwidth_gbps:
        facts.append(f"measured copy bandwidth {d.copy_bandwidth_gbps:.0f} GB/s (read + write)")
    return ", ".join(facts)


def _revision_line(r: Revision) -> str:
    latency = f"{r.latency_us:.2f} µs" if r.latency_us is not None else "no time"
    error = f" — {r.error_message.splitlines()[0][:200]}" if r.error_message else ""
    description = r.description or "(no description)"
    return f"- {r.candidate_id or '?'}: {r.status.value if r.status else 'unknown'}, {latency}: {description}{error}"


def task_text(request: ProposeRequest, version: str) -> str:
    card = request.card
    cuda = request.backend == "cuda"
    parts = [load_template(version, "task").substitute(
        backend=request.backend, language="CUDA C++" if cuda else "C++ with OpenMP",
        extension=".cu" if cuda else ".cpp",
        kind=card.kind, reference=reference_snippet(card), module_note=_module_note(card),
        inputs="\n".join(_spec_line(i, s, "inputs") for i, s in enumerate(card.inputs)),
        outputs="\n".join(_spec_line(i, s, "outputs") for i, s in enumerate(card.outputs)),
        non_tensor_args=json.dumps(card.non_tensor_args, sort_keys=True), card_id=card.id,
        eager_us=f"{card.eager_us:.2f} µs" if card.eager_us else "an unknown time",
        device=_device_text(request),
        stream_rule=("`stream` is the harness's cudaStream_t: launch all work on it, do not synchronise the device."
                     if cuda else "`stream` is NULL on cpu."),
        abi_header=abi_header_text(),
    )]
    parent = request.parent
    if parent is not None and parent.source:
        measured = []
        if parent.latency_us is not None:
            measured.append(f"{parent.latency_us:.2f} µs")
        if parent.eager_latency_us is not None:
            measured.append(f"eager {parent.eager_latency_us:.2f} µs")
        if parent.latency_us and parent.eager_latency_us:
            measured.append(f"speedup {parent.eager_latency_us / parent.latency_us:.2f}x")
        parts.append(load_template(version, "parent").substitute(
            parent_measurements="Measured: " + (", ".join(measured) if measured else "not timed yet") + ".",
            parent_description=parent.description or "(none)", fence_language="cuda" if cuda else "cpp",
            parent_source=parent.source.strip(),
        ))
    if request.lineage or request.failed_siblings or request.tried_knobs:
        lineage = "\n".join(_revision_line(r) for r in request.lineage)
        failed = "\n".join(_revision_line(r) for r in request.failed_siblings)
        repeats = sorted({r.description for r in [*request.lineage, *request.failed_siblings] if r.description})
        parts.append(load_template(version, "history").substitute(
            lineage=("Lineage, root first:\n" + lineage) if lineage else "",
            failed=("Failed attempts from the same parent:\n" + failed) if failed else "",
            do_not_repeat="; ".join(repeats) if repeats else "(see above)",
        ))
    feedback = request.feedback
    if feedback is not None and (feedback.error_message or feedback.status):
        parts.append(load_template(version, "feedback").substitute(
            status=feedback.status.value if feedback.status else "failed", error=feedback.error_message or "(none)",
            log_tail=feedback.log_tail.strip()[-4000:] or "(no log)",
        ))
    return "\n".join(parts)


def build_messages(request: ProposeRequest, version: str) -> list[dict[str, str]]:
    """The chat messages of the first call for ``request``."""
    return [
        {"role": "system", "content": load_template(version, "system").substitute()},
        {"role": "user", "content": task_text(request, version)},
    ]


def repair_message(version: str, problem: str, details: str = "") -> dict[str, str]:
    return {"role": "user", "content": load_template(version, "repair").substitute(problem=problem, details=details)}
