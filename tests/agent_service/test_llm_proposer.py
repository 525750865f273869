"""The LLM proposer against a real OpenAI-compatible server on loopback playing scripted answers."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.llm.client import import_litellm
from agent_service.llm.proposer import LlmProposer
from agent_service.llm.settings import LlmSettings
from agent_service.offline.proposer import propose_offline
from agent_service.usage import UsageLedger
from kforge_domain.device import DeviceInfo
from kforge_domain.propose_request import Feedback, ParentCandidate, ProposeRequest, Revision
from kforge_domain.verdict import CandidateStatus
from tests.agent_service.agent_cards import INCLUDE, aten_card
from tests.agent_service.scripted_llm import Scripted, ScriptedLlmServer

MODEL = "openai/gpt-4o-mini"  # priced in litellm's bundled map
FAST = LlmSettings(timeout_s=5.0, backoff_s=0.01, max_retries=2, repair_attempts=3)
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 * 2**20,
                         copy_bandwidth_gbps=4250.0, toolchain="nvcc 13.0")


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-test")


@pytest.fixture(scope="module")
def relu_card() -> Any:
    card, _ = aten_card(torch.ops.aten.relu.default, [torch.randn(64, 128)])
    return card


def _good_answer(card: Any, note: str = "one thread per element") -> str:
    source = propose_offline(ProposeRequest(card=card)).source
    return f"DESCRIPTION: {note}\n\nHere is the kernel.\n```cpp\n{source}```\n"


BROKEN = 'DESCRIPTION: first try\n```cpp\n#include "kf_abi.h"\nextern "C" int kf_launch(const kf_tensor *i) {\n'\
         '  return undefined_symbol;\n}\n```'


def _user_prompt(request: dict[str, Any], index: int = 1) -> str:
    return request["messages"][index]["content"]


def _propose(server: ScriptedLlmServer, settings: LlmSettings, card: Any) -> Any:
    return asyncio.run(LlmProposer(MODEL, server.api_base, settings=settings).propose(ProposeRequest(card=card)))


def _price(model: str, prompt_tokens: int, completion_tokens: int) -> float:
    litellm = import_litellm()
    prompt_usd, completion_usd = litellm.cost_per_token(model=model, prompt_tokens=prompt_tokens,
                                                        completion_tokens=completion_tokens)
    return prompt_usd + completion_usd


def test_good_kernel_first_answer_and_the_prompt_says_everything(relu_card: Any) -> None:
    parent = ParentCandidate(candidate_id="c7", source="/* parent source marker */", description="vectorised",
                             latency_us=12.5, eager_latency_us=20.0, knobs={"vector": 8})
    request = ProposeRequest(
        card=relu_card, device=H200, backend="cuda", proposer=MODEL, parent=parent, run_id="run-1",
        lineage=(Revision(candidate_id="c1", description="root kernel", status=CandidateStatus.PASSED,
                          latency_us=30.0),),
        failed_siblings=(Revision(candidate_id="c8", description="unroll 8", status=CandidateStatus.WRONG_RESULT,
                                  error_message="max scaled error 0.3"),),
    )
    ledger = UsageLedger()
    with ScriptedLlmServer([Scripted(content=_good_answer(relu_card), prompt_tokens=1200, completion_tokens=800)]) as s:
        proposal = asyncio.run(LlmProposer(MODEL, s.api_base, ledger, FAST).propose(request))
    assert proposal.has_proposal, proposal.no_proposal_reason
    assert proposal.description == "one thread per element"
    assert proposal.source.startswith('#include "kf_abi.h"') and "kf_launch" in proposal.source
    assert proposal.knobs["proposer"] == MODEL and len(proposal.knobs["source_sha256"]) == 16
    system, user = s.requests[0]["messages"][0]["content"], _user_prompt(s.requests[0])
    assert "cuBLAS" in system and "exactly one fenced code block" in system
    for needle in ("torch.ops.aten.relu.default(in0)", "shape [64, 128], stride [128, 1], dtype float32",
                   "sm_90", "132 SMs", "L2 60 MiB", "4250 GB/s", "typedef struct", "int kf_launch",
                   "/* parent source marker */", "12.50 µs", "speedup 1.60x", "root kernel",
                   "unroll 8", "max scaled error 0.3", "cudaStream_t"):
        assert needle in user, needle
    # accounting: one call, litellm's own prices, recorded in the ledger
    assert proposal.cost.llm_calls == 1 and proposal.cost.prompt_tokens == 1200
    assert proposal.cost.usd == pytest.approx(_price(MODEL, 1200, 800)) and proposal.cost.usd > 0
    assert proposal.exchanges[0].response.startswith("DESCRIPTION") and proposal.exchanges[0].prompt
    assert ledger.spent("run-1").usd == pytest.approx(proposal.cost.usd)


def _gxx_check(tmp: Path) -> Any:
    async def check(source: str) -> Feedback | None:
        path = tmp / "candidate.cpp"
        path.write_text(source)
        proc = await asyncio.create_subprocess_exec(
            "g++", "-fsyntax-only", "-I", str(INCLUDE), str(path), stderr=subprocess.PIPE)
        _, err = await proc.communicate()
        if proc.returncode:
            return Feedback(status=CandidateStatus.COMPILE_ERROR, error_message="g++ failed", log_tail=err.decode())
        return None

    return check


def test_broken_code_is_repaired_with_the_compiler_error(relu_card: Any, tmp_path: Path) -> None:
    script = [Scripted(content=BROKEN), Scripted(content=_good_answer(relu_card, "fixed"))]
    with ScriptedLlmServer(script) as s:
        proposal = asyncio.run(LlmProposer(MODEL, s.api_base, settings=FAST).propose(
            ProposeRequest(card=relu_card), check=_gxx_check(tmp_path)))
    assert proposal.has_proposal and proposal.description == "fixed"
    repair = s.requests[1]["messages"]
    assert repair[2] == {"role": "assistant", "content": BROKEN}
    assert "COMPILE_ERROR" in repair[3]["content"] and "undefined_symbol" in repair[3]["content"]
    assert proposal.cost.llm_calls == 2 and len(proposal.exchanges) == 2
    assert proposal.cost.usd == pytest.approx(sum(e.cost.usd for e in proposal.exchanges))


def test_forge_feedback_of_a_failed_candidate_reaches_the_prompt(relu_card: Any) -> None:
    feedback = Feedback(status=CandidateStatus.RUNTIME_ERROR, error_message="kf_launch returned 2",
                        log_tail="illegal address")
    with ScriptedLlmServer([Scripted(content=_good_answer(relu_card))]) as s:
        asyncio.run(LlmProposer(MODEL, s.api_base, settings=FAST).propose(
            ProposeRequest(card=relu_card, feedback=feedback)))
    user = _user_prompt(s.requests[0])
    assert "RUNTIME_ERROR" in user and "kf_launch returned 2" in user and "illegal address" in user


def test_answer_without_code_block_is_sent_back_then_given_up(relu_card: Any) -> None:
    prose = "I would use shared memory and vectorised loads."
    with ScriptedLlmServer([Scripted(content=prose), Scripted(content=_good_answer(relu_card))]) as s:
        repaired = asyncio.run(LlmProposer(MODEL, s.api_base, settings=FAST).propose(ProposeRequest(card=relu_card)))
    assert repaired.has_proposal
    assert "no fenced code block" in s.requests[1]["messages"][-1]["content"]
    two_blocks = "```cpp\nint a;\n```\n```cpp\nint b;\n```"
    with ScriptedLlmServer([Scripted(content=prose)] * 3 + [Scripted(content=two_blocks)]) as s:
        refused = asyncio.run(LlmProposer(MODEL, s.api_base, settings=FAST).propose(ProposeRequest(card=relu_card)))
    assert not refused.has_proposal and len(s.requests) == 4
    assert "no usable kernel after 4 answers" in refused.no_proposal_reason
    assert "2 fenced code blocks" in refused.no_proposal_reason
    assert refused.cost.llm_calls == 4 and len(refused.exchanges) == 4


def test_rate_limit_is_retried_with_backoff_and_every_attempt_is_kept(relu_card: Any) -> None:
    script = [Scripted(status=429, content="rate limited", headers={"Retry-After": "0.2"}),
              Scripted(content=_good_answer(relu_card))]
    with ScriptedLlmServer(script) as s:
        proposal = asyncio.run(LlmProposer(MODEL, s.api_base, settings=FAST).propose(ProposeRequest(card=relu_card)))
    assert proposal.has_proposal and len(s.requests) == 2
    assert "RateLimitError" in proposal.exchanges[0].error and proposal.exchanges[0].cost.usd == 0
    assert proposal.cost.llm_calls == 2
    assert proposal.cost.usd == pytest.approx(_price(MODEL, 1000, 500))
    settings = LlmSettings(timeout_s=5.0, backoff_s=0.01, max_retries=1)
    with ScriptedLlmServer([Scripted(status=429, content="rate limited")] * 2) as s:
        refused = _propose(s, settings, relu_card)
    assert not refused.has_proposal and "RateLimitError after 2 attempts" in refused.no_proposal_reason


def test_slow_answer_times_out_then_the_retry_answers(relu_card: Any) -> None:
    settings = LlmSettings(timeout_s=1.0, backoff_s=0.01, max_retries=1, repair_attempts=0)
    with ScriptedLlmServer([Scripted(content=_good_answer(relu_card), delay_s=3.0),
                            Scripted(content=_good_answer(relu_card))]) as s:
        proposal = _propose(s, settings, relu_card)
    assert proposal.has_proposal
    assert "imeout" in proposal.exchanges[0].error and proposal.exchanges[0].latency_s < 2.5
    with ScriptedLlmServer([Scripted(content="late", delay_s=3.0)] * 2) as s:
        refused = _propose(s, settings, relu_card)
    assert not refused.has_proposal and "imeout" in refused.no_proposal_reason


def test_budgets_per_card_and_per_run_stop_spending(relu_card: Any) -> None:
    one_call = _price(MODEL, 1000, 500)
    ledger = UsageLedger()
    settings = LlmSettings(timeout_s=5.0, backoff_s=0.01, budget_usd_per_card=1.5 * one_call,
                           budget_usd_per_run=2.5 * one_call)
    other, _ = aten_card(torch.ops.aten.neg.default, [torch.randn(8)])
    with ScriptedLlmServer([Scripted(content=_good_answer(relu_card))] * 10) as s:
        proposer = LlmProposer(MODEL, s.api_base, ledger, settings)
        run = "run-b"
        assert asyncio.run(proposer.propose(ProposeRequest(card=relu_card, run_id=run))).has_proposal
        assert asyncio.run(proposer.propose(ProposeRequest(card=relu_card, run_id=run))).has_proposal
        card_stop = asyncio.run(proposer.propose(ProposeRequest(card=relu_card, run_id=run)))
        assert not card_stop.has_proposal and "budget reached" in card_stop.no_proposal_reason
        assert asyncio.run(proposer.propose(ProposeRequest(card=other, run_id=run))).has_proposal
        run_stop = asyncio.run(proposer.propose(ProposeRequest(card=other, run_id=run)))
        assert not run_stop.has_proposal and "budget reached" in run_stop.no_proposal_reason
        forge_stop = asyncio.run(proposer.propose(ProposeRequest(card=other, run_id="run-c", budget_usd_remaining=0)))
        assert not forge_stop.has_proposal
        assert len(s.requests) == 3
    assert ledger.spent(run).usd == pytest.approx(3 * one_call) and ledger.spent(run).llm_calls == 3
    assert ledger.spent_on_card(run, relu_card.id).llm_calls == 2


def test_unknown_model_costs_nothing_but_its_tokens_count(relu_card: Any) -> None:
    with ScriptedLlmServer([Scripted(content=_good_answer(relu_card), model="kf-local-coder")]) as s:
        proposal = asyncio.run(LlmProposer("openai/kf-local-coder", s.api_base, settings=FAST).propose(
            ProposeRequest(card=relu_card)))
    assert proposal.has_proposal and proposal.cost.usd == 0 and proposal.cost.llm_calls == 1
    assert proposal.cost.prompt_tokens == 1000 and s.requests[0]["model"] == "kf-local-coder"
