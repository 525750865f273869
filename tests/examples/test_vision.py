"""torchvision ResNet-50 and the diffusers mid block."""

from capture_service.modules import NO_WORK
from capture_service.recorder import MUTATES
from tests.examples.capture_helpers import calls, check_common_invariants, module_cards, variants


def test_resnet50(capture) -> None:
    cards = capture("resnet50")
    check_common_invariants(cards)
    convs = variants(cards, "aten::conv2d.default")
    assert sum(convs.values()) == 53
    assert convs[((1, 3, 64, 64), (64, 3, 7, 7))] == 1
    assert convs[((1, 64, 16, 16), (64, 64, 3, 3))] == 3
    assert convs[((1, 256, 4, 4), (256, 256, 3, 3))] == 5
    assert sum(variants(cards, "aten::batch_norm.default").values()) == 53
    assert sum(variants(cards, "aten::relu_.default").values()) == 49
    assert sum(variants(cards, "aten::add_.Tensor").values()) == 16
    assert variants(cards, "aten::max_pool2d.default") == {((1, 64, 32, 32),): 1}
    assert variants(cards, "aten::adaptive_avg_pool2d.default") == {((1, 2048, 2, 2),): 1}
    assert variants(cards, "aten::linear.default") == {((1, 2048), (1000, 2048), (1000,)): 1}
    inplace = [c for c in cards.cards if c.op in ("aten::relu_.default", "aten::add_.Tensor")]
    assert inplace and all(c.optimisable and c.mutated_inputs == [0] for c in inplace)
    modules = module_cards(cards)
    assert set(modules) == {"Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d", "AdaptiveAvgPool2d", "Linear"}
    assert calls(modules["Conv2d"]) == 53 and calls(modules["BatchNorm2d"]) == 53 and calls(modules["ReLU"]) == 49
    assert all(c.reason == MUTATES for c in modules["ReLU"])


def test_diffusion_block(capture) -> None:
    cards = capture("diffusion_block")
    check_common_invariants(cards)
    norms = variants(cards, "aten::group_norm.default")
    assert norms == {((1, 64, 16, 16), (64,), (64,)): 4, ((1, 64, 256), (64,), (64,)): 1}
    assert variants(cards, "aten::silu.default") == {((1, 64, 16, 16),): 4}
    assert variants(cards, "aten::conv2d.default") == {((1, 64, 16, 16), (64, 64, 3, 3), (64,)): 4}
    assert variants(cards, "aten::scaled_dot_product_attention.default") == {((1, 1, 256, 64),) * 3: 1}
    assert variants(cards, "aten::linear.default") == {((1, 256, 64), (64, 64), (64,)): 4}
    group_norm_cards = [c for c in cards.cards if c.op == "aten::group_norm.default"]
    assert all(c.template["args"][1] == 32 for c in group_norm_cards)
    modules = module_cards(cards)
    assert calls(modules["GroupNorm"]) == 5 and calls(modules["SiLU"]) == 4 and calls(modules["Conv2d"]) == 4
    assert all(c.reason == NO_WORK for c in modules["Dropout"])
    assert not {"ResnetBlock2D", "Attention", "UNetMidBlock2D"} & set(modules)
