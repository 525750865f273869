import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from packager.guard import CallMatcher, address_miss
from packager.variant import ATTRIBUTES_KWARG, STATE_KWARG, encode_call, variant_key

OP = "aten::_softmax.default"


def _tensor(draw: st.DrawFn) -> torch.Tensor:
    base = torch.randn(draw(st.sampled_from([(4, 8), (8, 4), (4, 9)])),
                       dtype=draw(st.sampled_from([torch.float32, torch.float16, torch.float64])))
    form = draw(st.sampled_from(["plain", "transposed", "offset", "narrow"]))
    if form == "transposed":
        return base.t()
    if form == "offset":
        return base.flatten()[1:].narrow(0, 0, 16).view(4, 4)
    return base[:, :4] if form == "narrow" else base


@st.composite
def calls(draw: st.DrawFn) -> tuple[list[object], dict[str, object]]:
    scalar = st.one_of(st.integers(-2, 2), st.booleans(), st.none(), st.sampled_from([0.0, -0.0, 1.0, 1e-5]),
                       st.lists(st.integers(0, 3), max_size=2), st.just(torch.float16))
    args: list[object] = [_tensor(draw), *draw(st.lists(scalar, max_size=3))]
    kwargs = draw(st.dictionaries(st.sampled_from(["dim", "dtype"]), scalar, max_size=1))
    return args, kwargs


@settings(max_examples=150, deadline=None)
@given(calls(), calls())
def test_matcher_accepts_exactly_the_calls_with_the_card_key(card_call, live_call) -> None:
    expected = variant_key(OP, *card_call)
    matcher = CallMatcher(expected)
    tensors: list[torch.Tensor] = []
    hit = matcher.miss_reason(*live_call, tensors) is None
    assert hit == (variant_key(OP, *live_call) == expected)
    assert matcher.miss_reason(*card_call, []) is None


@st.composite
def module_calls(draw: st.DrawFn) -> tuple[list[object], dict[str, object]]:
    """A module call as its key sees it: forward arguments, attributes, and ``[name, tensor]`` state."""
    args, _ = draw(calls())
    names = draw(st.lists(st.sampled_from(["weight", "bias", "norm.weight"]), min_size=1, max_size=2))
    attributes = [["eps", draw(st.sampled_from([1e-5, 1e-6]))], ["training", draw(st.booleans())]]
    return args, {ATTRIBUTES_KWARG: attributes, STATE_KWARG: [[name, _tensor(draw)] for name in names]}


@settings(max_examples=150, deadline=None)
@given(module_calls(), module_calls())
def test_module_matcher_accepts_exactly_the_calls_with_the_card_key(card_call, live_call) -> None:
    expected = variant_key("Block", *card_call)
    matcher = CallMatcher(expected, remembered=(ATTRIBUTES_KWARG,))
    for _ in range(2):  # the second time, the verdict on the same attributes list is remembered
        tensors: list[torch.Tensor] = []
        hit = matcher.miss_reason(*live_call, tensors) is None
        assert hit == (variant_key("Block", *live_call) == expected)
        if hit:
            assert all(a is b for a, b in zip(tensors, encode_call(*live_call)[1], strict=True))
    assert matcher.miss_reason(*card_call, []) is None


def test_only_keywords_without_tensors_can_be_remembered() -> None:
    key = variant_key("Block", [], {STATE_KWARG: [["weight", torch.ones(2)]]})
    with pytest.raises(ValueError, match="holds tensors"):
        CallMatcher(key, remembered=(STATE_KWARG,))


def unaligned(shape: tuple[int, ...]) -> torch.Tensor:
    """A float32 tensor at storage offset 0 whose data is not 16-byte aligned."""
    numel = shape[0] * shape[1]
    buffer = bytearray(4 * (numel + 4))
    for shift in range(4):
        t = torch.frombuffer(buffer, dtype=torch.float32, count=numel, offset=4 * shift).view(shape)
        if t.data_ptr() % 16:
            return t
    raise AssertionError("no unaligned placement found")


def test_miss_names_the_first_field_that_differs() -> None:
    x = torch.randn(4, 8)
    matcher = CallMatcher(variant_key(OP, [x, -1, False], {}))
    found: list[torch.Tensor] = []
    assert matcher.miss_reason([x, -1, False], {}, found) is None and found == [x]
    cases = {
        "shape": torch.randn(4, 9),
        "stride": torch.randn(4, 16)[:, ::2],
        "dtype": x.double(),
        "alignment": unaligned((4, 8)),
        "device": x.to("meta"),
    }
    for reason, tensor in cases.items():
        assert matcher.miss_reason([tensor, -1, False], {}, []) == reason, reason
    # a view 4 floats into a buffer starts a 16-byte line as x does: the kernel cannot tell them apart
    assert matcher.miss_reason([torch.randn(36)[4:].view(4, 8), -1, False], {}, []) is None
    one_in, two_in = torch.randn(40)[1:33].view(4, 8), torch.randn(40)[2:34].view(4, 8)
    unaligned_matcher = CallMatcher(variant_key(OP, [one_in, -1, False], {}))
    assert unaligned_matcher.miss_reason([two_in, -1, False], {}, []) == "storage_offset"  # elsewhere in a line
    assert unaligned_matcher.miss_reason([torch.randn(40)[5:37].view(4, 8), -1, False], {}, []) is None
    assert matcher.miss_reason([x, 0, False], {}, []) == "args"
    assert matcher.miss_reason([x, -1], {}, []) == "args"
    assert matcher.miss_reason([x, -1, False], {"half_to_float": False}, []) == "args"
    assert matcher.miss_reason([x, -1, 0], {}, []) == "args"  # False and 0 are different arguments


def test_traced_matcher_leaves_offset_and_alignment_to_address_miss() -> None:
    x = torch.randn(4, 8)
    key = variant_key(OP, [x, -1, False], {})
    shifted = torch.randn(36)[1:33].view(4, 8)
    assert CallMatcher(key, traced=True).miss_reason([shifted, -1, False], {}, []) is None
    assert address_miss([shifted], key.tensors) == "alignment"
    assert address_miss([torch.randn(36)[4:].view(4, 8)], key.tensors) is None  # the same place in its line
    assert address_miss([unaligned((4, 8))], key.tensors) == "alignment"
    one_in = torch.randn(40)[1:33].view(4, 8)
    assert address_miss([torch.randn(40)[2:34].view(4, 8)], variant_key(OP, [one_in, -1, False], {}).tensors) == (
        "storage_offset")
    assert address_miss([x], key.tensors) is None
