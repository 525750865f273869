import torch

from capture_service.recorder import (
    EMPTY,
    FACTORY,
    IDENTITY_POOL,
    MUTATES,
    RANDOM,
    RETURNS_NO_TENSOR,
    VIEW,
    OperatorRecorder,
)
from capture_service.records import SamplePolicy, VariantRecord


def _record(fn, samples: int = 3, budget: int = 1 << 20) -> dict[str, list[VariantRecord]]:
    recorder = OperatorRecorder(SamplePolicy(samples, budget))
    with torch.inference_mode(), recorder:
        fn()
    by_op: dict[str, list[VariantRecord]] = {}
    for record in recorder.records.values():
        by_op.setdefault(record.op, []).append(record)
    return by_op


def test_tensor_methods_and_functions_are_grouped_by_exact_variant() -> None:
    x, y = torch.randn(4, 8), torch.randn(4, 8)

    def run() -> None:
        x.softmax(-1)
        torch.softmax(y, -1)
        torch.softmax(x.t(), -1)
        torch.softmax(x, 0)

    records = _record(run)["aten::softmax.int"]
    assert [r.call_count for r in records] == [2, 1, 1]
    assert records[0].key.tensors[0].shape == (4, 8) and records[1].key.tensors[0].stride == (1, 8)
    assert all(r.optimisable and not r.vendor_op for r in records)


def test_samples_hold_inputs_and_outputs_up_to_k() -> None:
    def run() -> None:
        for _ in range(5):
            torch.relu(torch.randn(3, 3) - 0.5)

    (relu,) = _record(run, samples=3)["aten::relu.default"]
    assert relu.call_count == 5 and len(relu.samples) == 3
    for sample in relu.samples:
        assert torch.equal(sample.outputs[0], sample.inputs[0].clamp_min(0))


def test_extra_samples_stop_at_the_budget() -> None:
    def run() -> None:
        for _ in range(4):
            torch.relu(torch.randn(64))

    (relu,) = _record(run, samples=4, budget=3 * 64 * 4 * 2)["aten::relu.default"]
    assert len(relu.samples) == 3


def test_not_optimisable_ops_carry_their_reason() -> None:
    x = torch.randn(4, 4)

    def run() -> None:
        x.view(16)
        torch.zeros(3)
        torch.randn(2)
        torch.nn.functional.dropout(x, 0.5, training=True)
        x.clone().add_(1)
        torch.add(x, 1, out=torch.empty(4, 4))
        torch.empty(0, 4).exp()
        x.clone().max().item()

    records = _record(run)
    assert records["aten::view.default"][0].reason == VIEW
    assert records["aten::zeros.default"][0].reason == FACTORY
    assert records["aten::randn.default"][0].reason == RANDOM
    assert records["aten::dropout.default"][0].reason == RANDOM
    add_ = records["aten::add_.Tensor"][0]
    assert add_.optimisable and add_.mutated_inputs == [0]  # in place, elementwise: see the tests below
    add_out = records["aten::add.out"][0]
    assert add_out.reason == MUTATES and add_out.mutated_inputs == [1]
    exp = records["aten::exp.default"][0]
    assert not exp.optimisable and exp.degenerate == EMPTY
    assert records["aten::item.default"][0].reason == RETURNS_NO_TENSOR
    assert records["aten::clone.default"][0].optimisable


def test_vendor_ops_stay_optimisable_but_flagged() -> None:
    a, b = torch.randn(4, 8), torch.randn(8, 2)
    records = _record(lambda: (a @ b, torch.nn.functional.linear(a, b.t())))
    assert records["aten::matmul.default"][0].vendor_op
    assert records["aten::linear.default"][0].vendor_op and records["aten::linear.default"][0].optimisable


def test_grad_mode_changes_the_ops_seen() -> None:
    x = torch.randn(2, 4)
    lin = torch.nn.Linear(4, 3)

    def ops(ctx) -> set[str]:
        recorder = OperatorRecorder(SamplePolicy(1, 1 << 20))
        with ctx, recorder:
            lin(x)
        return {r.op for r in recorder.records.values()}

    assert "aten::linear.default" in ops(torch.inference_mode())
    assert "aten::addmm.default" in ops(torch.enable_grad())


def test_the_bound_eager_call_reproduces_the_captured_output() -> None:
    x = torch.randn(2, 3, 5)
    (record,) = _record(lambda: torch.nn.functional.layer_norm(x, (5,)))["aten::layer_norm.default"]
    assert record.eager_call is not None
    with torch.inference_mode():
        again = record.eager_call(record.samples[0].inputs)()
    assert torch.allclose(again, record.samples[0].outputs[0])


def test_identity_adaptive_pool_is_flagged_degenerate() -> None:
    x = torch.randn(1, 2, 7, 7)

    def run() -> None:
        torch.nn.functional.adaptive_avg_pool2d(x, 7)
        torch.nn.functional.adaptive_avg_pool2d(x, 1)

    identity, real = _record(run)["aten::adaptive_avg_pool2d.default"]
    assert identity.degenerate == IDENTITY_POOL and identity.optimisable
    assert real.degenerate == ""


def test_training_batch_norm_is_recorded_as_mutating_its_running_stats() -> None:
    x, mean, var = torch.randn(8, 3) + 2.0, torch.zeros(3), torch.ones(3)

    def run() -> None:
        torch.nn.functional.batch_norm(x, mean, var, training=True)
        torch.nn.functional.batch_norm(x, mean.clone(), var.clone(), training=False)

    train, infer = _record(run)["aten::batch_norm.default"]
    assert not train.optimisable and train.reason == MUTATES and train.mutated_inputs == [1, 2]
    assert infer.optimisable and infer.mutated_inputs == []
    assert not torch.equal(mean, torch.zeros(3))  # the stats really did change


def test_native_multi_head_attention_is_a_vendor_op() -> None:
    attention = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    (record,) = _record(lambda: attention(x, x, x, need_weights=False))["aten::_native_multi_head_attention.default"]
    assert record.vendor_op and record.optimisable


def test_a_cat_that_skips_an_empty_part_is_a_card_and_other_empty_calls_are_not() -> None:
    x = torch.randn(3, 6)

    def run() -> None:
        torch.cat([torch.empty(0), x])  # the legacy 1-D [0] part eager skips
        torch.cat([x, torch.empty(3, 0)], 1)  # an empty part along the cat dim adds nothing
        torch.cat([torch.empty(0), torch.empty(0, 6)])  # nothing to write
        torch.empty(0, 4).add(1)

    cats = _record(run)["aten::cat.default"]
    legacy, along, nothing = cats
    assert legacy.optimisable and not legacy.degenerate
    assert [t.shape for t in legacy.key.tensors] == [(0,), (3, 6)]  # the empty part stays in the variant
    assert along.optimisable and not along.degenerate
    assert not nothing.optimisable and nothing.degenerate == EMPTY
    (add,) = _record(run)["aten::add.Tensor"]
    assert not add.optimisable and add.degenerate == EMPTY


def test_in_place_elementwise_ops_are_optimisable_cards_sampled_before_the_call() -> None:
    x, y, mask = torch.randn(4, 8), torch.randn(8), torch.randn(4, 8) > 0

    def run() -> None:
        for _ in range(3):
            a = x.clone()
            a.relu_()
            a.add_(y, alpha=2)
            a.mul_(0.5)
            a.masked_fill_(mask, -1.0)
            a.sigmoid_()

    records = _record(run)
    for op in ("aten::relu_.default", "aten::add_.Tensor", "aten::mul_.Tensor", "aten::masked_fill_.Scalar",
               "aten::sigmoid_.default"):
        (record,) = records[op]
        assert record.optimisable and record.mutated_inputs == [0], (op, record.reason)
        assert record.call_count == 3 and len(record.samples) == 3
    (relu,) = records["aten::relu_.default"]
    for sample in relu.samples:  # every sample holds the values before the call wrote them
        assert torch.equal(sample.inputs[0], x) and torch.equal(sample.outputs[0], x.clamp_min(0))
    (add_,) = records["aten::add_.Tensor"]
    assert all(torch.equal(s.outputs[0], s.inputs[0] + 2 * y) for s in add_.samples)


def test_mutations_a_kernel_could_not_serve_stay_unoptimisable() -> None:
    x = torch.randn(4, 8)

    def run() -> None:
        a = x.clone()
        a.add_(a)  # the written tensor is also the other operand
        b = x.clone()
        b[0].mul_(b[1])  # another view of the same storage
        c = x.clone()
        c[0].copy_(c[1])  # copy_ from another view of the buffer it writes
        x.clone().t().contiguous().exp_()  # served: a plain tensor
        torch.add(x, 1, out=torch.empty(4, 8))  # out=: writes an argument it does not read

    records = _record(run)
    (add_,) = records["aten::add_.Tensor"]
    assert not add_.optimisable and add_.reason == MUTATES
    (mul_,) = records["aten::mul_.Tensor"]
    assert not mul_.optimisable and mul_.reason == MUTATES
    (copy_,) = records["aten::copy_.default"]
    assert not copy_.optimisable and copy_.reason == MUTATES
    (add_out,) = records["aten::add.out"]
    assert not add_out.optimisable and add_out.reason == MUTATES
    (exp_,) = records["aten::exp_.default"]
    assert exp_.optimisable


def test_scatters_into_self_are_optimisable_cards_unless_a_source_shares_its_memory() -> None:
    """A mixture-of-experts layer adds each expert's rows back with ``index_add_``, a graph network
    pools messages with ``scatter_add_`` / ``scatter_reduce_``; a source that is a view of ``self`` is refused."""
    rows, index = torch.randn(3, 8), torch.tensor([4, 0, 4])

    def run() -> None:
        buffer = torch.zeros(9, 8)
        out = buffer[:5]
        out.index_add_(0, index, rows)
        out.scatter_add_(0, index.view(-1, 1).expand(3, 8), rows)
        out.scatter_reduce_(0, index.view(-1, 1).expand(3, 8), rows, "amax", include_self=False)
        out.scatter_(1, index.view(-1, 1), 1.0)
        # the source lies in the buffer it writes: refused (a view elsewhere in its 16-byte line, so its
        # key is not the first call's; a call of the same key that shares memory, the guard hands to eager)
        out.index_add_(0, index, buffer.view(-1)[41:65].view(3, 8))

    records = _record(run)
    served, refused = ([r for r in records["aten::index_add_.default"] if r.optimisable is ok] for ok in (True, False))
    assert len(served) == 1 and served[0].mutated_inputs == [0]
    assert [r.reason for r in refused] == [MUTATES]
    for op in ("aten::scatter_add_.default", "aten::scatter_reduce_.two", "aten::scatter_.value"):
        (record,) = records[op]
        assert record.optimisable and record.mutated_inputs == [0], (op, record.reason)


def test_copies_and_fills_into_a_view_with_gaps_are_optimisable_cards() -> None:
    """A KV cache's slot (``cache[:, :, pos] = k``) is written in place through a strided view: no two
    of its elements share an address, though torch's own overlap check gives up on its gaps."""
    k = torch.randn(2, 4, 8)

    def run() -> None:
        cache = torch.zeros(2, 4, 16, 8)
        cache[:, :, 3] = k
        cache[:, :, 5].fill_(0.5)
        cache[:, :, 7].zero_()
        cache[:, :, 2:3].copy_(cache[:, :, 1:2])  # the source is the same buffer: refused

    records = _record(run)
    copies = records["aten::copy_.default"]
    served = [r for r in copies if r.optimisable]
    assert len(served) == 1 and served[0].mutated_inputs == [0] and served[0].outputs[0].stride == [512, 128, 1]
    assert [r.reason for r in copies if not r.optimisable] == [MUTATES]
    for op in ("aten::fill_.Scalar", "aten::zero_.default"):
        (record,) = records[op]
        assert record.optimisable and record.mutated_inputs == [0], (op, record.reason)
