from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.examples_paper.paper_specs import capture_spec, example_env, meta_model, ops_of, run_spec, spec_module


@pytest.mark.parametrize(
    ("variant", "batch", "dtype"), [("b1_fp32", 1, torch.float32), ("b32_bf16", 2, torch.bfloat16)]
)
def test_tiny_variants_classify_a_batch(variant: str, batch: int, dtype: torch.dtype) -> None:
    logits = run_spec("resnet50", variant)
    assert logits.shape == (batch, 1000)
    assert logits.dtype == dtype
    assert torch.isfinite(logits.float()).all()


def test_paper_inputs_are_imagenet_sized() -> None:
    with example_env("gpu", "b32_bf16"):
        (images,) = spec_module("resnet50").get_inputs()
    assert images.shape == (32, 3, 224, 224)
    assert images.dtype == torch.bfloat16


def test_the_network_is_torchvisions_resnet50() -> None:
    model = meta_model("resnet50")
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    assert [len(stage) for stage in (model.layer1, model.layer2, model.layer3, model.layer4)] == [3, 4, 6, 3]


def test_capture_yields_convolution_batch_norm_and_relu_cards(tmp_path: Path) -> None:
    cards = capture_spec("resnet50", tmp_path, "b1_fp32")
    ops = ops_of(cards)
    assert {"aten::conv2d.default", "aten::batch_norm.default", "aten::relu_.default", "aten::linear.default"} <= ops
    assert {"torch.nn.modules.batchnorm.BatchNorm2d", "torch.nn.modules.conv.Conv2d"} <= ops
    convs = [c for c in cards.cards if c.op == "aten::conv2d.default"]
    assert all(c.inputs[0].dtype == "float32" for c in convs)
    # ResNet-50 has 53 convolutions: 23 distinct (shape, stride) variants at any input size.
    assert len(convs) == 23
    assert sum(c.call_count for c in convs) == 53
