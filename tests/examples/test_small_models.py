"""The README demo CNN and our own transformer block."""

from tests.examples.capture_helpers import calls, check_common_invariants, module_cards, variants


def test_small_cnn(capture) -> None:
    cards = capture("small_cnn")
    check_common_invariants(cards)
    assert variants(cards, "aten::conv2d.default") == {
        ((8, 3, 32, 32), (16, 3, 3, 3), (16,)): 1,
        ((8, 16, 16, 16), (32, 16, 3, 3), (32,)): 1,
    }
    assert variants(cards, "aten::batch_norm.default") == {
        ((8, 16, 32, 32), (16,), (16,), (16,), (16,)): 1,
        ((8, 32, 16, 16), (32,), (32,), (32,), (32,)): 1,
    }
    assert variants(cards, "aten::relu.default") == {((8, 16, 32, 32),): 1, ((8, 32, 16, 16),): 1}
    assert variants(cards, "aten::max_pool2d.default") == {((8, 16, 32, 32),): 1}
    assert variants(cards, "aten::adaptive_avg_pool2d.default") == {((8, 32, 16, 16),): 1}
    assert variants(cards, "aten::linear.default") == {((8, 32), (10, 32), (10,)): 1}
    assert variants(cards, "aten::softmax.int") == {((8, 10),): 1}
    modules = module_cards(cards)
    assert {name: calls(found) for name, found in modules.items()} == {
        "Conv2d": 2, "BatchNorm2d": 2, "ReLU": 2, "MaxPool2d": 1, "AdaptiveAvgPool2d": 1, "Linear": 1,
    }
    assert all(c.vendor_op for c in modules["Conv2d"]) and not any(c.vendor_op for c in modules["BatchNorm2d"])


def test_small_transformer(capture) -> None:
    cards = capture("small_transformer")
    check_common_invariants(cards)
    assert variants(cards, "aten::linear.default") == {
        ((2, 16, 64), (192, 64)): 1,
        ((2, 16, 64), (64, 64)): 1,
        ((2, 16, 64), (128, 64)): 2,
        ((2, 16, 128), (64, 128)): 1,
    }
    assert variants(cards, "aten::matmul.default") == {((2, 4, 16, 16), (2, 4, 16, 16)): 2}
    assert variants(cards, "aten::softmax.int") == {((2, 4, 16, 16),): 1}
    assert variants(cards, "aten::silu.default") == {((2, 16, 128),): 1}
    assert variants(cards, "aten::rsqrt.default") == {((2, 16, 1),): 2}
    modules = module_cards(cards)
    assert set(modules) == {"RMSNorm", "SiLUGate", "Linear"}
    (norm,) = modules["RMSNorm"]
    assert norm.op == "examples.small_transformer.RMSNorm" and norm.call_count == 2
    assert norm.module_paths == ["attn_norm", "mlp_norm"] and [t.shape for t in norm.inputs] == [[2, 16, 64], [64]]
    (gate,) = modules["SiLUGate"]
    assert [t.shape for t in gate.inputs] == [[2, 16, 128], [2, 16, 128]] and gate.outputs[0].shape == [2, 16, 128]
