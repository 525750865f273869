from __future__ import annotations

from pathlib import Path

import torch

from tests.examples_paper.paper_specs import capture_spec, example_env, meta_model, ops_of, run_spec, spec_module


def test_tiny_step_predicts_a_latent_shaped_velocity() -> None:
    velocity = run_spec("sd35_mmdit")
    assert velocity.shape == (2, 16, 32, 32)
    assert velocity.dtype == torch.bfloat16
    assert torch.isfinite(velocity.float()).all()


def test_paper_inputs_are_a_guided_1024px_step() -> None:
    with example_env("gpu"):
        latents, text, pooled, timestep = spec_module("sd35_mmdit").get_inputs()
    assert latents.shape == (2, 16, 128, 128)
    assert text.shape == (2, 333, 4096)
    assert pooled.shape == (2, 2048)
    assert timestep.shape == (2,)


def test_paper_model_has_medium_widths_and_both_block_kinds() -> None:
    transformer = meta_model("sd35_mmdit").transformer
    blocks = transformer.transformer_blocks
    assert transformer.inner_dim == 1536
    assert transformer.pos_embed.pos_embed.shape == (1, 384 * 384, 1536)
    assert [block.use_dual_attention for block in blocks] == [True, True, False, False]
    assert [block.context_pre_only for block in blocks] == [False, False, False, True]
    assert blocks[0].attn.heads == 24
    assert type(blocks[0].attn.norm_q).__name__ == "RMSNorm"


def test_capture_yields_attention_norm_and_gelu_cards(tmp_path: Path) -> None:
    cards = capture_spec("sd35_mmdit", tmp_path)
    ops = ops_of(cards)
    assert {
        "aten::scaled_dot_product_attention.default",
        "aten::layer_norm.default",
        "aten::gelu.default",
        "aten::conv2d.default",
        "diffusers.models.normalization.RMSNorm",
    } <= ops
    attention = [c for c in cards.cards if c.op == "aten::scaled_dot_product_attention.default"]
    # Joint attention over image + text tokens, and the dual blocks' image-only attention.
    sequence_lengths = {c.inputs[0].shape[2] for c in attention}
    assert sequence_lengths == {16 * 16 + 32, 16 * 16}
    gelu = next(c for c in cards.cards if c.op == "aten::gelu.default")
    assert gelu.template["kwargs"] == {"approximate": "tanh"}
    assert all(c.inputs[0].dtype == "bfloat16" for c in attention)
