
import pytest

from search_core import InvalidArgumentError, SearchConfig, SearchTree


def test_alpha_is_fixed_unless_annealed() -> None:
    assert SearchConfig(widen_alpha=0.4).widen_alpha_after(10**6) == 0.4
    config = SearchConfig(widen_alpha=0.8, widen_alpha_end=0.2, widen_anneal_evaluations=100)
    assert [config.widen_alpha_after(n) for n in (0, 50, 100, 500)] == pytest.approx([0.8, 0.5, 0.2, 0.2])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"widen_alpha_end": 1.5, "widen_anneal_evaluations": 10}, "widen_alpha_end must be in"),
        ({"widen_alpha_end": float("nan"), "widen_anneal_evaluations": 10}, "widen_alpha_end must be in"),
        ({"widen_alpha_end": 0.5}, "widen_anneal_evaluations must be >= 1"),
        ({"widen_anneal_evaluations": 10}, "widen_anneal_evaluations must be 0 without widen_alpha_end"),
        ({"widen_alpha_end": 0.5, "widen_anneal_evaluations": -1}, "widen_anneal_evaluations must be an int"),
        ({"widen_alpha_end": 0.5, "widen_anneal_evaluations": 2**53 + 1}, "widen_anneal_evaluations must be an int"),
        ({"widen_alpha_end": 0.5, "widen_anneal_evaluations": 2.0}, "widen_anneal_evaluations must be an int"),
    ],
)
def test_annealing_settings_outside_their_domain_are_named(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        SearchConfig(**fields)  # type: ignore[arg-type]


def test_annealing_widens_as_evaluations_accumulate() -> None:
    # Every revision is slower than eager, so revising the root always scores best and only the
    # widening limit k·N^α sends the search below it. With α = 0 the root keeps one child; α
    # annealed from 0 to 1 over 30 evaluations lets it widen once they are done.
    def root_children(config: SearchConfig) -> list[int]:
        tree = SearchTree(config, 100.0)
        counts = []
        for _ in range(60):
            (parent,) = tree.ask(1)
            tree.tell(tree.add_child(parent), True, 200.0)
            counts.append(len(tree.children(0)))
        return counts

    fixed = root_children(SearchConfig(widen_k=1.0, widen_alpha=0.0, exploration=0.0))
    annealed = root_children(
        SearchConfig(widen_k=1.0, widen_alpha=0.0, widen_alpha_end=1.0, widen_anneal_evaluations=30, exploration=0.0)
    )
    assert fixed == [1] * 60
    assert annealed[0] == 1 and annealed[-1] > 10
    assert annealed == sorted(annealed)


def test_an_annealed_config_survives_snapshots() -> None:
    config = SearchConfig(seed=7, widen_alpha=0.6, widen_alpha_end=0.1, widen_anneal_evaluations=40)
    tree = SearchTree(config, 100.0)
    for step in range(80):
        (parent,) = tree.ask(1)
        tree.tell(tree.add_child(parent), True, 60.0 + step % 13)
    restored = SearchTree.restore(tree.snapshot())
    assert restored.config == config and restored.snapshot() == tree.snapshot()
    assert b"widen_alpha_end" in tree.snapshot()
    assert b"widen_alpha_end" not in SearchTree(SearchConfig(), 100.0).snapshot()  # unchanged format by default
