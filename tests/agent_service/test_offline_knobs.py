"""Knob spaces: the root is the default, revisions change knobs and never repeat a tried set."""

from __future__ import annotations

from agent_service.offline.knobs import KnobSpace, describe_change, knob_key, next_knobs

SPACE = KnobSpace({"threads": (256, 128, 512), "vector": (8, 1), "unroll": (2, 1)})


def test_root_is_the_default_and_revisions_change_one_knob() -> None:
    root = next_knobs(SPACE, None, [], seed=0)
    assert root == {"threads": 256, "vector": 8, "unroll": 2}
    child = next_knobs(SPACE, root, [root], seed=0)
    assert child is not None
    assert sum(child[k] != root[k] for k in root) == 1


def test_revisions_are_deterministic_and_depend_on_the_seed() -> None:
    root = SPACE.default()
    picks = {knob_key(next_knobs(SPACE, root, [root], seed=s) or {}) for s in range(20)}
    assert next_knobs(SPACE, root, [root], seed=3) == next_knobs(SPACE, root, [root], seed=3)
    assert len(picks) > 1


def test_walk_visits_every_set_once_then_reports_exhaustion() -> None:
    tried: list[dict[str, object]] = []
    parent = None
    while (knobs := next_knobs(SPACE, parent, tried, seed=1)) is not None:
        assert knobs not in tried
        tried.append(knobs)
        parent = knobs
    assert len(tried) == SPACE.size() == 12


def test_other_modes_are_tried_before_fine_knobs() -> None:
    space = KnobSpace({"mode": ("split", "resident", "block"), "threads": (256, 128, 512), "vector": (8, 1)})
    root = space.default()
    tried = [root]
    for seed in range(2):
        child = next_knobs(space, root, tried, seed=seed)
        assert child is not None and child["mode"] != "split" and child["threads"] == 256 and child["vector"] == 8
        tried.append(child)
    assert {k["mode"] for k in tried} == {"split", "resident", "block"}
    third = next_knobs(space, root, tried, seed=2)
    assert third is not None and third["mode"] == "split"  # modes exhausted: fine knobs next


def test_unknown_parent_values_fall_back_to_defaults() -> None:
    assert SPACE.normalise({"threads": 999, "other": 1}) == SPACE.default()
    assert describe_change({"threads": 256, "vector": 8}, {"threads": 512, "vector": 8}) == "threads 256→512"


def test_a_knob_its_mode_does_not_read_stays_at_its_default_and_is_never_varied() -> None:
    space = KnobSpace({"mode": ("split", "block"), "threads": (256, 512), "cache": (True, False)},
                      only_in={"cache": ("block",)})
    assert space.normalise({"mode": "split", "threads": 512, "cache": False}) == {
        "mode": "split", "threads": 512, "cache": True}
    assert list(space.neighbours(space.default(), 1)) == [{"mode": "block", "threads": 256, "cache": True},
                                                         {"mode": "split", "threads": 512, "cache": True}]
    tried: list[dict[str, object]] = []
    parent = None
    while (knobs := next_knobs(space, parent, tried, seed=4)) is not None:
        assert knobs == space.normalise(knobs) and knobs not in tried
        tried.append(knobs)
        parent = knobs
    assert len(tried) == 6  # split at two thread counts, block at two thread counts by two cache settings
