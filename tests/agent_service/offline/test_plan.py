"""How many threads a cpu kernel starts on: one for a small card, every core for a large one."""

from __future__ import annotations

import torch

from agent_service.offline.catalog import plan_for_card
from agent_service.offline.plan import CPU_SERIAL_BELOW, cpu_thread_choices
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import aten_card, spec

FOUR_CORES = DeviceInfo(backend="cpu", name="cpu", arch="cpu-x86_64", sm_count=4)


def test_a_small_card_starts_on_one_thread_and_a_large_one_on_every_core() -> None:
    small = [spec(torch.empty(CPU_SERIAL_BELOW - 1)), spec(torch.empty(8))]
    large = [spec(torch.empty(8)), spec(torch.empty(CPU_SERIAL_BELOW))]
    assert cpu_thread_choices(FOUR_CORES, small) == (1, 0, 2, 4)
    assert cpu_thread_choices(FOUR_CORES, large) == (0, 1, 2, 4)
    assert cpu_thread_choices(FOUR_CORES) == (0, 1, 2, 4)  # no tensors named: every core first


def test_each_families_default_follows_the_cards_size() -> None:
    """The default (first) knob set of an elementwise and a row family, small and large."""
    for op, args in ((torch.ops.aten.silu.default, lambda n: (torch.randn(n),)),
                     (torch.ops.aten._softmax.default, lambda n: (torch.randn(n // 256, 256), -1, False))):
        for numel, threads in ((4096, 1), (4 * CPU_SERIAL_BELOW, 0)):
            card, _ = aten_card(op, args(numel))
            space = plan_for_card(card, "cpu").knob_space("cpu", FOUR_CORES)
            assert space.default()["threads"] == threads, (card.op, numel)
