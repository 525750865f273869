from __future__ import annotations

import pytest
import torch

from examples.paper.settings import (
    ExampleSettingError,
    example_device,
    example_size,
    example_variant,
    seeded_build,
)


def test_defaults_are_tiny_first_variant_and_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KF_EXAMPLE_SIZE", "KF_EXAMPLE_VARIANT", "KF_EXAMPLE_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    assert example_size() == "tiny"
    assert example_variant(("prefill", "decode")) == "prefill"
    assert example_device() == torch.device("cpu")


def test_values_are_read_case_insensitively(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EXAMPLE_SIZE", "GPU")
    monkeypatch.setenv("KF_EXAMPLE_VARIANT", " Decode ")
    assert example_size() == "gpu"
    assert example_variant(("prefill", "decode")) == "decode"


@pytest.mark.parametrize(
    ("env", "value", "read", "named"),
    [
        ("KF_EXAMPLE_SIZE", "huge", example_size, "KF_EXAMPLE_SIZE='huge' is not one of tiny, gpu"),
        ("KF_EXAMPLE_VARIANT", "train", lambda: example_variant(("prefill", "decode")), "prefill, decode"),
        ("KF_EXAMPLE_DEVICE", "abacus", example_device, "is not a torch device"),
    ],
)
def test_bad_values_name_the_knob_and_the_choices(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, read: object, named: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ExampleSettingError, match=named):
        read()  # type: ignore[operator]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_cuda_without_a_gpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EXAMPLE_DEVICE", "cuda")
    with pytest.raises(ExampleSettingError, match="CUDA is not available"):
        example_device()


def test_seeded_build_is_reproducible_and_restores_global_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KF_EXAMPLE_DEVICE", raising=False)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    with seeded_build(torch.bfloat16):
        first = torch.nn.Linear(4, 4).weight.detach().clone()
        assert torch.get_default_dtype() == torch.bfloat16
    assert torch.get_default_dtype() == torch.float32
    assert torch.equal(torch.rand(3), expected_next)
    with seeded_build(torch.bfloat16):
        second = torch.nn.Linear(4, 4).weight.detach().clone()
    assert first.dtype == torch.bfloat16
    assert torch.equal(first, second)
