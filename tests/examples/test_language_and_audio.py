"""transformers Qwen2 and Gemma3 decoders and the Whisper encoder, tiny configs."""

from tests.examples.capture_helpers import calls, check_common_invariants, module_cards, variants


def test_qwen2_decoder(capture) -> None:
    cards = capture("qwen2_decoder")
    check_common_invariants(cards)
    assert variants(cards, "aten::embedding.default") == {((256, 64), (1, 16)): 1}
    assert variants(cards, "aten::linear.default") == {
        ((1, 16, 64), (64, 64), (64,)): 2,
        ((1, 16, 64), (32, 64), (32,)): 4,
        ((1, 16, 64), (64, 64)): 2,
        ((1, 16, 64), (128, 64)): 4,
        ((1, 16, 128), (64, 128)): 2,
    }
    assert variants(cards, "aten::scaled_dot_product_attention.default") == {
        ((1, 4, 16, 16), (1, 2, 16, 16), (1, 2, 16, 16)): 2
    }
    assert variants(cards, "aten::silu.default") == {((1, 16, 128),): 2}
    modules = module_cards(cards)
    assert {"Qwen2RMSNorm", "Qwen2RotaryEmbedding", "SiLUActivation", "Embedding", "Linear"} == set(modules)
    (norm,) = modules["Qwen2RMSNorm"]
    assert norm.call_count == 5 and norm.module_paths[-1] == "norm"
    assert calls(modules["SiLUActivation"]) == 2 and calls(modules["Linear"]) == 14


def test_gemma_decoder(capture) -> None:
    cards = capture("gemma_decoder")
    check_common_invariants(cards)
    assert variants(cards, "aten::linear.default") == {
        ((1, 16, 64), (64, 64)): 4,
        ((1, 16, 64), (16, 64)): 4,
        ((1, 16, 64), (128, 64)): 4,
        ((1, 16, 128), (64, 128)): 2,
    }
    assert sum(variants(cards, "aten::scaled_dot_product_attention.default").values()) == 2
    assert variants(cards, "aten::gelu.default") == {((1, 16, 128),): 2}
    norms = {tuple(c.inputs[0].shape): c.call_count for c in module_cards(cards)["Gemma3RMSNorm"]}
    assert norms == {(1, 16, 64): 9, (1, 4, 16, 16): 2, (1, 1, 16, 16): 2}
    modules = module_cards(cards)
    assert calls(modules["GELUTanh"]) == 2 and calls(modules["Gemma3TextScaledWordEmbedding"]) == 1
    assert not {"Gemma3DecoderLayer", "Gemma3Attention", "Gemma3MLP"} & set(modules)


def test_whisper_encoder(capture) -> None:
    cards = capture("whisper_encoder")
    check_common_invariants(cards)
    assert variants(cards, "aten::conv1d.default") == {
        ((1, 80, 100), (64, 80, 3), (64,)): 1,
        ((1, 64, 100), (64, 64, 3), (64,)): 1,
    }
    assert variants(cards, "aten::gelu.default") == {((1, 64, 100),): 1, ((1, 64, 50),): 1, ((1, 50, 128),): 2}
    assert variants(cards, "aten::layer_norm.default") == {((1, 50, 64), (64,), (64,)): 5}
    assert variants(cards, "aten::linear.default") == {
        ((1, 50, 64), (64, 64), (64,)): 6,
        ((1, 50, 64), (64, 64)): 2,
        ((1, 50, 64), (128, 64), (128,)): 2,
        ((1, 50, 128), (64, 128), (64,)): 2,
    }
    assert variants(cards, "aten::scaled_dot_product_attention.default") == {((1, 4, 50, 16),) * 3: 2}
    modules = module_cards(cards)
    assert calls(modules["LayerNorm"]) == 5 and calls(modules["GELUActivation"]) == 2
    assert calls(modules["Conv1d"]) == 2 and calls(modules["Embedding"]) == 1
