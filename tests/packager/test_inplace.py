"""Which layouts an in-place kernel may write in parallel: no two elements at one address."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from packager.inplace import overlaps_itself


@pytest.mark.parametrize(("view", "overlaps"), [
    (lambda t: t, False),
    (lambda t: t[:, :, 3], False),  # a KV cache's slot: gaps, no overlap
    (lambda t: t.transpose(0, 2)[::2], False),
    (lambda t: t[:, :1].expand(2, 5, 4, 3), True),  # a broadcast dim
    (lambda t: t.flatten().as_strided((4, 4), (1, 1)), True),  # sliding windows
    (lambda t: t.flatten().as_strided((3, 4), (3, 1)), True),  # rows longer than their stride
    (lambda t: t.flatten().as_strided((3, 2), (4, 2)), False),
    (lambda t: t.flatten()[:0].view(0, 3), False),
])
def test_a_layout_overlaps_itself_only_where_two_elements_share_an_address(
        view: Callable[[torch.Tensor], torch.Tensor], overlaps: bool) -> None:
    t = view(torch.empty(2, 5, 4, 3))
    assert overlaps_itself(t.shape, t.stride()) is overlaps
    if not overlaps:  # torch agrees wherever it can tell
        assert torch._debug_has_internal_overlap(t) in (0, 2)
