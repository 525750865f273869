import threading

import pytest

from search_core import (
    InvalidArgumentError,
    InvalidSnapshotError,
    InvalidStateError,
    SearchConfig,
    SearchTree,
    UnknownNodeError,
)


def grow(tree: SearchTree, latencies: list[float | None], parent: int = 0) -> list[int]:
    """Children of ``parent``, told the given latencies (None: failed)."""
    children = []
    for latency in latencies:
        child = tree.add_child(parent)
        tree.tell(child, latency is not None, latency)
        children.append(child)
    return children


def test_the_root_is_the_eager_baseline() -> None:
    tree = SearchTree(SearchConfig(), reference_latency_us=80.0)
    root = tree.node(0)
    assert (root.status, root.latency_us, root.parent, root.depth, root.visits) == ("root", 80.0, None, 0, 1)
    assert len(tree) == 1 and tree.best() is None and tree.ask(0) == []
    assert tree.ask(1) == [0]


def test_results_back_propagate_and_best_tracks_the_fastest() -> None:
    tree = SearchTree(SearchConfig(), 100.0)
    a, b, failed = grow(tree, [50.0, 120.0, None])
    (c,) = grow(tree, [40.0], parent=a)
    assert tree.best() == c
    assert tree.node(0).visits == 5 and tree.node(a).visits == 2
    assert tree.node(c).value == pytest.approx(0.916290731874155)  # ln(100 / 40)
    assert tree.best_descendant(0) == c and tree.best_descendant(a) == c and tree.best_descendant(b) is None
    assert tree.ancestors(c) == [a, 0] and tree.children(0) == [a, b, failed]
    assert tree.failed_siblings(a) == [failed] and tree.failed_siblings(failed) == []
    assert tree.node(failed).status == "failed" and not tree.node(failed).cancelled


def test_failed_and_pending_nodes_are_never_parents() -> None:
    tree = SearchTree(SearchConfig(exploration=2.0), 100.0)
    grow(tree, [None] * 6)
    pending = tree.add_child(0)
    for _ in range(50):
        assert tree.ask(1) == [0]
        tree.release(0)
    with pytest.raises(InvalidStateError, match="failed"):
        tree.add_child(1)
    with pytest.raises(InvalidStateError, match="pending"):
        tree.add_child(pending)


def test_progressive_widening_bounds_the_children_of_a_node() -> None:
    # Every revision is slower than eager, so revising the root always scores best: only the
    # widening limit k·N^α sends the search below it.
    tree = SearchTree(SearchConfig(widen_k=1.0, widen_alpha=0.5, exploration=0.0), 100.0)
    for _ in range(60):
        (parent,) = tree.ask(1)
        tree.tell(tree.add_child(parent), True, 200.0)
    root_children = len(tree.children(0))
    assert 3 < root_children <= tree.node(0).visits ** 0.5
    assert len(tree) == 61


def test_virtual_loss_spreads_parallel_asks() -> None:
    tree = SearchTree(SearchConfig(exploration=0.5, virtual_loss=3.0), 100.0)
    grow(tree, [90.0, 91.0, 92.0, 93.0])
    picks = tree.ask(4)
    assert len(set(picks)) > 1
    assert tree.node(0).in_flight == 4
    for parent in picks:
        tree.release(parent)
    assert tree.node(0).in_flight == 0
    with pytest.raises(InvalidStateError, match="no parent pick"):
        tree.release(0)


def test_in_flight_is_released_by_tell_and_cancel() -> None:
    tree = SearchTree(SearchConfig(), 100.0)
    child = tree.add_child(tree.ask(1)[0])
    other = tree.add_child(0)  # without an ask: the virtual loss is applied here
    assert tree.node(0).in_flight == 2 and tree.node(child).status == "pending"
    tree.cancel(child)
    view = tree.node(child)
    assert view.status == "failed" and view.cancelled and view.visits == 0
    tree.tell(other, True, 70.0, 1.5)
    assert tree.node(0).in_flight == 0 and tree.node(other).spread_us == 1.5
    with pytest.raises(InvalidStateError, match="only a pending"):
        tree.tell(other, True, 60.0)


def test_the_same_seed_gives_the_same_search() -> None:
    def run(seed: int) -> bytes:
        tree = SearchTree(SearchConfig(seed=seed, exploration=1.0), 100.0)
        for step in range(200):
            for parent in tree.ask(2):
                child = tree.add_child(parent)
                tree.tell(child, step % 7 != 0, None if step % 7 == 0 else 50.0 + (step * 37) % 40)
        return tree.snapshot()

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(InvalidArgumentError, match="reference_latency_us"):
        SearchTree(SearchConfig(), 0.0)
    tree = SearchTree(SearchConfig(), 10.0)
    with pytest.raises(InvalidArgumentError, match="n must be"):
        tree.ask(-1)
    with pytest.raises(UnknownNodeError, match="42"):
        tree.node(42)
    with pytest.raises(UnknownNodeError):
        tree.children(-1)


def test_a_damaged_snapshot_is_refused_with_its_reason() -> None:
    tree = SearchTree(SearchConfig(), 10.0)
    tree.tell(tree.add_child(0), True, 5.0)
    with pytest.raises(InvalidSnapshotError, match="invalid snapshot"):
        SearchTree.restore(b"{broken")
    bad = tree.snapshot().replace(b'"parent":[null,0]', b'"parent":[null,1]')
    assert bad != tree.snapshot()
    with pytest.raises(InvalidSnapshotError, match="node 1"):
        SearchTree.restore(bad)


@pytest.mark.parametrize(
    ("field", "value"),
    [("exploration", -1.0), ("widen_k", 0.0), ("widen_alpha", 1.5), ("virtual_loss", float("nan")), ("seed", -1)],
)
def test_config_rejects_values_outside_their_domain(field: str, value: float) -> None:
    with pytest.raises(InvalidArgumentError, match=field):
        SearchConfig(**{field: value})  # type: ignore[arg-type]


def test_threads_share_one_tree_safely() -> None:
    tree = SearchTree(SearchConfig(), 100.0)

    def worker(offset: int) -> None:
        for i in range(300):
            (parent,) = tree.ask(1)
            child = tree.add_child(parent)
            tree.tell(child, True, 50.0 + (i + offset) % 17)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tree) == 1 + 4 * 300 and tree.node(0).visits == 1 + 4 * 300 and tree.node(0).in_flight == 0


def test_threads_share_one_tree_while_large_asks_run_without_the_gil() -> None:
    # Large asks run without the GIL, so here calls really overlap and must wait for one another.
    tree = SearchTree(SearchConfig(), 100.0)
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            for i in range(40):
                picks = tree.ask(70) if i % 10 == 0 else tree.ask(1)
                for extra in picks[1:]:
                    tree.release(extra)
                child = tree.add_child(picks[0])
                tree.tell(child, True, 50.0 + (i + offset) % 17)
        except BaseException as error:  # reported below: a thread's exception is otherwise lost
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(tree) == 1 + 4 * 40 and tree.node(0).in_flight == 0
    assert SearchTree.restore(tree.snapshot()).snapshot() == tree.snapshot()
