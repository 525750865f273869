"""Iteration layouts: how a kernel walks a tensor, derived once from the card's exact strides."""

from __future__ import annotations

import math
from collections.abc import Sequence

from agent_service.offline.call import UnsupportedCard
from kforge_domain.card import TensorSpec


def row_major_strides(shape: Sequence[int]) -> list[int]:
    """The strides of a contiguous tensor of ``shape``, in elements."""
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def is_contiguous(spec: TensorSpec) -> bool:
    """Row-major contiguous (size-1 dims may carry any stride)."""
    expected = 1
    for size, stride in zip(reversed(spec.shape), reversed(spec.stride), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def broadcast_strides(spec: TensorSpec, out_shape: Sequence[int]) -> list[int]:
    """The strides of ``spec`` viewed with ``out_shape`` under broadcasting (0 where expanded)."""
    if len(spec.shape) > len(out_shape):
        raise UnsupportedCard(f"operand of rank {len(spec.shape)} does not broadcast to {list(out_shape)}")
    pad = len(out_shape) - len(spec.shape)
    strides = [0] * pad
    for size, stride, out_size in zip(spec.shape, spec.stride, out_shape[pad:], strict=True):
        if size == out_size:
            strides.append(stride if size != 1 else 0)
        elif size == 1:
            strides.append(0)
        else:
            raise UnsupportedCard(f"operand shape {spec.shape} does not broadcast to {list(out_shape)}")
    return strides


def is_dense(spec: TensorSpec) -> bool:
    """Non-overlapping and dense (a permutation of a contiguous layout): safe to write in parallel."""
    dims = sorted((s, n) for n, s in zip(spec.shape, spec.stride, strict=True) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def storage_order_rows(x: TensorSpec, same_layout: Sequence[TensorSpec]) -> tuple[int, int] | None:
    """``(rows, length)`` when rows over ``x``'s last dim may be walked in storage order, else None.

    That holds when ``x`` is dense with its last dim innermost (stride 1), and every tensor
    written or read per element has exactly ``x``'s shape and strides: row ``r`` is then the
    storage run ``[r * length, (r + 1) * length)`` of each, whatever the logical order of rows.
    """
    if not x.shape or (x.shape[-1] != 1 and x.stride[-1] != 1) or not is_dense(x) or min(x.stride, default=0) < 0:
        return None
    if any(s.shape != x.shape or s.stride != x.stride for s in same_layout):
        return None
    length = x.shape[-1]
    return (x.numel // length if length else 0), length


def coalesce(
    shape: Sequence[int], out_strides: Sequence[int], operand_strides: Sequence[Sequence[int]]
) -> tuple[list[int], list[int], list[list[int]]]:
    """Drop size-1 dims, order dims by the output's strides and merge dims every tensor walks jointly.

    Returns ``(shape, out_strides, operand_strides)`` with the innermost (fastest) dim last; a
    channels-last elementwise op over channels-last tensors becomes one flat dim.
    """
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    dims.sort(key=lambda d: -out_strides[d])
    new_shape: list[int] = []
    new_out: list[int] = []
    new_ops: list[list[int]] = [[] for _ in operand_strides]
    for d in dims:
        size = shape[d]
        if new_shape and new_out[-1] == out_strides[d] * size and all(
            ops[-1] == strides[d] * size for ops, strides in zip(new_ops, operand_strides, strict=True)
        ):
            new_shape[-1] *= size
            new_out[-1] = out_strides[d]
            for ops, strides in zip(new_ops, operand_strides, strict=True):
                ops[-1] = strides[d]
            continue
        new_shape.append(size)
        new_out.append(out_strides[d])
        for ops, strides in zip(new_ops, operand_strides, strict=True):
            ops.append(strides[d])
    if not new_shape:
        return [1], [1], [[0] for _ in operand_strides]
    return new_shape, new_out, new_ops


def row_layout(spec: TensorSpec, dims: Sequence[int]) -> tuple[int, int, int]:
    """``(outer, length, inner)`` of reducing a contiguous tensor over the adjacent ``dims``.

    Element ``j`` of row ``r`` sits at ``(r // inner) * length * inner + j * inner + r % inner``.
    """
    ndim = len(spec.shape)
    norm = sorted({d % ndim for d in dims}) if ndim else []
    if not is_contiguous(spec):
        raise UnsupportedCard(f"input layout shape={spec.shape} stride={spec.stride} is not contiguous")
    if norm and norm != list(range(norm[0], norm[-1] + 1)):
        raise UnsupportedCard(f"reduced dims {list(dims)} are not adjacent")
    if not norm:
        norm = list(range(ndim))
    outer = inner = length = 1
    for d, size in enumerate(spec.shape):
        if d < norm[0]:
            outer *= size
        elif d > norm[-1]:
            inner *= size
        else:
            length *= size
    return outer, length, inner


def dense_row_layout(spec: TensorSpec, dims: Sequence[int], kept_any_order: bool = False) -> tuple[int, int, int]:
    """:func:`row_layout` extended to dense permuted tensors (channels-last, transposed views).

    Rows are then walked over storage: the reduced dims must lie next to each other in storage and
    in their logical order, and the kept dims in their logical order too, so that element ``j`` of
    row ``r`` is at ``(r // inner) * length * inner + j * inner + r % inner`` in storage and row ``r``
    is the ``r``-th row in logical order (a contiguous row output lines up with it). A channels-last
    ``[N, C, H, W]`` pooled over ``H, W`` is ``(N, H*W, C)``. A layout that breaks either order (a
    channels-last group norm, whose groups are channel blocks) is refused; with ``kept_any_order``
    the kept dims may come in any order (rows are then in storage order: see :func:`storage_rows`).
    """
    if is_contiguous(spec):
        return row_layout(spec, dims)
    ndim = len(spec.shape)
    if not is_dense(spec) or min(spec.stride, default=0) < 0:
        raise UnsupportedCard(f"input layout shape={spec.shape} stride={spec.stride} is neither contiguous nor dense")
    reduced_dims = {d % ndim for d in dims} if dims else set(range(ndim))
    live = [d for d in range(ndim) if spec.shape[d] != 1]
    order = sorted(live, key=lambda d: -spec.stride[d])  # outermost first
    reduced = [d for d in order if d in reduced_dims]
    kept = [d for d in order if d not in reduced_dims]
    if reduced != sorted(reduced) or (kept != sorted(kept) and not kept_any_order):
        raise UnsupportedCard(f"layout stride={spec.stride} walks dims {order} out of their logical order")
    first = order.index(reduced[0]) if reduced else len(order)
    if order[first:first + len(reduced)] != reduced:
        raise UnsupportedCard(f"reduced dims {sorted(reduced_dims)} are not next to each other in storage")
    outer = math.prod(spec.shape[d] for d in order[:first])
    length = math.prod(spec.shape[d] for d in reduced)
    inner = math.prod(spec.shape[d] for d in order[first + len(reduced):])
    return outer, length, inner


def strided_outer_layout(spec: TensorSpec, dims: Sequence[int]) -> tuple[tuple[tuple[int, int, int], ...], int, int]:
    """``(outer_terms, length, inner)`` of reducing a tensor whose reduced dims and the dims after them
    form a contiguous block and whose leading dims step through storage at any positive strides (a
    slice such as ``x[:, 1:]``).

    Element ``j`` of row ``r`` sits at ``sum(((r // inner) // divisor) % size * stride) + j * inner
    + r % inner`` over the ``(divisor, size, stride)`` outer terms, one per leading dim; rows are in
    logical order.
    """
    ndim = len(spec.shape)
    norm = sorted({d % ndim for d in dims}) if dims else list(range(ndim))
    if not norm or norm != list(range(norm[0], norm[-1] + 1)):
        raise UnsupportedCard(f"reduced dims {list(dims)} are not adjacent")
    expected = 1
    for d in range(ndim - 1, norm[0] - 1, -1):
        if spec.shape[d] != 1 and spec.stride[d] != expected:
            raise UnsupportedCard(f"layout stride={spec.stride}: the reduced dims and those after them are not "
                                  "one contiguous block")
        expected *= spec.shape[d]
    outer_dims = [d for d in range(norm[0]) if spec.shape[d] != 1]
    if any(spec.stride[d] <= 0 for d in outer_dims):
        raise UnsupportedCard(f"layout stride={spec.stride} steps back or in place over a leading dim")
    terms, divisor = [], 1
    for d in reversed(outer_dims):
        terms.append((divisor, spec.shape[d], spec.stride[d]))
        divisor *= spec.shape[d]
    length = math.prod(spec.shape[d] for d in norm)
    inner = math.prod(spec.shape[norm[-1] + 1:])
    return tuple(reversed(terms)), length, inner


def storage_rows(spec: TensorSpec, dims: Sequence[int], out: TensorSpec) -> tuple[tuple[int, int, int], ...]:
    """Where each row of a dense permuted ``spec`` reduced over ``dims`` goes in the row output ``out``.

    Rows are numbered in storage order (:func:`dense_row_layout`); when the kept dims lie in
    storage in another order than their logical one, row ``r`` belongs at
    ``sum((r // divisor) % size * stride)`` over the returned ``(divisor, size, stride)`` terms,
    one per kept dim, ``stride`` being that dim's in ``out`` (kept with or without ``keepdim``).
    Empty when rows are already in logical order.
    """
    ndim = len(spec.shape)
    reduced = {d % ndim for d in dims} if dims else set(range(ndim))
    kept = [d for d in sorted(range(ndim), key=lambda d: -spec.stride[d]) if d not in reduced and spec.shape[d] != 1]
    if is_contiguous(spec) or kept == sorted(kept):
        return ()
    logical = [d for d in range(ndim) if d not in reduced]
    out_dim = {d: d for d in range(ndim)} if len(out.shape) == ndim else {d: i for i, d in enumerate(logical)}
    terms = []
    divisor = 1
    for d in reversed(kept):
        terms.append((divisor, spec.shape[d], out.stride[out_dim[d]]))
        divisor *= spec.shape[d]
    return tuple(reversed(terms))

