import torch

from capture_service.ops import (
    bound_arguments,
    is_identity_adaptive_pool,
    is_random_call,
    op_traits,
    overload_name,
    written_tensors,
)

aten = torch.ops.aten


def test_overload_names_are_qualified() -> None:
    assert overload_name(aten._softmax.default) == "aten::_softmax.default"
    assert overload_name(aten.add.Tensor) == "aten::add.Tensor"


def test_vendor_pointwise_and_norm_traits() -> None:
    assert op_traits(aten.addmm.default).vendor and op_traits(aten.convolution.default).vendor
    assert op_traits(aten.scaled_dot_product_attention.default).vendor
    assert not op_traits(aten.mul.Tensor).vendor and op_traits(aten.mul.Tensor).elementwise_or_norm
    assert op_traits(aten.native_group_norm.default).elementwise_or_norm
    assert not op_traits(aten.embedding.default).elementwise_or_norm


def test_randomness_depends_on_the_call() -> None:
    x = torch.randn(4)
    dropout = op_traits(aten.dropout.default)
    assert is_random_call(dropout, bound_arguments(aten.dropout.default, [x, 0.1, True], {}))
    assert not is_random_call(dropout, bound_arguments(aten.dropout.default, [x, 0.1, False], {}))
    assert not is_random_call(dropout, bound_arguments(aten.dropout.default, [x, 0.0, True], {}))
    sdpa = aten.scaled_dot_product_attention.default
    assert not is_random_call(op_traits(sdpa), bound_arguments(sdpa, [x, x, x], {}))
    assert is_random_call(op_traits(aten.randn.default), {"size": [3]})


def test_written_arguments_of_inplace_and_out_overloads() -> None:
    x, out = torch.randn(3), torch.empty(3)
    add_ = aten.add_.Tensor
    assert written_tensors(op_traits(add_), bound_arguments(add_, [x, x], {})) == [x]
    add_out = aten.add.out
    found = written_tensors(op_traits(add_out), bound_arguments(add_out, [x, x], {"out": out}))
    assert len(found) == 1 and found[0] is out
    assert written_tensors(op_traits(aten.add.Tensor), bound_arguments(aten.add.Tensor, [x, x], {})) == []


def test_identity_adaptive_pool() -> None:
    pool = aten.adaptive_avg_pool2d.default
    x = torch.randn(1, 2, 7, 7)
    assert is_identity_adaptive_pool(op_traits(pool), bound_arguments(pool, [x, [7, 7]], {}))
    assert not is_identity_adaptive_pool(op_traits(pool), bound_arguments(pool, [x, [1, 1]], {}))


def test_training_batch_norm_writes_its_running_stats() -> None:
    x, mean, var = torch.randn(4, 3), torch.zeros(3), torch.ones(3)
    bn = aten.batch_norm.default

    def written(training: bool, stats: bool = True) -> list[torch.Tensor]:
        running = [mean, var] if stats else [None, None]
        args = [x, None, None, *running, training, 0.1, 1e-5, False]
        return written_tensors(op_traits(bn), bound_arguments(bn, args, {}))

    found = written(True)
    assert len(found) == 2 and found[0] is mean and found[1] is var
    assert written(False) == [] and written(True, stats=False) == []
    instance = aten.instance_norm.default
    args = [x.reshape(2, 3, 2), None, None, mean, var, True, 0.1, 1e-5, False]
    assert len(written_tensors(op_traits(instance), bound_arguments(instance, args, {}))) == 2
    args[5] = False
    assert written_tensors(op_traits(instance), bound_arguments(instance, args, {})) == []


def test_attention_and_low_precision_matmuls_are_vendor_ops() -> None:
    for op in (aten._native_multi_head_attention.default, aten._transformer_encoder_layer_fwd.default,
               aten._scaled_mm.default, aten._int_mm.default, aten._convolution_mode.default,
               aten.cudnn_convolution_relu.default, aten.addr.default):
        assert op_traits(op).vendor, op


def test_linear_solvers_are_vendor_ops() -> None:
    """A triangular solve is a LAPACK / cuBLAS trsm call, left to the library as a matmul is."""
    for op in (aten.linalg_solve_triangular.default, aten.triangular_solve.default, aten.linalg_solve.default,
               aten.cholesky_solve.default):
        assert op_traits(op).vendor, op
