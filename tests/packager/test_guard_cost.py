"""What the builder charges per call for the guarded dispatch."""

from __future__ import annotations

import torch

from packager.guard_cost import guard_cost_us, native_guard_cost_us, native_module_cost_us
from packager.native.build import ENABLE_ENV
from packager.synthetic import allocated_outputs
from tests.agent_service.agent_cards import aten_card
from tests.packager.conftest import SmallNet, module_card


def _group_norm_card(device: str) -> dict:
    x = torch.randn(1, 64, 512, 512)
    card, _ = aten_card(torch.ops.aten.group_norm.default, [x, 32, torch.ones(64), torch.zeros(64), 1e-6])
    data = card.model_dump()
    data["device"] = device
    return data


def test_a_cuda_cards_outputs_are_measured_as_allocations_not_as_fresh_cpu_pages() -> None:
    on_cuda, on_cpu = _group_norm_card("cuda"), _group_norm_card("cpu")
    (stand_in,) = allocated_outputs(on_cuda)
    assert stand_in["shape"] == [1, 1, 1, 1] and stand_in["dtype"] == on_cuda["outputs"][0]["dtype"]
    assert allocated_outputs(on_cpu) == on_cpu["outputs"]  # 64 MiB on the CPU is what the runtime allocates there
    assert 0 < guard_cost_us(on_cuda) < 1000


def test_an_aten_card_the_native_front_serves_is_charged_its_hit(monkeypatch) -> None:
    card = aten_card(torch.ops.aten.relu.default, [torch.randn(64, 256)])[0].model_dump()
    native = native_guard_cost_us(card)
    assert native is not None and 0 < native < 1000
    monkeypatch.setenv(ENABLE_ENV, "0")
    assert native_guard_cost_us(card) is None  # no front here: the Python path is what runs, and is charged
    assert 0 < guard_cost_us(card) < 1000


def test_a_card_with_a_python_number_in_a_tensor_slot_is_charged_the_fronts_hit() -> None:
    x = torch.randn(64, 256)
    for number in (2, 1e-5, True):
        card = aten_card(torch.ops.aten.mul.Tensor, [x, number])[0].model_dump()
        assert native_guard_cost_us(card) is not None, number  # what guard_cost_us charges then
    zero_dim = aten_card(torch.ops.aten.mul.Tensor, [x, torch.tensor(2.0)])[0].model_dump()
    assert native_guard_cost_us(zero_dim) is not None  # a real 0-dim tensor is one of the card's tensors


def test_an_index_card_is_charged_the_native_front() -> None:
    """``x[idx]`` passes a list of tensors and Nones, which the front matches in C++."""
    x, index = torch.randn(4, 8), torch.tensor([2, 0])
    card = aten_card(torch.ops.aten.index.Tensor, [x, [None, index]])[0].model_dump()
    cost = native_guard_cost_us(card)
    assert cost is not None and 0 < cost < 1000


def test_a_card_the_front_never_serves_is_charged_the_python_path() -> None:
    """A call naming a device keeps its op on the Python override at run time
    (packager.aten_dispatch.python_only): that is the path charged. An in-place call is the front's."""
    x = torch.randn(4, 8)
    copy = aten_card(torch.ops.aten._to_copy.default, [x], {"device": torch.device("cpu")})[0].model_dump()
    assert native_guard_cost_us(copy) is None
    assert 0 < guard_cost_us(copy) < 1000
    in_place = aten_card(torch.ops.aten.relu_.default, [x.clone()])[0].model_dump()
    assert in_place["mutated_inputs"]
    cost = native_guard_cost_us(in_place)
    assert cost is not None and 0 < cost < 1000


def test_a_module_card_the_native_front_serves_is_charged_its_hit(monkeypatch) -> None:
    net = SmallNet().eval()
    card = module_card(net.block1, torch.randn(4, 8)).model_dump()
    native = native_module_cost_us(card)
    assert native is not None and 0 < native < 1000
    assert native_guard_cost_us(card) is None  # the aten front serves aten cards only
    monkeypatch.setenv(ENABLE_ENV, "0")
    assert native_module_cost_us(card) is None  # the Python path is what runs, and is charged
    assert 0 < guard_cost_us(card) < 1000


def test_a_module_call_with_keywords_is_charged_the_python_path() -> None:
    net = SmallNet().eval()
    x = torch.randn(4, 8)
    card = module_card(net.block1, x).model_dump()
    template = card["key"]["template"]
    template["kwargs"]["x"], template["args"] = template["args"][0], []
    assert native_module_cost_us(card) is None
    assert 0 < guard_cost_us(card) < 1000
