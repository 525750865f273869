"""The Rust core and the pure-Python reference make identical choices, bit for bit."""

import json
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from search_core import SearchConfig, SearchError, SearchTree
from search_core.reference import ReferenceTree, SplitMix64

config_fields = dict(
    seed=st.integers(0, 2**64 - 1),
    exploration=st.floats(0.0, 3.0),
    widen_k=st.floats(0.5, 6.0),
    widen_alpha=st.floats(0.0, 1.0),
    virtual_loss=st.floats(0.0, 3.0),
    max_weight=st.floats(0.0, 1.0),
)
fixed_alpha = st.builds(SearchConfig, **config_fields)
annealed_alpha = st.builds(
    SearchConfig, **config_fields,
    widen_alpha_end=st.floats(0.0, 1.0),
    widen_anneal_evaluations=st.integers(1, 60),
)
configs = st.one_of(fixed_alpha, annealed_alpha)
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


def long_run(tree: SearchTree | ReferenceTree, seed: int, operations: int, grid_us: float = 0.0) -> list[object]:
    """Many mixed operations. A revision is a little faster or slower than its parent, so the
    tree grows deep; rare outliers set new best and worst rewards late, which changes the
    normalisation every cached selection term depends on. With ``grid_us`` latencies are
    rounded to its multiples, so equal scores (ties broken by the PRNG) are common."""
    rng = random.Random(seed)
    outcomes: list[object] = []
    picks: list[int] = []
    pending: list[tuple[int, float]] = []
    for _ in range(operations):
        roll = rng.random()
        if not picks or roll < 0.3:
            result = tree.ask(rng.randint(1, 3))
            picks.extend(result)
            outcomes.append(result)
        elif roll < 0.35:
            outcomes.append(tree.release(picks.pop(rng.randrange(len(picks)))))
        elif roll < 0.65 or not pending:
            parent = picks.pop(0)
            child = tree.add_child(parent)
            pending.append((child, tree.node(parent).latency_us or 0.0))
            outcomes.append(child)
        else:
            child, parent_latency = pending.pop(rng.randrange(len(pending)))
            outcome = rng.random()
            if outcome < 0.15:
                tree.tell(child, False, None)
            elif outcome < 0.2:
                tree.cancel(child)
            else:
                outlier = rng.choice([0.2, 8.0]) if rng.random() < 0.01 else 1.0
                latency = parent_latency * rng.uniform(0.85, 1.15) * outlier
                if grid_us:
                    latency = max(grid_us, round(latency / grid_us) * grid_us)
                tree.tell(child, True, latency)
    return outcomes


@pytest.mark.parametrize(
    "config",
    [
        SearchConfig(seed=1),
        SearchConfig(seed=2, exploration=0.3, virtual_loss=2.0, max_weight=0.5, widen_k=1.0, widen_alpha=0.2),
        SearchConfig(seed=3, widen_k=2.0, widen_alpha=0.8, widen_alpha_end=0.1, widen_anneal_evaluations=1000),
    ],
)
def test_long_searches_make_identical_choices(config: SearchConfig) -> None:
    """Thousands of operations: deep trees where cached selection terms are reused and refreshed."""
    native, reference = SearchTree(config, 50.0), ReferenceTree(config, 50.0)
    assert long_run(native, config.seed, 6000) == long_run(reference, config.seed, 6000)
    assert json.loads(native.snapshot()) == reference.snapshot_dict()
    # a restored tree (its selection terms rebuilt from the snapshot) keeps choosing the same
    restored = SearchTree.restore(native.snapshot())
    assert long_run(restored, 99, 2000) == long_run(reference, 99, 2000)
    assert json.loads(restored.snapshot()) == reference.snapshot_dict()


def test_long_searches_with_many_ties_make_identical_choices() -> None:
    """Few distinct latencies make exact ties common; a heavy virtual loss makes a node's
    effective visits go down as well as up between selections."""
    config = SearchConfig(seed=4, exploration=0.2, widen_k=1.0, widen_alpha=0.5, virtual_loss=3.0)
    native, reference = SearchTree(config, 50.0), ReferenceTree(config, 50.0)
    assert long_run(native, 4, 6000, grid_us=5.0) == long_run(reference, 4, 6000, grid_us=5.0)
    assert json.loads(native.snapshot()) == reference.snapshot_dict()


def test_deep_searches_make_identical_choices() -> None:
    """Results that keep improving slowly make a chain dozens of levels deep, where selection
    reuses cached terms at every level it passes through."""
    config = SearchConfig(seed=5)
    native, reference = SearchTree(config, 100.0), ReferenceTree(config, 100.0)
    deepest = 0
    for step in range(1500):
        mixed = (step * 2654435761) % 1000
        latency = None if mixed < 150 else 20.0 + mixed / 10.0
        choices = []
        for tree in (native, reference):
            (parent,) = tree.ask(1)
            child = tree.add_child(parent)
            tree.tell(child, latency is not None, latency)
            choices.append(parent)
        assert choices[0] == choices[1], step
        deepest = max(deepest, native.node(choices[0]).depth)
    assert deepest > 30
    assert json.loads(native.snapshot()) == reference.snapshot_dict()
