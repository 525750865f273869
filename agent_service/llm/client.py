"""One chat completion through litellm, with timeouts, retries on transient errors and accounting.

litellm is imported here, lazily, with its price map read from the installed package rather
than fetched. Every HTTP attempt becomes an :class:`LlmExchange` (prompt, answer or error,
tokens, dollars, latency), including the rate-limited and timed-out ones.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from agent_service.llm.settings import LlmSettings
from kforge_domain.cost import Cost, LlmExchange


class LlmCallFailed(Exception):
    """The call did not produce an answer; ``exchanges`` holds every attempt made."""

    def __init__(self, message: str, exchanges: list[LlmExchange]) -> None:
        super().__init__(message)
        self.exchanges = exchanges


def import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def _transient(litellm: Any) -> tuple[type[BaseException], ...]:
    names = ("RateLimitError", "Timeout", "APIConnectionError", "ServiceUnavailableError", "InternalServerError")
    return tuple(getattr(litellm, n) for n in names if isinstance(getattr(litellm, n, None), type))


def _retry_after_s(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        value = headers.get("retry-after") or headers.get("Retry-After")
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def cost_of(litellm: Any, response: Any, model: str) -> Cost:
    """Tokens from the response's usage; dollars from litellm's price map (0 if the model is not in it)."""
    usage = getattr(response, "usage", None)
    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    try:
        usd = float(litellm.completion_cost(completion_response=response, model=model))
    except Exception:  # litellm raises for models missing from its price map
        usd = 0.0
    return Cost(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, usd=usd, llm_calls=1)


def _prompt_text(messages: list[dict[str, str]]) -> str:
    return json.dumps(messages, ensure_ascii=False, indent=1)


async def complete(
    model: str, api_base: str | None, messages: list[dict[str, str]], settings: LlmSettings
) -> tuple[str, list[LlmExchange]]:
    """The answer text and the exchanges it took; LlmCallFailed when no answer came."""
    litellm = import_litellm()
    retryable: tuple[type[BaseException], ...] = (TimeoutError, *_transient(litellm))
    exchanges: list[LlmExchange] = []
    prompt = _prompt_text(messages)
    kwargs: dict[str, Any] = {"model": model, "messages": messages, "timeout": settings.timeout_s,
                              "max_tokens": settings.max_tokens, "num_retries": 0, "max_retries": 0}
    if api_base:
        kwargs["api_base"] = api_base
    if settings.temperature is not None:
        kwargs["temperature"] = settings.temperature
    for attempt in range(settings.max_retries + 1):
        started = time.monotonic()
        try:
            response = await asyncio.wait_for(litellm.acompletion(**kwargs), timeout=settings.timeout_s + 5.0)
        except retryable as exc:
            kind = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
            exchanges.append(LlmExchange(model=model, prompt=prompt, error=f"{kind}: {exc}"[:2000],
                                         latency_s=time.monotonic() - started, cost=Cost(llm_calls=1)))
            if attempt == settings.max_retries:
                raise LlmCallFailed(f"{model}: {kind} after {attempt + 1} attempts: {exc}"[:1000], exchanges) from exc
            wait = _retry_after_s(exc) or settings.backoff_s * (2**attempt)
            await asyncio.sleep(min(wait, settings.max_backoff_s))
            continue
        except Exception as exc:  # authentication, bad request, unknown provider: retrying cannot help
            exchanges.append(LlmExchange(model=model, prompt=prompt, error=f"{type(exc).__name__}: {exc}"[:2000],
                                         latency_s=time.monotonic() - started, cost=Cost(llm_calls=1)))
            raise LlmCallFailed(f"{model}: {type(exc).__name__}: {exc}"[:1000], exchanges) from exc
        text = response.choices[0].message.content or ""
        exchanges.append(LlmExchange(model=model, prompt=prompt, response=text, cost=cost_of(litellm, response, model),
                                     latency_s=time.monotonic() - started))
        return text, exchanges
    raise AssertionError("unreachable")
