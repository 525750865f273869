"""Capture each example once per test module, at its tiny size."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kforge_domain.card import CardSet
from tests.examples.capture_helpers import capture_example


@pytest.fixture(scope="module")
def tiny_size() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KF_EXAMPLE_SIZE", "tiny")
        yield


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory, tiny_size: None) -> Callable[[str], CardSet]:
    done: dict[str, CardSet] = {}

    def run(name: str) -> CardSet:
        if name not in done:
            done[name] = capture_example(name, tmp_path_factory.mktemp(name))
        return done[name]

    return run
