from __future__ import annotations

from pathlib import Path

import torch

from tests.examples_paper.llm_checks import decode_matches_a_longer_prefill
from tests.examples_paper.paper_specs import capture_spec, example_env, meta_model, ops_of, run_spec, spec_module

QWEN = "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe"


def test_tiny_prefill_returns_the_last_positions_logits() -> None:
    logits = run_spec("qwen35_moe", "prefill")
    assert logits.shape == (1, 1, 512)
    assert logits.dtype == torch.bfloat16
    assert torch.isfinite(logits.float()).all()


def test_decode_step_continues_the_prompt() -> None:
    decode_matches_a_longer_prefill("qwen35_moe")


def test_paper_prompt_is_512_tokens() -> None:
    with example_env("gpu", "prefill"):
        (prompt,) = spec_module("qwen35_moe").get_inputs()
    assert prompt.shape == (1, 512)


def test_paper_model_has_35b_a3b_experts_and_hybrid_attention() -> None:
    lm = meta_model("qwen35_moe").lm
    layers = lm.model.layers
    assert [layer.block_type for layer in layers] == ["linear_attention"] * 3 + ["full_attention"]
    moe = layers[0].mlp
    assert moe.experts.gate_up_proj.shape == (256, 2 * 512, 2048)
    assert moe.gate.top_k == 8
    assert moe.shared_expert.up_proj.out_features == 512
    delta = layers[0].linear_attn
    assert (delta.num_k_heads, delta.num_v_heads, delta.head_k_dim, delta.conv_kernel_size) == (16, 32, 128, 4)
    attention = layers[3].self_attn
    assert attention.q_proj.out_features == 16 * 256 * 2  # queries and their output gate
    assert attention.k_proj.out_features == 2 * 256
    assert lm.lm_head.weight.shape == (248_320, 2048)


def test_capture_yields_routing_delta_net_and_norm_cards(tmp_path: Path) -> None:
    cards = capture_spec("qwen35_moe", tmp_path, "prefill")
    ops = ops_of(cards)
    assert {
        "aten::topk.default",
        "aten::softmax.int",
        "aten::conv1d.default",
        "aten::softplus.default",
        "aten::scaled_dot_product_attention.default",
        f"{QWEN}.Qwen3_5MoeRMSNorm",
        f"{QWEN}.Qwen3_5MoeRMSNormGated",
    } <= ops
    topk = next(c for c in cards.cards if c.op == "aten::topk.default")
    assert topk.inputs[0].shape == [24, 32]  # 24 tokens routed over 32 experts
    assert topk.template["args"][1] == 8
    norms = {c.inputs[0].shape[-1] for c in cards.cards if c.op == f"{QWEN}.Qwen3_5MoeRMSNorm"}
    assert {128, 32} <= norms  # hidden size and q/k head norms


def test_capture_of_decode_sees_single_token_routing(tmp_path: Path) -> None:
    cards = capture_spec("qwen35_moe", tmp_path, "decode")
    topk = next(c for c in cards.cards if c.op == "aten::topk.default")
    assert topk.inputs[0].shape == [1, 32]
    attention = next(c for c in cards.cards if c.op == "aten::scaled_dot_product_attention.default")
    assert attention.inputs[1].shape[2] == 25  # the 24-token prompt's cache plus the new token
