from __future__ import annotations

import torch

from gpu_sandbox_service.harness.tensors import (
    STATISTICS_ELEMENTS,
    allocate,
    assign,
    draw_like,
    poison,
    statistics_subset,
    storage_bytes,
)
from kforge_domain.card import TensorSpec


def test_allocation_follows_the_exact_layout() -> None:
    spec = TensorSpec(shape=[4, 3], stride=[1, 5], dtype="float16", storage_offset=2, aligned16=False)
    tensor = allocate(spec, "cpu")
    assert tensor.shape == (4, 3) and tensor.stride() == (1, 5) and tensor.storage_offset() == 2
    assert tensor.dtype == torch.float16


def test_broadcast_inputs_can_be_assigned() -> None:
    spec = TensorSpec(shape=[4, 3], stride=[0, 1], dtype="float32")
    tensor = allocate(spec, "cpu")
    row = torch.tensor([1.0, 2.0, 3.0])
    assign(tensor, row.expand(4, 3))
    assert torch.equal(tensor, row.expand(4, 3))


def test_fresh_draws_follow_the_sample_and_are_never_all_zero() -> None:
    generator = torch.Generator().manual_seed(1)
    sample = torch.randn(1000) * 5 + 10
    spec = TensorSpec(shape=[1000], stride=[1], dtype="float32")
    drawn = draw_like(spec, sample, generator)
    assert abs(float(drawn.mean()) - 10) < 1 and 3 < float(drawn.std()) < 7
    assert not torch.equal(drawn, sample)
    zeros = draw_like(spec, torch.zeros(1000), generator)
    assert bool((zeros != 0).any())
    indices = draw_like(TensorSpec(shape=[50], stride=[1], dtype="int64"), torch.tensor([3, 9]), generator)
    assert int(indices.min()) >= 3 and int(indices.max()) <= 9


def test_a_large_sample_is_described_by_an_even_subset_of_its_elements() -> None:
    sample = torch.cat([torch.full((STATISTICS_ELEMENTS,), -4.0), torch.full((2 * STATISTICS_ELEMENTS,), 8.0)])
    subset = statistics_subset(sample)
    assert subset.numel() <= STATISTICS_ELEMENTS
    assert abs(float(subset.mean()) - float(sample.mean())) < 0.01  # both halves, in proportion
    spec = TensorSpec(shape=list(sample.shape), stride=[1], dtype="bfloat16")
    drawn = draw_like(spec, sample, torch.Generator().manual_seed(3))
    assert drawn.dtype == torch.bfloat16 and drawn.shape == sample.shape
    assert abs(float(drawn.float().mean()) - 4.0) < 0.05 and 5 < float(drawn.float().std()) < 6.5


def test_poison_variants_differ_so_unwritten_elements_show() -> None:
    out = torch.empty(8)
    poison(out, 0)
    first = storage_bytes(out).clone()
    assert bool(out.isnan().all())
    poison(out, 1)
    assert not torch.equal(storage_bytes(out), first)
    ints = torch.empty(4, dtype=torch.int32)
    poison(ints, 0)
    assert int(ints[0]) != 0
