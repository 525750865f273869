"""A run's configuration crosses the wire unchanged, and a bad one is refused with its reason."""

from __future__ import annotations

import pytest

from forge_service.config import DEFAULT_PATIENCE, RunConfig
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from servicekit.errors import InvalidArgument


@pytest.mark.parametrize(("policy", "patience"), [("mcts", DEFAULT_PATIENCE), ("greedy", 0), ("beam", 3)])
def test_the_search_policy_and_patience_survive_the_proto(policy: str, patience: int) -> None:
    config = RunConfig(model_spec="m.py", search_policy=policy, patience=patience)
    assert RunConfig.from_proto(config.to_proto()) == config


def test_a_config_from_an_older_client_searches_by_mcts_with_the_default_patience() -> None:
    config = RunConfig.from_proto(forge_pb2.RunConfig(model_spec="m.py"))
    assert (config.search_policy, config.patience) == ("mcts", DEFAULT_PATIENCE)


def test_an_unknown_policy_or_negative_patience_is_refused_by_name() -> None:
    with pytest.raises(InvalidArgument, match="search policy must be one of mcts, greedy, beam"):
        RunConfig.from_proto(forge_pb2.RunConfig(model_spec="m.py", search_policy="random"))
    with pytest.raises(InvalidArgument, match="patience"):
        RunConfig.from_proto(forge_pb2.RunConfig(model_spec="m.py", patience=-1))
