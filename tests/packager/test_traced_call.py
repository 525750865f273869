"""A traced call described in constants matches a card's key exactly as the call itself does."""

import torch

from packager.guard import CallMatcher
from packager.traced_call import UNTRACEABLE, KnownValues, TracedTensor, describe, rebuild
from packager.variant import variant_key


def _key(args: list[object], kwargs: dict[str, object]):
    return variant_key("aten::leaky_relu.default", args, kwargs)


def test_known_values_hold_every_size_and_number_of_the_keys_with_signed_zeros_apart() -> None:
    x = torch.randn(4, 8)
    keys = [_key([x, 0.5], {"count": 3, "flag": True}), _key([x.t(), -0.0], {"scales": [0.0, 2]})]
    known = KnownValues.of(keys)
    assert set(known.shapes) == {(4, 8), (8, 4)} and set(known.strides) == {(8, 1), (1, 8)}
    assert set(known.ints) == {3, 2}  # not the bool, not the tensors' placeholders
    assert sorted(str(f) for f in known.floats) == ["-0.0", "0.0", "0.5"]
    special = KnownValues.of([_key([x, float("nan")], {"bound": float("inf")})])
    tensors: list[torch.Tensor] = []
    described = describe([float("nan"), float("inf"), float("-inf")], tensors, special)
    assert str(described[:2]) == "[nan, inf]" and described[2] == UNTRACEABLE


def test_a_described_call_rebuilds_with_stand_ins_for_its_tensors() -> None:
    x = torch.randn(4, 8)
    weight = torch.randn(8, requires_grad=True)
    known = KnownValues.of([_key([x, weight, 0.5, 3], {})])
    tensors: list[torch.Tensor] = []
    described = describe([x, [weight, None], 0.5, 3, "mean", torch.float32], tensors, known)
    assert len(tensors) == 2 and tensors[0] is x and tensors[1] is weight
    first, (second, none), half, three, name, dtype = rebuild(described)
    assert first == TracedTensor(torch.Size([4, 8]), (8, 1), torch.float32, "cpu", False, 0)
    assert second.shape == torch.Size([8]) and second.requires_grad and second.position == 1
    assert (none, half, three, name, dtype) == (None, 0.5, 3, "mean", torch.float32)


def test_what_no_key_holds_is_untraceable() -> None:
    x = torch.randn(4, 8)
    known = KnownValues.of([_key([x, 0.0], {})])
    tensors: list[torch.Tensor] = []
    assert describe(torch.randn(5, 8), tensors, known) == UNTRACEABLE  # a shape no key holds
    assert describe(x.t(), tensors, known) == UNTRACEABLE  # strides no key holds
    assert describe(-0.0, tensors, known) == UNTRACEABLE  # 0.0 is known, -0.0 is not
    assert describe(7, tensors, known) == UNTRACEABLE
    assert describe(object(), tensors, known) == UNTRACEABLE
    assert tensors == []


def test_a_traced_matcher_takes_a_rebuilt_call_exactly_when_it_takes_the_call() -> None:
    x = torch.randn(4, 8)
    key_args, key_kwargs = [x, 0.5], {"inplace": False}
    matcher = CallMatcher(_key(key_args, key_kwargs), traced=True)
    known = KnownValues.of([matcher.key])
    calls = [
        ([x, 0.5], {"inplace": False}),
        ([x.clone(), 0.5], {"inplace": False}),
        ([x, 0.25], {"inplace": False}),
        ([x, 0.5], {"inplace": True}),
        ([x.double(), 0.5], {"inplace": False}),
        ([x.t().contiguous().t(), 0.5], {"inplace": False}),
        ([torch.randn(4, 9), 0.5], {"inplace": False}),
        ([x, 1], {"inplace": False}),
        ([x], {"inplace": False}),
    ]
    for args, kwargs in calls:
        direct = matcher.miss_reason(args, kwargs, [])
        tensors: list[torch.Tensor] = []
        described = describe([list(args), [[name, value] for name, value in kwargs.items()]], tensors, known)
        rebuilt_args, rebuilt_kwargs = rebuild(described)
        found: list[TracedTensor] = []
        via_description = matcher.miss_reason(rebuilt_args, dict(rebuilt_kwargs), found)
        assert (direct is None) == (via_description is None), (args, kwargs, direct, via_description)
        if direct is None:
            assert [t.position for t in found] == [0] and tensors[0] is args[0]
