"""The Rust core and the pure-Python reference make identical choices, bit for bit."""

import json
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from search_core import SearchConfig, SearchError, SearchTree
from search_core.reference import ReferenceTree, SplitMix64

configs = st.builds(
    SearchConfig,
    seed=st.integers(0, 2**64 - 1),
    exploration=st.floats(0.0, 3.0),
    widen_k=st.floats(0.5, 6.0),
    widen_alpha=st.floats(0.0, 1.0),
    virtual_loss=st.floats(0.0, 3.0),
    max_weight=st.floats(0.0, 1.0),
)
latencies = st.floats(1e-3, 1e6, allow_nan=False)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("ask"), st.integers(0, 4)),
        st.tuples(st.just("add_child"), st.integers(0, 10**6)),
        st.tuples(st.just("release"), st.integers(0, 10**6)),
        st.tuples(st.just("tell"), st.integers(0, 10**6), latencies, st.one_of(st.none(), st.floats(0, 10))),
        st.tuples(st.just("fail"), st.integers(0, 10**6)),
        st.tuples(st.just("cancel"), st.integers(0, 10**6)),
    ),
    max_size=120,
)


def apply(tree: SearchTree | ReferenceTree, op: tuple, picks: list[int], pending: list[int]) -> object:
    """One operation; ids are chosen among the live picks and pending nodes by index."""
    kind = op[0]
    if kind == "ask":
        result = tree.ask(op[1])
        picks.extend(result)
        return result
    if kind in ("add_child", "release"):
        if not picks:
            return None
        parent = picks.pop(op[1] % len(picks))
        if kind == "release":
            return tree.release(parent)
        child = tree.add_child(parent)
        pending.append(child)
        return child
    if not pending:
        return None
    child = pending.pop(op[1] % len(pending))
    if kind == "tell":
        return tree.tell(child, True, op[2], op[3])
    if kind == "fail":
        return tree.tell(child, False, None)
    return tree.cancel(child)


@settings(max_examples=150, deadline=None)
@given(config=configs, reference_us=latencies, ops=operations)
def test_native_and_reference_agree_on_every_choice(config: SearchConfig, reference_us: float, ops: list) -> None:
    native, reference = SearchTree(config, reference_us), ReferenceTree(config, reference_us)
    state_native: tuple[list[int], list[int]] = ([], [])
    state_reference: tuple[list[int], list[int]] = ([], [])
    for op in ops:
        assert apply(native, op, *state_native) == apply(reference, op, *state_reference), op
    assert json.loads(native.snapshot()) == reference.snapshot_dict()
    assert native.best() == reference.best()
    for node_id in range(len(native)):
        assert native.node(node_id) == reference.node(node_id)
        assert native.ancestors(node_id) == reference.ancestors(node_id)
        assert native.best_descendant(node_id) == reference.best_descendant(node_id)
        assert native.failed_siblings(node_id) == reference.failed_siblings(node_id)


@settings(max_examples=40, deadline=None)
@given(config=configs, ops=operations, more=operations)
def test_a_snapshot_moves_between_the_two_implementations(config: SearchConfig, ops: list, more: list) -> None:
    native = SearchTree(config, 50.0)
    picks: list[int] = []
    pending: list[int] = []
    for op in ops:
        apply(native, op, picks, pending)
    reference = ReferenceTree.restore(native.snapshot())
    assert SearchTree.restore(reference.snapshot()).snapshot() == native.snapshot()
    ref_state = (list(picks), list(pending))
    for op in more:
        assert apply(native, op, picks, pending) == apply(reference, op, *ref_state)
    assert json.loads(native.snapshot()) == reference.snapshot_dict()


@given(config=configs, bad=st.sampled_from([0.0, -1.0, float("nan"), float("inf")]))
def test_both_reject_the_same_bad_results(config: SearchConfig, bad: float) -> None:
    for tree in (SearchTree(config, 10.0), ReferenceTree(config, 10.0)):
        child = tree.add_child(tree.ask(1)[0])
        bad_spread = bad if bad != 0.0 else -1.0
        calls: list[tuple[Callable[..., object], tuple[object, ...]]] = [
            (tree.tell, (child, True, bad)),
            (tree.tell, (child, True, None)),
            (tree.tell, (child, False, 3.0)),
            (tree.tell, (child, True, 3.0, bad_spread)),
            (tree.add_child, (child,)),
            (tree.node, (len(tree),)),
        ]
        errors = []
        for call, args in calls:
            try:
                call(*args)
            except SearchError as error:
                errors.append(type(error).__name__)
        assert errors == [
            "InvalidArgumentError",
            "InvalidArgumentError",
            "InvalidArgumentError",
            "InvalidArgumentError",
            "InvalidStateError",
            "UnknownNodeError",
        ]


def test_splitmix64_matches_the_published_sequence() -> None:
    rng = SplitMix64(0)
    assert [rng.next_u64(), rng.next_u64()] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]
