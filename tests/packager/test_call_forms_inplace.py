"""Call forms of in-place ops under an eager .cast, with the machinery of tests/packager/test_call_forms.py.

An in-place op's kernel reads and writes the mutated tensor, which the call returns itself: the
result must be the very tensor given (``is``), hold eager's values, and the kernel must run only
where that tensor is laid out as the card says and shares memory with no other argument.
``a.__iadd__(b)`` is what ``a += b`` calls. Each card's kernel is the offline proposer's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.packager.test_call_forms import (
    BOOL_X,
    BROADCAST_SHAPES,
    EXAMPLES_PER_CARD,
    INT_X,
    Call,
    OpSpec,
    Outcome,
    PackagedCard,
    Slot,
    TensorRecipe,
    X,
    _offline_source,
    assert_same,
    assert_same_outcome,
    aten,
    calls,
    capture_card,
    mismatches,
    package_cards,
    run,
)

SHAPES = ((33,), (2, 4, 33), (0, 33))
RELU_SPELLINGS = ("x.relu_()", "torch.relu_(x)", "F.relu(x, inplace=True)", "nn.ReLU(inplace=True)(x)", "F.relu_(x)",
                  "x.relu()")
ADD_SPELLINGS = ("a.__iadd__(b)", "a.add_(b)", "a.add_(b, alpha=2)", "torch.Tensor.add_(a, b)",
                 "a.add_(b, alpha=0.5)", "a.sub_(b)", "a + b")


COPY_SPELLINGS = ("x.copy_(y)", "torch.Tensor.copy_(x, y)", "x.copy_(y, non_blocking=True)", "x.__setitem__(..., y)",
                  "torch.ops.aten.copy_.default(x, y)", "x.copy_(y.t())", "x[:, :3].copy_(y[:, :3])",
                  "x.copy_(y.double())", "x.copy_(x)", "x.copy_(1.5)")
FILL_SPELLINGS = ("x.fill_(v)", "torch.fill_(x, v)", "torch.Tensor.fill_(x, v)", "nn.init.constant_(x, v)",
                  "x.fill_(torch.tensor(1e39))", "x.fill_(True)", "x.fill_(x[0, 0])", "x.zero_()")
ZERO_SPELLINGS = ("x.zero_()", "torch.zero_(x)", "nn.init.zeros_(x)", "x.fill_(0)", "x.mul_(0)")
#: In-place ops the gather engine serves, by the prefix of their spec's name; the rest are elementwise.
GATHER_FAMILIES = {"int_add": "integer_arithmetic_inplace", "masked_fill": "gather_select_inplace",
                   "copy": "gather_copy_inplace",
                   "fill_tensor": "gather_copy_inplace", "fill": "gather_fill_inplace", "zero": "gather_fill_inplace"}


def _inplace(name: str, op: object, names: tuple[str, ...], args: tuple[object, ...],
             spellings: tuple[str, ...]) -> OpSpec:
    slots = (Slot(SHAPES), Slot(BROADCAST_SHAPES, numbers=True))[:len(names)]
    family = next((f for prefix, f in GATHER_FAMILIES.items() if name.startswith(prefix)), "elementwise_inplace")
    return OpSpec(name, family, op, names, args, spellings, slots)  # type: ignore[arg-type]


SPECS = {spec.name: spec for spec in [
    _inplace("relu_", aten.relu_.default, ("x",), (X,), RELU_SPELLINGS),
    _inplace("add_", aten.add_.Tensor, ("a", "b"), (X, replace(X, seed=1)), ADD_SPELLINGS),
    _inplace("add_alpha", aten.add_.Tensor, ("a", "b"), (X, replace(X, seed=1)),
             ("a.add_(b, alpha=2)", *ADD_SPELLINGS)),
    _inplace("add_python_float", aten.add_.Tensor, ("a", "b"), (X, 1.5), ("a.__iadd__(b)", *ADD_SPELLINGS[1:])),
    _inplace("add_row", aten.add_.Tensor, ("a", "b"), (X, TensorRecipe((33,), seed=1)), ADD_SPELLINGS),
    _inplace("int_add_row", aten.add_.Tensor, ("a", "b"), (INT_X, TensorRecipe((33,), torch.int32, seed=1)),
             ("a.add_(b)", "a.__iadd__(b)", "a.add_(b, alpha=3)", "a.sub_(b)", "a.mul_(b)", "a.add_(b.float())",
              "a.add_(2**40)", "a + b")),
    _inplace("masked_fill_", aten.masked_fill_.Scalar, ("x", "m"), (X, BOOL_X),
             ("x.masked_fill_(m, -1e4)", "x.masked_fill_(m, 0.5)", "x.masked_fill_(~m, -1e4)", "x.masked_fill(m, -1e4)",
              "x.masked_fill_(m, torch.tensor(-1e4))", "x.masked_fill_(m, float('-inf'))")),
    _inplace("mul_bf16_python_float", aten.mul_.Tensor, ("a", "b"), (replace(X, dtype=torch.bfloat16), 0.5),
             ("a.mul_(b)", "a.__imul__(b)", "torch.Tensor.mul_(a, b)", "a.div_(b)", "a * b")),
    _inplace("copy_", aten.copy_.default, ("x", "y"), (X, replace(X, dtype=torch.bfloat16, seed=1)), COPY_SPELLINGS),
    # a KV cache's slot: a view with gaps, written where it lies
    _inplace("copy_into_sliced", aten.copy_.default, ("x", "y"), (replace(X, layout="sliced"), replace(X, seed=1)),
             COPY_SPELLINGS),
    _inplace("copy_row_to_int", aten.copy_.default, ("x", "y"), (replace(X, dtype=torch.int32), TensorRecipe((33,))),
             COPY_SPELLINGS),
    _inplace("fill_", aten.fill_.Scalar, ("x", "v"), (X, 0.5), FILL_SPELLINGS),
    _inplace("fill_tensor", aten.fill_.Tensor, ("x", "v"), (replace(X, dtype=torch.float16), TensorRecipe(())),
             FILL_SPELLINGS),
    _inplace("zero_", aten.zero_.default, ("x",), (replace(X, dtype=torch.bfloat16),), ZERO_SPELLINGS),
    OpSpec("index_add_", "index_add", aten.index_add_.default, ("x", "i", "s"),
           (TensorRecipe((6, 33)), TensorRecipe((9,), torch.int64, seed=1), TensorRecipe((9, 33), seed=2)),
           ("x.index_add_(0, i % 6, s)", "torch.Tensor.index_add_(x, 0, i % 6, s)",
            "x.index_add_(0, i % 6, s, alpha=2)", "x.index_add_(0, i, s)",
            "x.index_add_(0, i % 6, x[:1].expand(9, 33))", "x.index_add(0, i % 6, s)"),
           (Slot(SHAPES), Slot(((9,), (0,))), Slot(((9, 33), (9, 1))))),
]}
HITS = [("relu_", "x.relu_()"), ("relu_", "torch.relu_(x)"), ("relu_", "F.relu(x, inplace=True)"),
        ("relu_", "nn.ReLU(inplace=True)(x)"), ("add_", "a.add_(b)"), ("add_", "a.__iadd__(b)"),
        ("add_alpha", "a.add_(b, alpha=2)"), ("add_python_float", "a.__iadd__(b)"),
        ("add_python_float", "a.add_(b)"), ("add_row", "a.add_(b)"), ("add_row", "a.__iadd__(b)"),
        ("mul_bf16_python_float", "a.mul_(b)"), ("mul_bf16_python_float", "a.__imul__(b)"),
        ("masked_fill_", "x.masked_fill_(m, -1e4)"), ("copy_", "x.copy_(y)"), ("copy_", "torch.Tensor.copy_(x, y)"),
        ("copy_into_sliced", "x.copy_(y)"),
        ("copy_row_to_int", "x.copy_(y)"),
        ("fill_", "x.fill_(v)"), ("fill_", "nn.init.constant_(x, v)"), ("fill_tensor", "x.fill_(v)"),
        ("zero_", "x.zero_()"), ("zero_", "nn.init.zeros_(x)"), ("index_add_", "x.index_add_(0, i % 6, s)"),
        ("index_add_", "torch.Tensor.index_add_(x, 0, i % 6, s)")]


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, PackagedCard]]:
    """One .cast per card, its one kernel the offline proposal for it, built with g++."""
    workdir = tmp_path_factory.mktemp("call_forms_inplace")
    cards = {name: capture_card(spec) for name, spec in SPECS.items()}
    assert all(card.mutated_inputs == [0] for card in cards.values())
    sources = {name: _offline_source(SPECS[name], card) for name, card in cards.items()}
    result = package_cards(cards, sources, workdir)
    yield result
    for item in result.values():
        item.cast.close()


@pytest.mark.parametrize(("name", "spelling"), HITS)
def test_an_in_place_call_runs_its_kernel_and_returns_the_tensor_it_was_given(
        packaged: dict[str, PackagedCard], name: str, spelling: str) -> None:
    spec = SPECS[name]
    for inference in (False, True):  # a plain tensor, and an inference tensor inside inference mode
        args = tuple(replace(a, inference=inference) if isinstance(a, TensorRecipe) else a for a in spec.args)
        call = Call(spec, spelling, args, "inference", expects_hit=True)
        want, got = run(call, None), run(call, packaged[name].cast)
        assert_same_outcome(call, want, got)
        assert want.result is want.inputs[0] and got.result is got.inputs[0]


def test_the_native_front_serves_in_place_ops(packaged: dict[str, PackagedCard]) -> None:
    """The front writes the live tensor and returns it; a call whose written tensor shares memory with
    another (``a.add_(a)``) it leaves to the Python override, which counts why."""
    for item in packaged.values():
        with item.cast.applied_to():
            assert all(o.front is not None for o in item.cast._aten), item.card.op
    item = packaged["add_"]
    a = torch.randn(4, 33)
    with item.cast.applied_to():
        before = dict(item.cast.stats()[item.card.id])
        got = a.clone().add_(a.clone())
        same = a.clone()
        same.add_(same)
        stats = item.cast.stats()[item.card.id]
    assert torch.equal(got, a + a) and torch.equal(same, a + a)
    assert stats["hits"] == before["hits"] + 1 and stats["fallbacks"].get("shared_memory") == 1


def _miss(packaged: dict[str, PackagedCard], name: str, spelling: str, args: tuple[object, ...],
          grad_mode: str = "inference") -> tuple[Outcome, Outcome]:
    """Both runs of a call that must not run the card's kernel; they must agree."""
    call = Call(SPECS[name], spelling, args, grad_mode)
    want, got = run(call, None), run(call, packaged[name].cast)
    assert_same_outcome(call, want, got)
    assert got.hits == 0, f"{call!r} ran the kernel"
    return want, got


@pytest.mark.parametrize("layout", ["sliced", "transposed", "unaligned"])
def test_an_in_place_call_on_another_layout_misses(packaged: dict[str, PackagedCard], layout: str) -> None:
    """A view or a non-contiguous tensor of the card's shape: eager writes it, through the view."""
    shape = (33, 4) if layout == "transposed" else X.shape
    target = TensorRecipe(shape, layout=layout)
    _, got = _miss(packaged, "relu_", "x.relu_()", (target,))
    assert got.error is None and got.result is got.inputs[0]
    _miss(packaged, "add_", "a.add_(b)", (target, replace(X, seed=1)))


def test_an_in_place_call_on_a_view_further_into_a_buffer_runs_the_kernel_through_the_view(
        packaged: dict[str, PackagedCard]) -> None:
    """The card's layout 4 floats into a larger buffer starts a 16-byte line as the card's tensor did:
    the kernel writes the view through its data pointer, and eager's result comes back in it."""
    target = TensorRecipe(X.shape, layout="offset")
    calls = (("relu_", "x.relu_()", (target,)), ("add_", "a.add_(b)", (target, replace(X, seed=1))))
    for name, spelling, args in calls:
        call = Call(SPECS[name], spelling, args, "inference")
        want, got = run(call, None), run(call, packaged[name].cast)
        assert_same_outcome(call, want, got)
        assert got.hits == 1 and got.result is got.inputs[0], call


def test_an_in_place_call_whose_target_shares_memory_with_the_other_operand_falls_back(
        packaged: dict[str, PackagedCard]) -> None:
    """``a.add_(a)`` matches the card's layouts, but the kernel would read what it writes."""
    _, got = _miss(packaged, "add_", "a.add_(a)", (X, X))
    assert got.error is None
    assert packaged["add_"].cast.stats()[packaged["add_"].card.id]["fallbacks"] == {"shared_memory": 1}


@pytest.mark.parametrize("grad_mode", ["grad", "no_grad"])
def test_an_in_place_call_eager_refuses_raises_as_eager_does(packaged: dict[str, PackagedCard],
                                                              grad_mode: str) -> None:
    """Under grad mode a leaf requiring grad, outside inference mode an inference tensor: autograd
    refuses the call with eager's own message. The first before any kernel runs; the second after
    the op has written the tensor (eager's kernel too), when the version counter is bumped."""
    target = replace(X, grad=True) if grad_mode == "grad" else replace(X, inference=True)
    for name, spelling, args in (("relu_", "x.relu_()", (target,)), ("add_", "a.add_(b)", (target, X))):
        call = Call(SPECS[name], spelling, args, grad_mode)
        want, got = run(call, None), run(call, packaged[name].cast)
        assert want.error is not None and got.error is not None and str(got.error) == str(want.error)
        assert got.hits == (0 if grad_mode == "grad" else 1)
        assert_same(got.inputs, want.inputs, exact=got.hits == 0, where="inputs after the call")


def test_nan_and_inf_in_place_as_eager(packaged: dict[str, PackagedCard]) -> None:
    calls_ = [Call(spec, spec.spellings[0], tuple(replace(a, special=True) if j == i else a
                                                  for j, a in enumerate(spec.args)), "inference", expects_hit=True)
              for spec in SPECS.values() for i, arg in enumerate(spec.args) if isinstance(arg, TensorRecipe)]
    failures = mismatches(packaged, calls_)
    assert not failures, failures


def test_every_call_form_of_an_in_place_op_returns_what_eager_returns(packaged: dict[str, PackagedCard]) -> None:
    """Hypothesis draws a card and a call of its op: other spellings, shapes, dtypes, layouts
    (views, non-contiguous, expanded), Python numbers, inference tensors, tensors requiring grad."""

    @settings(max_examples=EXAMPLES_PER_CARD * len(SPECS), deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(data=st.data())
    def calls_match_eager(data: st.DataObject) -> None:
        spec = data.draw(st.sampled_from(list(SPECS.values())), label="card")
        item = packaged[spec.name]
        call = data.draw(calls(spec, item.card), label="call")
        assert_same_outcome(call, run(call, None), run(call, item.cast))

    calls_match_eager()
