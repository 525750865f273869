import torch

from packager.variant import (
    decode_call,
    encode_call,
    module_attributes,
    module_variant_key,
    tensor_signature,
    variant_key,
)


def test_equal_calls_share_a_key_and_layouts_split_it() -> None:
    x = torch.randn(4, 8)
    a = variant_key("aten::_softmax.default", [x, -1, False], {})
    b = variant_key("aten::_softmax.default", [torch.randn(4, 8), -1, False], {})
    assert a == b and a.id == b.id
    assert variant_key("aten::_softmax.default", [x.t(), -1, False], {}) != a
    assert variant_key("aten::_softmax.default", [x, 0, False], {}) != a
    assert variant_key("aten::_softmax.default", [x.half(), -1, False], {}) != a
    assert variant_key("aten::_softmax.default", [x[1:], -1, False], {}) != a


def test_storage_offset_and_alignment_are_part_of_the_signature() -> None:
    base = torch.randn(65)
    sig = tensor_signature(base[1:])
    assert sig.storage_offset == 1 and not sig.aligned16


def test_template_round_trips_through_json() -> None:
    x, w = torch.randn(2, 3), torch.randn(3)
    template, tensors = encode_call([x, [3], w, None, 1e-5], {"dtype": torch.float16})
    args, kwargs = decode_call(template, [t.clone() for t in tensors])
    assert args[1] == [3] and args[3] is None and args[4] == 1e-5
    assert torch.equal(args[2], w) and kwargs["dtype"] is torch.float16


def test_module_key_covers_parameters() -> None:
    norm = torch.nn.LayerNorm(8)
    x = torch.randn(2, 8)
    key = module_variant_key(norm, [x], {})
    assert key.op == "torch.nn.modules.normalization.LayerNorm"
    assert len(key.tensors) == 3
    assert module_variant_key(torch.nn.LayerNorm(8, elementwise_affine=False), [x], {}) != key


def test_module_attributes_split_variants() -> None:
    x = torch.randn(2, 8)
    key = module_variant_key(torch.nn.LayerNorm(8, eps=1e-5), [x], {})
    assert module_variant_key(torch.nn.LayerNorm(8, eps=1e-6), [x], {}) != key
    assert module_variant_key(torch.nn.LayerNorm(8, eps=1e-5).eval(), [x], {}) != key  # training differs
    assert module_variant_key(torch.nn.LayerNorm(8, eps=1e-5), [x], {}) == key


def test_submodule_attributes_split_the_variants_of_a_block() -> None:
    """A norm + activation block whose norm has other groups is another variant, though its tensors agree."""
    x = torch.randn(1, 8, 4, 4)

    def block(groups: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.GroupNorm(groups, 8), torch.nn.SiLU()).eval()

    assert module_variant_key(block(2), [x], {}) != module_variant_key(block(4), [x], {})
    assert module_variant_key(block(2), [x], {}) == module_variant_key(block(2), [x], {})
    assert module_attributes(block(2))["0.num_groups"] == 2
