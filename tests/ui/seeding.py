"""Runs written through the forge's own run store, for states a small offline run never reaches:
an LLM-proposed run (prompts, answers, dollars, a compile error, a revision of a revision, a
.cast), a run that failed, and a run whose candidates failed every way while its only kernel that
passed is slower than eager, with the events a live run logs. The forge service then serves them
like any other run."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from forge_service.config import RunConfig
from forge_service.report import CardReport, EndToEnd, RunReport
from forge_service.runs import CAST_FILE
from forge_service.store import CardRow, RunStore
from forge_service.tree_log import add_child_op, tell_op
from kforge_domain.card import OperatorCard, TensorSpec
from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import FIGURE_NAMES, CandidateStatus, verdict_of
from packager.format import FallbackEntry, KernelEntry, ModelIdentity, build_cast
from packager.variant import variant_key

LLM_RUN_ID = "20260101-000000-11111a"
FAILED_RUN_ID = "20260101-000000-22222b"
FAILURES_RUN_ID = "20260101-000000-33333c"
LLM_PROPOSER = "openai/gpt-4.1"
FAILED_ERROR = "capture failed: ModuleNotFoundError: No module named 'missing_model'"
FIRST_SOURCE = """#include "kf_abi.h"
extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *stream) {
  const float *x = (const float *)in[0].data;
  float *y = (float *)out[0].data;
  for (int64_t i = 0; i < 4096; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
  return 0;
}
"""
BEST_SOURCE = FIRST_SOURCE.replace("  for (int64_t i", "  #pragma omp simd\n  for (int64_t i")
BROKEN_SOURCE = FIRST_SOURCE.replace("return 0;", "return 0")
COMPILE_LOG = "kernel.cpp:6:11: error: expected ';' before '}' token"
PROMPT = "Write a faster kf_launch for aten::relu.default on float32[4096]."
ANSWER = "```cpp\n" + BEST_SOURCE + "```"
EAGER_US, BEST_US, FLOOR_US = 500.0, 250.0, 100.0
#: Spreads (IQR) of the eager time: at capture, and in the series timed beside the kernels.
CAPTURE_SPREAD_US, SERIES_SPREAD_US = 6.0, 5.0
CONV_FALLBACK = ("0123456789abcdef", "aten::convolution.default", "vendor op: not searched")


def relu_card(time_share: float, eager_us: float) -> OperatorCard:
    """A real aten card of relu on 4096 floats, keyed by the packager's own variant key."""
    x = torch.randn(4096)
    key = variant_key("aten::relu.default", (x,), {})
    spec = TensorSpec(shape=[4096], stride=[1], dtype="float32")
    return OperatorCard(
        id=key.id, kind="aten", op="aten::relu.default", device="cpu", key=key.to_json(), inputs=[spec],
        outputs=[spec], call_count=3, eager_us=eager_us, eager_spread_us=CAPTURE_SPREAD_US, time_share=time_share,
    )


def _result(candidate_id: str, status: CandidateStatus, error_message: str = "", **fields: Any) -> CandidateResult:
    """A result with ``fields`` split into the verdict's figures and the evidence around it."""
    figures = {name: fields.pop(name) for name in FIGURE_NAMES if name in fields}
    return CandidateResult(candidate_id, verdict_of(status, error_message, figures), **fields)


def _tell(node_id: int, result: CandidateResult) -> tuple[str, dict[str, Any]]:
    """The tree operation that reports ``result`` (the search tells a passing candidate's timing)."""
    figures = result.figures if result.passed else None
    return tell_op(node_id, result.passed, figures.latency_us if figures else None,
                   figures.latency_spread_us if figures else None)


def relu_kernel(card: OperatorCard, eager_us: float, latency_us: float) -> KernelEntry:
    """The packager's entry for a relu kernel (its artifact is never loaded by an audit)."""
    return KernelEntry(
        card_id=card.id, kind="aten", op=card.op, card_json=card.to_json(), backend="cpu", arch="cpu-x86_64",
        audit_class="custom", source=BEST_SOURCE, artifact=b"\x7fELF not loaded", eager_latency_us=eager_us,
        eager_spread_us=1.0, latency_us=latency_us, latency_spread_us=0.5, speedup=eager_us / latency_us,
        rel_l2_error=1e-7, max_scaled_error=1e-7, source_sha256=hashlib.sha256(BEST_SOURCE.encode()).hexdigest(),
        compiler_flags="-O3 -fopenmp", toolchain="g++ 12.2.0", candidate_id="c3c3c3c3c3c3",
    )


def seed_llm_run(runs_dir: Path, model_spec: str) -> dict[str, str]:
    """A finished run of ``model_spec`` by an LLM proposer, with its .cast; returns the ids it made."""
    store = RunStore(runs_dir / LLM_RUN_ID)
    config = RunConfig(model_spec=model_spec, backend="cpu", proposer=LLM_PROPOSER, budget_per_card=3, max_cards=1)
    store.create_run(LLM_RUN_ID, config.model_dump_json(), Path(model_spec).stem)
    card = relu_card(time_share=0.4, eager_us=EAGER_US)
    card_id = card.id
    store.put_cards([CardRow(card_id, card.to_json(), 0, True, "done", "budget spent", 3, FLOOR_US)])
    ids = {"card": card_id, "first": "a1a1a1a1a1a1", "broken": "b2b2b2b2b2b2", "best": "c3c3c3c3c3c3"}
    timing: dict[str, Any] = dict(eager_latency_us=EAGER_US, eager_spread_us=SERIES_SPREAD_US, audit_class="custom",
                                  floor_us=FLOOR_US, toolchain="g++ 12.2.0", arch="cpu-x86_64")
    plan = [
        (ids["first"], "", FIRST_SOURCE, "plain loop",
         _result(ids["first"], CandidateStatus.PASSED, latency_us=400.0, latency_spread_us=4.0,
                 rel_l2_error=1e-7, max_scaled_error=2e-7, compile_s=0.8, total_s=2.0, **timing)),
        (ids["broken"], ids["first"], BROKEN_SOURCE, "drop a semicolon",
         _result(ids["broken"], CandidateStatus.COMPILE_ERROR, error_message="compilation failed", log_tail=COMPILE_LOG,
                 compile_s=0.5, total_s=0.5)),
        (ids["best"], ids["first"], BEST_SOURCE, "vectorise the loop with omp simd",
         _result(ids["best"], CandidateStatus.PASSED, latency_us=BEST_US, latency_spread_us=2.0,
                 rel_l2_error=0.0, max_scaled_error=0.0, compile_s=0.9, total_s=2.1, remeasured=True,
                 source_sha256=hashlib.sha256(BEST_SOURCE.encode()).hexdigest(), **timing)),
    ]
    nodes = {"": 0}
    for node_id, (cid, parent, source, description, result) in enumerate(plan, 1):
        nodes[cid] = node_id
        store.add_candidate(cid, card_id, parent, node_id, LLM_PROPOSER, add_child_op(nodes[parent], node_id, cid))
        cost = Cost(prompt_tokens=1200, completion_tokens=300, usd=0.0125, llm_calls=1)
        exchange = LlmExchange(model=LLM_PROPOSER, prompt=PROMPT, response=ANSWER, cost=cost, latency_s=3.5)
        store.set_proposal(cid, source, description, {"unroll": node_id}, Cost(usd=cost.usd, llm_calls=1),
                           [exchange], card_id, None)
        store.put_result(result, card_id, _tell(node_id, result))
    build_cast(store.run_dir / CAST_FILE, ModelIdentity(model_spec, Path(model_spec).stem, LLM_RUN_ID),
               [relu_kernel(card, EAGER_US, BEST_US)], [FallbackEntry(*CONV_FALLBACK)])
    report = RunReport(
        run_id=LLM_RUN_ID, model_spec=model_spec, backend="cpu", device="test cpu",
        cards=[CardReport(card_id=card_id, op="aten::relu.default", kind="aten", time_share=0.4, status="done",
                          reason="", eager_us=EAGER_US, eager_spread_us=SERIES_SPREAD_US, best_us=BEST_US,
                          speedup=2.0, floor_us=FLOOR_US, pct_of_floor=40.0, audit_class="custom", evaluations=3,
                          cost_usd=0.0375)],
        end_to_end=EndToEnd(measured=True, eager_ms=1.0, cast_ms=0.8, cast_speedup=1.25, parity_ok=True,
                            parity_max_rel_error=1e-7),
        cast_path=str(store.run_dir / CAST_FILE), kernels_packaged=1,
    )
    store.update_run(status="done", report_json=report.model_dump_json())
    store.close()
    return ids


def seed_failed_run(runs_dir: Path) -> None:
    """A run whose capture failed before any card existed."""
    store = RunStore(runs_dir / FAILED_RUN_ID)
    config = RunConfig(model_spec="missing_model.py", backend="cpu")
    store.create_run(FAILED_RUN_ID, config.model_dump_json(), "missing_model")
    store.update_run(status="failed", error=FAILED_ERROR)
    store.close()


SLOWER_SPEEDUP = 0.87
#: The failures run's candidates: (id, parent, status, description, error message, log tail).
FAILURES = (
    ("e5e5e5e5e5e5", "d4d4d4d4d4d4", CandidateStatus.COMPILE_ERROR, "drop a semicolon", "compilation failed",
     COMPILE_LOG),
    ("f6f6f6f6f6f6", "d4d4d4d4d4d4", CandidateStatus.RUNTIME_ERROR, "read past the end", "kf_launch returned 3",
     "kernel.cpp: out-of-bounds read at element 4096"),
    ("a7a7a7a7a7a7", "", CandidateStatus.WRONG_RESULT, "skip the sign test", "output 0 departs from eager",
     "rel_l2 3.1e-01 over the float32 tolerance 1.0e-05"),
    ("b8b8b8b8b8b8", "", CandidateStatus.TIMEOUT, "spin until done", "evaluation ran past 30 s", ""),
)
SLOWER_ID = "d4d4d4d4d4d4"


def seed_failures_run(runs_dir: Path) -> None:
    """A finished offline run of one relu card: one kernel passed at x0.87 (slower than eager)
    and four failed (compile, runtime, wrong result, timeout), with the events the forge logs."""
    store = RunStore(runs_dir / FAILURES_RUN_ID)
    config = RunConfig(model_spec="examples/relu_chain.py", backend="cpu", proposer="offline", budget_per_card=6,
                       max_cards=1)
    store.create_run(FAILURES_RUN_ID, config.model_dump_json(), "relu_chain")
    card = relu_card(time_share=0.3, eager_us=EAGER_US)
    store.put_cards([CardRow(card.id, card.to_json(), 0, True, "done", "stopped improving", 6, FLOOR_US)])
    store.add_event("status", "run started", status="running")
    store.add_event("capture", "captured 1 cards", status="running")
    store.add_event("card_started", f"searching {card.op} (30.0% of eager time)", card.id, status="running")
    slower = _result(SLOWER_ID, CandidateStatus.PASSED, latency_us=EAGER_US / SLOWER_SPEEDUP, latency_spread_us=3.0,
                     eager_latency_us=EAGER_US, eager_spread_us=SERIES_SPREAD_US, floor_us=FLOOR_US,
                     rel_l2_error=0.0, max_scaled_error=0.0, compile_s=0.7, total_s=1.9, audit_class="custom")
    plan = [(SLOWER_ID, "", FIRST_SOURCE, "a bounds check per element", slower)]
    plan += [(cid, parent, BROKEN_SOURCE, description, _result(cid, status, error_message=error, log_tail=log))
             for cid, parent, status, description, error, log in FAILURES]
    nodes = {"": 0}
    for node_id, (cid, parent, source, description, result) in enumerate(plan, 1):
        nodes[cid] = node_id
        store.add_candidate(cid, card.id, parent, node_id, "offline", add_child_op(nodes[parent], node_id, cid))
        store.set_proposal(cid, source, description, {}, Cost(), [], card.id, None)
        store.put_result(result, card.id, _tell(node_id, result))
        store.add_event("candidate", f"{description}: {result.status.value.lower()}",
                        card.id, cid, status="running")
    store.add_event("card_done", f"{card.op}: stopped improving", card.id, status="running")
    report = RunReport(
        run_id=FAILURES_RUN_ID, model_spec=config.model_spec, backend="cpu", device="test cpu",
        cards=[CardReport(card_id=card.id, op=card.op, kind="aten", time_share=0.3, status="done",
                          reason="stopped improving", eager_us=EAGER_US, eager_spread_us=SERIES_SPREAD_US,
                          best_us=EAGER_US / SLOWER_SPEEDUP, speedup=SLOWER_SPEEDUP, floor_us=FLOOR_US,
                          pct_of_floor=17.4, audit_class="fallback",
                          evaluations=len(plan), cost_usd=0.0)],
        end_to_end=EndToEnd(measured=True, eager_ms=1.0, cast_ms=1.0, cast_speedup=1.0, compile_ms=0.8,
                            compile_speedup=1.25, cast_kernels=0, parity_ok=True),
        cast_path=None, kernels_packaged=0,
    )
    store.update_run(status="done", report_json=report.model_dump_json())
    store.add_event("run_done", "no kernel beat eager; model x1.00 end to end", status="running")
    store.add_event("status", "run finished", status="done")
    store.close()
