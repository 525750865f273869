"""The single-operator models: each captures its operator, and the written-out chains get a fused kernel."""

from __future__ import annotations

import pytest
import torch

from agent_service.offline.proposer import offline_refusal
from examples import single_op
from examples.single_op import OPS
from tests.examples.capture_helpers import capture_example


@pytest.mark.parametrize("name", ["swish", "gelu_tanh_written_out", "group_norm", "sum_dim", "avg_pool2d"])
def test_a_single_op_model_captures_its_operator_and_the_chains_are_fused(
        name: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EXAMPLE_VARIANT", name)
    monkeypatch.setenv("KF_EXAMPLE_MB", "0.25")
    cards = capture_example("single_op", tmp_path).cards
    (wrapper,) = [c for c in cards if c.op == "examples.single_op.SingleOp"]
    if name in ("swish", "gelu_tanh_written_out"):
        assert wrapper.module_graph is not None and len(wrapper.module_graph["nodes"]) >= 2
        assert offline_refusal(wrapper, "cpu") == ""
    else:
        assert offline_refusal(wrapper, "cpu") != ""
        assert any(c.kind == "aten" and offline_refusal(c, "cpu") == "" for c in cards)


@pytest.mark.parametrize("name", list(OPS))
def test_every_operator_builds(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EXAMPLE_VARIANT", name)
    model, x = single_op.get_model(), single_op.get_inputs()
    assert x.numel() * 4 >= 2**20 and torch.isfinite(model(x)).all()
