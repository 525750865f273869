from __future__ import annotations

from pathlib import Path

import torch

from tests.examples_paper.llm_checks import decode_matches_a_longer_prefill
from tests.examples_paper.paper_specs import capture_spec, example_env, meta_model, ops_of, run_spec, spec_module

RMS_NORM = "transformers.models.gemma4.modeling_gemma4.Gemma4RMSNorm"


def test_tiny_prefill_returns_the_last_positions_logits() -> None:
    logits = run_spec("gemma4_e2b", "prefill")
    assert logits.shape == (1, 1, 512)
    assert logits.dtype == torch.bfloat16
    assert logits.float().abs().max() <= 30.0  # final logit soft-capping


def test_decode_step_continues_the_prompt() -> None:
    decode_matches_a_longer_prefill("gemma4_e2b")


def test_paper_prompt_is_512_tokens() -> None:
    with example_env("gpu", "prefill"):
        (prompt,) = spec_module("gemma4_e2b").get_inputs()
    assert prompt.shape == (1, 512)


def test_paper_model_has_e2b_widths_kv_sharing_and_per_layer_embeddings() -> None:
    lm = meta_model("gemma4_e2b").lm
    config, model = lm.config, lm.model
    assert (config.hidden_size, config.vocab_size) == (1536, 262_144)
    assert model.embed_tokens_per_layer.weight.shape == (262_144, 10 * 256)
    assert config.kv_sharing_modes == [None] * 3 + ["store"] * 2 + ["reuse"] * 5
    layers = model.layers
    assert layers[0].self_attn.q_proj.out_features == 8 * 256  # sliding: 8 heads of 256
    assert layers[4].self_attn.q_proj.out_features == 8 * 512  # global: 8 heads of 512
    assert layers[0].self_attn.k_proj.out_features == 256  # one KV head
    assert layers[0].mlp.up_proj.out_features == 6144
    assert layers[9].mlp.up_proj.out_features == 2 * 6144  # double-wide MLP where KV is shared
    assert not hasattr(layers[9].self_attn, "k_proj")


def test_capture_yields_rms_norm_gelu_tanh_and_attention_cards(tmp_path: Path) -> None:
    cards = capture_spec("gemma4_e2b", tmp_path, "prefill")
    ops = ops_of(cards)
    assert {
        RMS_NORM,
        "transformers.activations.GELUTanh",
        "aten::scaled_dot_product_attention.default",
        "aten::embedding.default",
        "aten::tanh.default",
        "aten::rsqrt.default" if "aten::rsqrt.default" in ops else "aten::pow.Tensor_Scalar",
    } <= ops
    norms = [c for c in cards.cards if c.op == RMS_NORM]
    widths = {c.inputs[0].shape[-1] for c in norms}
    assert {128, 32, 64, 16} <= widths  # hidden, sliding/global head dims, per-layer embedding width
    attention = [c for c in cards.cards if c.op == "aten::scaled_dot_product_attention.default"]
    head_dims = {c.inputs[0].shape[-1] for c in attention}
    assert head_dims == {32, 64}
    # Every query attends to the whole 24-token prompt; the KV-sharing layers compute only the
    # last prompt position's 8 query heads at prefill.
    assert {c.inputs[1].shape[2] for c in attention} == {24}
    assert {c.inputs[0].shape[1] * c.inputs[0].shape[2] for c in attention} == {8 * 24, 8}
