from __future__ import annotations

import torch

from examples.paper.causal_lm import DecodeStep
from tests.examples_paper.paper_specs import example_env, spec_module


def _cache_tensors(step: DecodeStep) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for layer in step._prompt_cache.layers:
        found += [v for v in vars(layer).values() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    return found


def test_the_prompt_cache_follows_the_module_through_to() -> None:
    with example_env(variant="decode"):
        spec = spec_module("gemma4_e2b")
        step = spec.get_model()
        (token,) = spec.get_inputs()
    assert {t.dtype for t in _cache_tensors(step)} == {torch.bfloat16}
    step = step.to(torch.float32)
    assert {t.dtype for t in _cache_tensors(step)} == {torch.float32}
    with torch.inference_mode():
        logits = step(token)
    assert logits.dtype == torch.float32
