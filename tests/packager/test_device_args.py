"""A call naming another device than its tensors' goes to eager: keys record device types alone."""

from __future__ import annotations

import torch

from packager.device_args import names_a_device, names_another_device


def test_a_template_names_a_device_where_an_argument_is_one() -> None:
    assert names_a_device({"args": [{"tensor": 0}], "kwargs": {"device": {"device": "cuda"}, "copy": True}})
    assert names_a_device({"args": [{"tensor": 0}, {"device": "cpu"}], "kwargs": {}})
    assert not names_a_device({"args": [{"tensor": 0}, {"dtype": "bfloat16"}], "kwargs": {"copy": True}})
    assert not names_a_device({"unsupported": "an argument without an encoding"})


def test_another_index_of_the_same_device_type_is_another_device() -> None:
    cuda0, cuda1, cpu = torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cpu")
    assert names_another_device([], {"device": cuda1, "copy": True}, cuda0)
    assert names_another_device([cpu], {}, cuda0)
    assert not names_another_device([], {"device": cuda0}, cuda0)
    assert not names_another_device([torch.randn(2), torch.bfloat16], {"device": cpu}, cpu)
    assert not names_another_device([], {"copy": True}, cuda1)
