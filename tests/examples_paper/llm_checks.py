"""Checks shared by the two LLM specs: a decode step is the prefill's continuation, and pure."""

from __future__ import annotations

import torch

from examples.paper.causal_lm import DecodeStep, PrefillStep
from tests.examples_paper.paper_specs import example_env, spec_module


def decode_matches_a_longer_prefill(name: str) -> None:
    """The decode step's logits equal the last logits of a prefill over prompt + token."""
    with example_env(variant="decode"):
        spec = spec_module(name)
        step = spec.get_model()
        (token,) = spec.get_inputs()
        prompt = spec.prompt_ids()
    assert isinstance(step, DecodeStep)
    assert token.shape == (1, 1)
    with torch.inference_mode():
        decoded = step(token)
        again = step(token)
        reference = PrefillStep(step.lm)(torch.cat([prompt, token], dim=1))
    assert decoded.shape == reference.shape == (1, 1, step.lm.config.vocab_size)
    assert torch.equal(decoded, again), "a decode step must not change the cache it starts from"
    error = (decoded.float() - reference.float()).norm() / reference.float().norm()
    assert error < 0.05, f"decode differs from the equivalent prefill by {error:.3f} (relative)"
