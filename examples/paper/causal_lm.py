"""Prefill and decode steps of a transformers causal LM, each a module that returns logits.

A model spec must be a module called with tensors and returning tensors, and calling it twice
with the same inputs must give the same outputs (capture and end-to-end checks compare runs).
Serving an LLM is two different programs: the prompt's prefill and the per-token decode step
against a KV cache, so each gets a module here.

The decode step needs a cache from an earlier prefill. Decoding updates parts of that cache in
place (gated delta-net states, for one), so each call decodes from a private copy of the
prefill's cache: a few megabytes, copied on the device, which keeps the step a pure function
of its input token. The cache's tensors follow the module through ``.to()``.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

import torch
from transformers import PreTrainedModel


def _cache_keyword(lm: PreTrainedModel) -> str:
    """Recent transformers call the KV cache ``cache``; older releases ``past_key_values``."""
    parameters = inspect.signature(lm.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _output_cache(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor], seen: set[int]) -> Any:
    """Apply ``fn`` to every tensor reachable from ``value``, rebinding them where they are held."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if id(value) in seen:
        return value
    seen.add(id(value))
    if isinstance(value, list):
        value[:] = [_map_tensors(v, fn, seen) for v in value]
    elif isinstance(value, tuple):
        return tuple(_map_tensors(v, fn, seen) for v in value)
    elif isinstance(value, dict):
        for key in list(value):
            value[key] = _map_tensors(value[key], fn, seen)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        for key, item in list(vars(value).items()):
            vars(value)[key] = _map_tensors(item, fn, seen)
    return value


class PrefillStep(torch.nn.Module):
    """The prompt's forward pass, as ``generate`` runs it: fills a cache, keeps the last logits.

    ``logits_to_keep=1`` is what ``generate`` passes at prefill; it also lets models that share
    KV across layers (Gemma 4) skip the prompt positions in the sharing layers.
    """

    def __init__(self, lm: PreTrainedModel) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=True, logits_to_keep=1).logits


class DecodeStep(torch.nn.Module):
    """One decode step after a fixed prompt: the next token's logits from the prompt's cache."""

    def __init__(self, lm: PreTrainedModel, prompt_ids: torch.Tensor) -> None:
        super().__init__()
        self.lm = lm
        self.prompt_length = int(prompt_ids.shape[1])
        self._cache_keyword = _cache_keyword(lm)
        with torch.inference_mode():
            output = lm(input_ids=prompt_ids, use_cache=True, logits_to_keep=1)
        self._prompt_cache = _output_cache(output)

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> DecodeStep:  # type: ignore[override]
        super()._apply(fn, recurse)
        self._prompt_cache = _map_tensors(self._prompt_cache, fn, set())
        return self

    @torch.compiler.disable
    def _fresh_cache(self) -> Any:
        return copy.deepcopy(self._prompt_cache)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        batch, new_tokens = input_ids.shape
        positions = torch.arange(self.prompt_length, self.prompt_length + new_tokens, device=input_ids.device)
        output = self.lm(
            input_ids=input_ids,
            position_ids=positions.expand(batch, new_tokens),
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_keyword: self._fresh_cache()},
        )
        return output.logits


def step_model(lm: PreTrainedModel, prompt: Callable[[], torch.Tensor], variant: str) -> torch.nn.Module:
    """The model spec's module: a prefill or, for ``decode``, one step after ``prompt()`` (made
    only then, so a prefill model can be built on the meta device)."""
    lm.eval()
    if variant == "decode":
        return DecodeStep(lm, prompt()).eval()
    return PrefillStep(lm).eval()


def step_inputs(prompt: torch.Tensor, variant: str) -> tuple[torch.Tensor]:
    """The prompt (prefill) or the next token after it (decode)."""
    if variant == "decode":
        return (prompt[:, -1:].clone(),)
    return (prompt,)
