"""A second run on the same model reuses the kernel cache: its LLM calls and wall time against the first.

Both runs use an LLM proposer (litellm, ``openai/gpt-4o-mini``) pointed at an OpenAI-compatible
endpoint on loopback (the tests' scripted server). The endpoint writes its answers with the offline proposer's templates
(knob sets it has not yet given for that card, found by the card id the prompt names), so every
answer is a real kernel that compiles and verifies; ``--answer-delay`` adds a hosted model's
answer time. The two runs share one runs directory, hence one kernel cache.

    python bench/cache_reuse.py [--budget 4] [--max-cards 3] [--answer-delay 0] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_service.offline.proposer import propose_offline
from kforge_domain.card import CardSet
from kforge_domain.propose_request import ProposeRequest
from tests.agent_service.scripted_llm import Scripted, ScriptedLlmServer

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "forge_service" / "models" / "tiny_mlp.py"
LLM = "openai/gpt-4o-mini"
CARD_ID = re.compile(r"Card id `([0-9a-f]+)`")


class TemplateEndpoint:
    """``/v1/chat/completions`` answering each prompt with a template kernel for the card it names."""

    def __init__(self, cards: CardSet, answer_delay_s: float) -> None:
        self._cards = cards
        self._delay_s = answer_delay_s
        self._tried: dict[str, list[dict[str, object]]] = {}
        self._server = ScriptedLlmServer([], respond=self._answer).__enter__()

    @property
    def api_base(self) -> str:
        return self._server.api_base

    @property
    def requests(self) -> int:
        return len(self._server.requests)

    def _answer(self, request: dict[str, Any]) -> Scripted:
        prompt = "\n".join(str(m.get("content", "")) for m in request.get("messages", []))
        match = CARD_ID.search(prompt)
        if match is None:
            content = "The prompt names no card."
        else:
            tried = self._tried.setdefault(match.group(1), [])
            proposal = propose_offline(ProposeRequest(card=self._cards.card(match.group(1)), tried_knobs=tuple(tried)))
            tried.append(proposal.knobs)
            content = (f"DESCRIPTION: {proposal.description}\n```cpp\n{proposal.source}```\n"
                       if proposal.has_proposal else proposal.no_proposal_reason)
        return Scripted(content=content, delay_s=self._delay_s, prompt_tokens=len(prompt) // 4,
                        completion_tokens=len(content) // 4, model=LLM.split("/", 1)[1])

    def close(self) -> None:
        self._server.__exit__()


def optimize(runs_dir: Path, api_base: str, budget: int, max_cards: int) -> dict[str, object]:
    """One ``kforge optimize`` run with the LLM proposer; what it cost, read from its run store."""
    cmd = [sys.executable, "-m", "forge_service.cli", "optimize", str(MODEL), "--backend", "cpu",
           "--proposer", LLM, "--api-base", api_base, "--budget", str(budget), "--max-cards", str(max_cards),
           "--json", "--runs-dir", str(runs_dir)]
    env = {**os.environ, "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "sk-loopback")}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600, env=env)
    wall_s = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    out = json.loads(proc.stdout)
    con = sqlite3.connect(Path(out["run"]["run_dir"]) / "run.sqlite")
    llm_calls, tokens, usd = con.execute(
        "SELECT COUNT(*), COALESCE(SUM(prompt_tokens + completion_tokens), 0), COALESCE(SUM(usd), 0) FROM llm_calls"
    ).fetchone()
    proposers = dict(con.execute("SELECT proposer, COUNT(*) FROM candidates GROUP BY proposer").fetchall())
    first, last = con.execute("SELECT MIN(c.created_at), MAX(r.created_at) FROM candidates c "
                              "JOIN results r ON r.candidate_id = c.id").fetchone()
    con.close()
    best = {card["card_id"]: card.get("speedup") for card in out["report"]["cards"] if card.get("status") == "done"}
    return {"wall_s": round(wall_s, 1), "search_s": round((last or 0) - (first or 0), 1), "llm_calls": llm_calls,
            "llm_tokens": tokens, "llm_usd": round(usd, 6), "candidates_by_proposer": proposers,
            "evaluated": sum(proposers.values()), "best_speedup_by_card": best}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=4, help="evaluations per card")
    parser.add_argument("--max-cards", type=int, default=3)
    parser.add_argument("--answer-delay", type=float, default=0.0, help="seconds the endpoint waits per answer")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        capture = subprocess.run([sys.executable, "-m", "forge_service.cli", "capture", str(MODEL), "--out",
                                  f"{tmp}/capture"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        if capture.returncode != 0:
            raise RuntimeError(capture.stderr[-3000:])
        endpoint = TemplateEndpoint(CardSet.load(Path(tmp) / "capture"), args.answer_delay)
        try:
            runs = [optimize(Path(tmp) / "runs", endpoint.api_base, args.budget, args.max_cards) for _ in range(2)]
        finally:
            endpoint.close()
    print(f"{'run':>4} {'wall s':>7} {'search s':>9} {'LLM calls':>10} {'tokens':>8} {'evaluated':>10}  proposers")
    for i, run in enumerate(runs, 1):
        print(f"{i:>4} {run['wall_s']:>7} {run['search_s']:>9} {run['llm_calls']:>10} {run['llm_tokens']:>8} "
              f"{run['evaluated']:>10}  {run['candidates_by_proposer']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "model": str(MODEL.relative_to(ROOT)), "proposer": LLM, "budget": args.budget,
            "max_cards": args.max_cards, "answer_delay_s": args.answer_delay, "machine": platform.machine(),
            "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
