"""Aten cards the gather engine covers: nearest upsampling, cat, index by one tensor, gather along a
dim, embedding, one_hot, constant pad, masked_fill, where, argmax and argmin, repeat_interleave by an int,
flip and roll, reshapes that copy, and 2-d affine grids.

Each builder turns the bound call into a :class:`GatherPlan`, whose branches name where each
output element comes from; a call outside what it handles raises :class:`UnsupportedCard`.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any, TypeGuard

from agent_service.offline import cxx
from agent_service.offline.arg_reduce import ArgReduction
from agent_service.offline.call import TensorArg, UnsupportedCard, split_op_name, tensor_argument
from agent_service.offline.convert import conversion_helpers, converted
from agent_service.offline.elementwise import ElementwisePlan, Operand
from agent_service.offline.gather import FOUND, Branch, GatherPlan, Table, fill_bits, offset
from agent_service.offline.layout import broadcast_strides, is_contiguous, row_major_strides
from agent_service.offline.ops_compare import VALUE_HELPERS as _VALUE
from agent_service.offline.ops_compare import helpers_for
from kforge_domain.card import OperatorCard

MAX_TABLE = 8192  # source-map entries a nearest upsampling embeds where no formula gives them


def _plan(card: OperatorCard, family: str, branches: list[Branch], preamble: str = "",
          tables: tuple[Table, ...] = (), **fields: Any) -> GatherPlan:
    """The card's gather; ``fields`` sets the plan's other fields (a reduction's, :attr:`GatherPlan.helpers`)."""
    out = card.outputs[0]
    return GatherPlan(family=family, summary=f"{card.op} to {out.shape} {out.dtype} stride {out.stride}",
                      inputs=tuple(card.inputs), outputs=tuple(card.outputs), branches=tuple(branches),
                      preamble=preamble, tables=tables, **fields)


def _same_dtype(card: OperatorCard, tensors: list[TensorArg], what: str) -> None:
    out = card.outputs[0].dtype
    if any(t.spec.dtype != out for t in tensors):
        raise UnsupportedCard(f"{what} of {[t.spec.dtype for t in tensors]} into {out} converts; "
                              "only a copy is templated")


def _coords(ndim: int) -> list[str]:
    return [f"o{d}" for d in range(ndim)]


# ---- nearest upsampling ------------------------------------------------------------------------


def _source_map(card: OperatorCard, x: TensorArg, dim: int) -> list[int]:
    """The input index each output index of spatial ``dim`` reads, as eager computes it.

    The card's own op is called on a probe holding each position's index along ``dim`` (the
    spatial dims only, one plane), with the card's non-tensor arguments: sizes, scales and the
    nearest or nearest-exact rounding are then eager's, whatever the overload.
    """
    import torch

    from packager.aten_dispatch import resolve_overload
    from packager.variant import decode_call

    spatial = len(x.spec.shape) - int(card.op.split("::")[-1].split(".")[0][-2])
    shape = [1] * spatial + x.spec.shape[spatial:]
    along = [1] * len(shape)
    along[dim] = shape[dim]
    probe = torch.arange(shape[dim], dtype=torch.float64).view(along).expand(shape).contiguous()
    args, kwargs = decode_call(card.template, [probe] * len(card.inputs))
    with torch.inference_mode():
        mapped = resolve_overload(card.op)(*args, **kwargs)
    if mapped.shape[dim] != card.outputs[0].shape[dim]:
        raise UnsupportedCard(f"{card.op}: the probe's output size {mapped.shape[dim]} is not the card's")
    index: list[int | slice] = [0] * len(shape)
    index[dim] = slice(None)
    return [int(v) for v in mapped[tuple(index)].tolist()]


def upsample_nearest_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """upsample_nearest{1,2,3}d and the nearest-exact variants: each spatial dim through its source map."""
    x = tensor_argument(call, "input" if "input" in call else "self")
    out = card.outputs[0]
    ndim = len(x.spec.shape)
    spatial = int(base[-2])
    if len(out.shape) != ndim or out.shape[:ndim - spatial] != x.spec.shape[:ndim - spatial]:
        raise UnsupportedCard(f"{card.op}: output {out.shape} does not keep the input's {x.spec.shape} leading dims")
    coords, tables = _coords(ndim), []
    for d in range(ndim - spatial, ndim):
        size_in, size_out = x.spec.shape[d], out.shape[d]
        mapping = _source_map(card, x, d)
        if mapping == [o * size_in // size_out for o in range(size_out)]:
            if size_out % size_in == 0:  # each input repeated a whole number of times
                coords[d] = f"o{d} / {size_out // size_in}LL" if size_in != size_out else f"o{d}"
            else:
                coords[d] = f"o{d} * {size_in}LL / {size_out}LL"
        elif size_out <= MAX_TABLE:
            tables.append(Table(f"kf_src{d}", tuple(mapping)))
            coords[d] = f"kf_src{d}[o{d}]"
        else:
            raise UnsupportedCard(f"{card.op}: a source map of {size_out} entries without a formula")
    branch = Branch.reading("", x.index, coords, x.spec.stride)
    return _plan(card, "gather_upsample_nearest", [branch], tables=tuple(tables))


# ---- cat ---------------------------------------------------------------------------------------


def cat_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """cat of same-dtype tensors along any dim: each output range along it from one input."""
    tensors = call.get("tensors")
    if not isinstance(tensors, list) or not all(isinstance(t, TensorArg) for t in tensors):
        raise UnsupportedCard("cat's tensors are not a list of tensors")
    out = card.outputs[0]
    ndim = len(out.shape)
    dim = int(call.get("dim", 0)) % max(ndim, 1)
    # eager skips 1-d empty tensors (legacy); an empty part of any shape adds nothing
    parts = [t for t in tensors if t.spec.numel]
    _same_dtype(card, parts, "cat")
    branches, start = [], 0
    for t in parts:
        shape = t.spec.shape
        if len(shape) != ndim or any(shape[d] != out.shape[d] for d in range(ndim) if d != dim):
            raise UnsupportedCard(f"cat part {shape} does not line up with the output {out.shape} along dim {dim}")
        coords = _coords(ndim)
        coords[dim] = f"o{dim} - {start}LL" if start else f"o{dim}"
        start += shape[dim]
        branches.append(Branch.reading(f"o{dim} < {start}LL", t.index, coords, t.spec.stride))
    if start != out.shape[dim]:
        raise UnsupportedCard(f"cat parts add up to {start} along dim {dim}, the output has {out.shape[dim]}")
    branches[-1] = replace(branches[-1], condition="")
    return _plan(card, "gather_cat", branches)


def stack_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """stack of same-shape, same-dtype tensors along a new dim: output slice ``i`` along it from input ``i``."""
    tensors = call.get("tensors")
    if not isinstance(tensors, list) or not tensors or not all(isinstance(t, TensorArg) for t in tensors):
        raise UnsupportedCard("stack's tensors are not a list of tensors")
    out = card.outputs[0]
    ndim = len(out.shape)
    dim = int(call.get("dim", 0)) % max(ndim, 1)
    _same_dtype(card, tensors, "stack")
    parts = out.shape[:dim] + out.shape[dim + 1:]
    if out.shape[dim] != len(tensors) or any(t.spec.shape != parts for t in tensors):
        raise UnsupportedCard(f"stack of {[t.spec.shape for t in tensors]} does not give the card's output {out.shape}")
    coords = [f"o{d}" for d in range(ndim) if d != dim]
    branches = [Branch.reading(f"o{dim} == {i}LL", t.index, coords, t.spec.stride) for i, t in enumerate(tensors)]
    branches[-1] = replace(branches[-1], condition="")
    return _plan(card, "gather_cat", branches)


# ---- index by one tensor -----------------------------------------------------------------------


def index_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """``x[..., idx, ...]``: one int64 or int32 index tensor (Nones before it), negative indices wrapped."""
    x = tensor_argument(call, "self")
    indices = call.get("indices")
    if not isinstance(indices, list):
        raise UnsupportedCard("index's indices are not a list")
    while indices and indices[-1] is None:
        indices = indices[:-1]
    given = [i for i in indices if i is not None]
    if len(given) != 1 or not isinstance(given[0], TensorArg):
        raise UnsupportedCard(f"index by {len(given)} index tensors broadcast together; one is templated")
    idx, dim = given[0], len(indices) - 1
    if idx.spec.dtype not in ("int64", "int32"):
        raise UnsupportedCard(f"index by a {idx.spec.dtype} tensor (a mask selects a data-dependent count)")
    _same_dtype(card, [x], "index")
    shape, m, out = x.spec.shape, len(idx.spec.shape), card.outputs[0]
    if out.shape != [*shape[:dim], *idx.spec.shape, *shape[dim + 1:]]:
        raise UnsupportedCard(f"index output {out.shape} is not {shape} indexed along dim {dim} by {idx.spec.shape}")
    size = shape[dim]
    at = offset(_coords(len(out.shape))[dim:dim + m], idx.spec.stride)
    preamble = (f"int64_t j = (int64_t)in{idx.index}[{at}];\n"
                f"if (j < 0) j += {size}LL;\n"
                f"if (j < 0 || j >= {size}LL) {{ KF_BAD(); j = 0; }}")
    coords = [*_coords(dim), "j", *(f"o{d + m - 1}" for d in range(dim + 1, len(shape)))]
    return _plan(card, "gather_index", [Branch.reading("", x.index, coords, x.spec.stride)], preamble)


def embedding_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """embedding's forward, ``weight[indices]``: the rows of a 2-d weight the int64 or int32 indices
    name (``padding_idx`` and the rest shape only the gradient). Unlike ``index``, a negative index
    is out of range: eager raises, the kernel reports it (``KF_BAD``) and reads row 0 instead."""
    weight, idx = tensor_argument(call, "weight"), tensor_argument(call, "indices")
    if idx.spec.dtype not in ("int64", "int32"):
        raise UnsupportedCard(f"embedding by a {idx.spec.dtype} tensor; eager takes int64 or int32 indices")
    if len(weight.spec.shape) != 2:
        raise UnsupportedCard(f"embedding weight of shape {weight.spec.shape}; eager takes a 2-d weight")
    _same_dtype(card, [weight], "embedding")
    rows, m, out = weight.spec.shape[0], len(idx.spec.shape), card.outputs[0]
    if out.shape != [*idx.spec.shape, weight.spec.shape[1]]:
        raise UnsupportedCard(f"embedding output {out.shape} is not {idx.spec.shape} rows of {weight.spec.shape}")
    preamble = (f"int64_t j = (int64_t)in{idx.index}[{offset(_coords(m), idx.spec.stride)}];\n"
                f"if (j < 0 || j >= {rows}LL) {{ KF_BAD(); j = 0; }}")
    return _plan(card, "gather_embedding", [Branch.reading("", weight.index, ["j", f"o{m}"], weight.spec.stride)],
                 preamble)


# ---- constant pad ------------------------------------------------------------------------------


def pad_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """constant_pad_nd and pad: the input where it lies, elsewhere the value (mode constant; negative
    pads crop) or the input at a source eager's mode picks (reflect, replicate, circular)."""
    x = tensor_argument(call, "self")
    low, high = _pad_amounts(card, x, call)
    _same_dtype(card, [x], "pad")
    mode = call.get("mode", "constant")
    if mode != "constant":
        return _pad_from_input(card, x, str(mode), low, high)
    shape, out = x.spec.shape, card.outputs[0]
    coords = [f"o{d} - {lo}LL" if lo else f"o{d}" for d, lo in enumerate(low)]
    inside = [f"(uint64_t)({c}) < {n}ULL" for c, n, lo, hi in zip(coords, shape, low, high, strict=True)
              if lo > 0 or hi > 0]
    read = Branch.reading(" && ".join(inside), x.index, coords, x.spec.stride)
    value = call.get("value")
    fill = fill_bits(0 if value is None else value, out.dtype)
    branches = [read, Branch("", fill)] if inside else [read]
    return _plan(card, "gather_pad", branches)


def _pad_amounts(card: OperatorCard, x: TensorArg, call: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The pad before and after each dim of ``x`` (the call's pairs from the last dim back), checked
    against the card's output."""
    pad, shape, out = call.get("pad"), x.spec.shape, card.outputs[0]
    if not isinstance(pad, list) or len(pad) % 2 or len(pad) // 2 > len(shape):
        raise UnsupportedCard(f"pad {pad!r} is not pairs over the input's {len(shape)} dims")
    low, high = [0] * len(shape), [0] * len(shape)
    for k in range(len(pad) // 2):
        low[len(shape) - 1 - k], high[len(shape) - 1 - k] = int(pad[2 * k]), int(pad[2 * k + 1])
    if out.shape != [n + lo + hi for n, lo, hi in zip(shape, low, high, strict=True)]:
        raise UnsupportedCard(f"pad {pad} of {shape} does not give the card's output {out.shape}")
    return low, high


#: pad modes that fill from the input: the source coordinate of ``i = o - low`` along a dim of size ``n``
_PAD_SOURCES = {
    "reflect": lambda i, n: f"({i} < 0LL ? -({i}) : ({i} >= {n}LL ? {2 * (n - 1)}LL - ({i}) : {i}))",
    "replicate": lambda i, n: f"({i} < 0LL ? 0LL : ({i} >= {n}LL ? {n - 1}LL : {i}))",
    "circular": lambda i, n: f"({i} < 0LL ? {i} + {n}LL : ({i} >= {n}LL ? {i} - {n}LL : {i}))",
}


def _pad_from_input(card: OperatorCard, x: TensorArg, mode: str, low: list[int], high: list[int]) -> GatherPlan:
    """pad in a mode that reads the input everywhere; pads that reach no further than eager allows
    (a reflection within the dim, a circular pad of at most its size), none negative."""
    if mode not in _PAD_SOURCES:
        raise UnsupportedCard(f"pad mode {mode!r} is not templated")
    coords = _coords(len(low))
    for d, (n, lo, hi) in enumerate(zip(x.spec.shape, low, high, strict=True)):
        reach = n - 1 if mode == "reflect" else n if mode == "circular" else None
        if lo < 0 or hi < 0 or (reach is not None and max(lo, hi) > reach) or (n == 0 and (lo or hi)):
            raise UnsupportedCard(f"pad {[lo, hi]} in mode {mode} of a dim of {n}: not templated")
        if lo or hi:
            coords[d] = _PAD_SOURCES[mode](f"(o{d} - {lo}LL)" if lo else f"o{d}", n)
    return _plan(card, "gather_pad", [Branch.reading("", x.index, coords, x.spec.stride)])


def triangle_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """triu and tril: the input where its column is on the kept side of ``diagonal`` in the last two
    dims (``col - row >= diagonal`` for triu, ``<=`` for tril), zero elsewhere."""
    x = tensor_argument(call, "self")
    out = card.outputs[0]
    rank = len(out.shape)
    if rank < 2:
        raise UnsupportedCard(f"{base} of {rank} dims raises in eager")
    _same_dtype(card, [x], base)
    diagonal = call.get("diagonal", 0)
    if isinstance(diagonal, bool) or not isinstance(diagonal, int):
        raise UnsupportedCard(f"{base} with diagonal={diagonal!r}")
    kept = f"o{rank - 1} - o{rank - 2} {'>=' if base == 'triu' else '<='} {_c_int(diagonal)}"
    return _plan(card, "gather_triangle", [Branch(kept, _read(card, x)), Branch("", fill_bits(0, out.dtype))])


def _c_int(value: int) -> str:
    """An int64 C literal of a Python int beyond which no index goes: a diagonal far outside the
    matrix keeps or drops every element alike."""
    return f"{max(-(2**62), min(2**62, value))}LL"


# ---- masked_fill and where ---------------------------------------------------------------------


def _condition(card: OperatorCard, name: str, call: dict[str, Any]) -> str:
    """``in<i>[...] != 0`` for a bool tensor broadcast to the output."""
    cond = tensor_argument(call, name)
    if cond.spec.dtype != "bool":
        raise UnsupportedCard(f"{name} is {cond.spec.dtype}; eager takes a bool tensor")
    out = card.outputs[0]
    return f"in{cond.index}[{offset(_coords(len(out.shape)), broadcast_strides(cond.spec, out.shape))}]"


def _read(card: OperatorCard, t: TensorArg) -> str:
    out = card.outputs[0]
    return f"in{t.index}[{offset(_coords(len(out.shape)), broadcast_strides(t.spec, out.shape))}]"


def masked_fill_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """masked_fill.Scalar: the value where the (broadcast) mask holds, the input elsewhere."""
    x = tensor_argument(call, "self")
    _same_dtype(card, [x], "masked_fill")
    value = call.get("value")
    if isinstance(value, TensorArg):
        raise UnsupportedCard("masked_fill by a tensor value is not templated")
    fill = fill_bits(value, card.outputs[0].dtype)
    return _plan(card, "gather_select", [Branch(_condition(card, "mask", call), fill), Branch("", _read(card, x))])


def _where_operand(card: OperatorCard, value: object, name: str) -> str:
    """A where operand at the output coordinates, as the output dtype's bits: a tensor converted as
    eager's promotion converts it, a Python number as eager stores it in that dtype."""
    out = card.outputs[0]
    if isinstance(value, TensorArg):
        return converted(_read(card, value), value.spec.dtype, out.dtype)
    if isinstance(value, (bool, int, float)):
        return fill_bits(value, out.dtype)
    raise UnsupportedCard(f"where's {name} is {value!r}, not a tensor or a real number")


def where_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """where (``.self``, and ``.ScalarSelf``, ``.ScalarOther``, ``.Scalar`` with Python numbers): ``self``
    where the condition holds, ``other`` elsewhere, all broadcast, each in the result dtype."""
    if "self" not in call and "other" not in call:
        raise UnsupportedCard("where(condition) lists the indices of the true elements: the output's shape "
                              "depends on the values, so no kernel of fixed shape computes it")
    if "complex" in card.outputs[0].dtype:
        raise UnsupportedCard(f"{card.op} into {card.outputs[0].dtype}: complex dtypes are not templated")
    chosen = _where_operand(card, call.get("self"), "self")
    other = _where_operand(card, call.get("other"), "other")
    plan = _plan(card, "gather_select", [Branch(_condition(card, "condition", call), chosen), Branch("", other)])
    return replace(plan, helpers=conversion_helpers(chosen + other))


def one_hot_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """one_hot with a given class count: 1 where the last coordinate is the element's class, else 0. A
    class out of range makes eager raise; the kernel reports it (``KF_BAD``). ``num_classes=-1`` counts
    the classes from the values, so the output's shape depends on them: refused."""
    x = tensor_argument(call, "self")
    classes = call.get("num_classes", -1)
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 1:
        raise UnsupportedCard(f"one_hot with num_classes={classes!r} takes its class count from the values: "
                              "the output's shape depends on them")
    out, m = card.outputs[0], len(x.spec.shape)
    if x.spec.dtype != "int64" or out.dtype != "int64" or out.shape != [*x.spec.shape, classes]:
        raise UnsupportedCard(f"one_hot of {x.spec.dtype} {x.spec.shape} into {out.dtype} {out.shape}: eager "
                              "takes int64 classes and adds a last dim of num_classes")
    preamble = (f"int64_t j = (int64_t)in{x.index}[{offset(_coords(m), x.spec.stride)}];\n"
                f"if (j < 0 || j >= {classes}LL) {{ KF_BAD(); j = -1; }}")
    return _plan(card, "gather_select", [Branch(f"o{m} == j", fill_bits(1, "int64")),
                                         Branch("", fill_bits(0, "int64"))], preamble)


# ---- gather along a dim ------------------------------------------------------------------------


def gather_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """torch.gather: output element ``o`` reads the input at ``o`` with ``dim``'s coordinate replaced by
    ``index[o]``. An index out of range makes eager raise; the kernel reports it (``KF_BAD``) and reads
    index 0 instead."""
    x, idx = tensor_argument(call, "self"), tensor_argument(call, "index")
    dim, ndim = call.get("dim"), len(x.spec.shape)
    if idx.spec.dtype != "int64":
        raise UnsupportedCard(f"gather by a {idx.spec.dtype} index; eager takes int64")
    if not isinstance(dim, int) or isinstance(dim, bool) or ndim == 0 or not -ndim <= dim < ndim:
        raise UnsupportedCard(f"gather along dim {dim!r} of a {ndim}-dim input is not templated")
    dim %= ndim
    out = card.outputs[0]
    if len(idx.spec.shape) != ndim or out.shape != idx.spec.shape:
        raise UnsupportedCard(f"gather of {x.spec.shape} by {idx.spec.shape} into {out.shape}: not index-shaped")
    _same_dtype(card, [x], "gather")
    preamble = (f"int64_t j = (int64_t)in{idx.index}[{offset(_coords(ndim), idx.spec.stride)}];\n"
                f"if (j < 0 || j >= {x.spec.shape[dim]}LL) {{ KF_BAD(); j = 0; }}")
    coords = [*_coords(dim), "j", *_coords(ndim)[dim + 1:]]
    return _plan(card, "gather_index", [Branch.reading("", x.index, coords, x.spec.stride)], preamble)


# ---- argmax and argmin ------------------------------------------------------------------------


def arg_extreme_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """argmax, argmin along one dim (``keepdim`` or not) or over the flattened input: each output
    element walks its row in order and keeps the first index of the largest (smallest) value, a NaN
    counting past every number and the first NaN winning, as eager's kernels choose on both backends.
    max.dim and min.dim choose the same way and write the chosen element and its index."""
    x = tensor_argument(call, "self")
    with_value = base in ("max", "min")
    if with_value and split_op_name(card.op)[1] != "dim":
        raise UnsupportedCard(f"{card.op}: only the dim overload (values and indices) is templated here")
    out, shape, dim = card.outputs[-1], x.spec.shape, call.get("dim")
    if with_value and card.outputs[0].dtype != x.spec.dtype:
        raise UnsupportedCard(f"{card.op} of {x.spec.dtype} gives values of {card.outputs[0].dtype}")
    if out.dtype != "int64" or x.spec.dtype not in (*_VALUE, "int64", "int32", "int8", "uint8"):
        raise UnsupportedCard(f"{card.op} of {x.spec.dtype} into {out.dtype} is not templated")
    if not shape or x.spec.numel == 0:
        raise UnsupportedCard(f"{card.op} of a {len(shape)}-dim input of {x.spec.numel} elements is not templated")
    if dim is None:
        length, at = x.spec.numel, cxx.linear_offset("k", shape, x.spec.stride)
        inner = is_contiguous(x.spec)
    elif isinstance(dim, int) and not isinstance(dim, bool) and -len(shape) <= dim < len(shape):
        dim %= len(shape)
        outer = _coords(len(out.shape))
        coords = [*outer[:dim], "k", *(outer[dim + 1:] if call.get("keepdim") else outer[dim:])]
        length, at = shape[dim], offset(coords, x.spec.stride)
        inner = x.spec.stride[dim] == 1
    else:
        raise UnsupportedCard(f"{card.op} along dim {dim!r} is not templated")
    read = f"in{x.index}[{at}]"
    value = f"{_VALUE[x.spec.dtype]}({read})" if x.spec.dtype in _VALUE else f"(int64_t)({read})"
    beats = ">" if base in ("argmax", "max") else "<"
    choose = (f"([&]() -> int64_t {{ int64_t k = 0, found = 0; auto best = {value}; "
              f"for (k = 1; k < {length}LL && best == best; ++k) {{ auto v = {value}; "
              f"if (v != v || v {beats} best) {{ best = v; found = k; }} }} return found; }}())")
    value_type = "double" if x.spec.dtype == "float64" else "float" if x.spec.dtype in _VALUE else "int64_t"
    reduction = ArgReduction(length=length, value=value, value_type=value_type, beats=beats, inner=inner)
    if with_value:  # the element itself, its bits copied: the value eager returns, NaN payload and all
        found = re.sub(r"\bk\b", FOUND, read)
        return _plan(card, "arg_extreme", [Branch("", found)], preamble=f"const int64_t {FOUND} = {choose};",
                     helpers=helpers_for(choose), reduction=reduction, found_value=found)
    return _plan(card, "arg_extreme", [Branch("", f"(T)({choose})")], helpers=helpers_for(choose), reduction=reduction)


# ---- repeat_interleave by an int ---------------------------------------------------------------


def repeat_interleave_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """repeat_interleave.self_int: output index ``o`` along ``dim`` reads input index ``o / repeats``;
    without ``dim`` the input is read flattened in row-major order, as eager flattens it."""
    overload = split_op_name(card.op)[1]
    if overload != "self_int":
        raise UnsupportedCard(f"{card.op}: repeats given as a tensor make the output's size and each element's "
                              "source depend on its values; only int repeats (self_int) are templated")
    x = tensor_argument(call, "self")
    _same_dtype(card, [x], "repeat_interleave")
    repeats, dim = int(call["repeats"]), call.get("dim")
    shape, out = x.spec.shape, card.outputs[0]
    if dim is None:
        want = [math.prod(shape) * repeats]
        branch = Branch("", f"in{x.index}[{cxx.linear_offset(f'o0 / {repeats}LL', shape, x.spec.stride)}]")
    else:
        dim = int(dim) % max(len(shape), 1)
        want = [n * repeats if d == dim else n for d, n in enumerate(shape)]
        coords = _coords(len(shape))
        coords[dim] = f"o{dim} / {repeats}LL"
        branch = Branch.reading("", x.index, coords, x.spec.stride)
    if out.shape != want:
        raise UnsupportedCard(f"repeat_interleave of {shape} by {repeats} along {dim} gives {want}, "
                              f"the card's output is {out.shape}")
    return _plan(card, "gather_repeat", [branch])


# ---- flip and roll -----------------------------------------------------------------------------


def _listed(value: Any) -> list[int]:
    """An int list argument as a list (a lone int is a list of one)."""
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def _dims(value: Any, ndim: int, op: str) -> list[int]:
    dims = _listed(value)
    if any(not -max(ndim, 1) <= d < max(ndim, 1) for d in dims):
        raise UnsupportedCard(f"{op} dims {dims} out of range for {ndim} dims")
    return [d % max(ndim, 1) for d in dims]


def flip_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """flip: output index ``o`` along each flipped dim reads input index ``n - 1 - o``."""
    x = tensor_argument(call, "self")
    _same_dtype(card, [x], "flip")
    shape = x.spec.shape
    if card.outputs[0].shape != shape:
        raise UnsupportedCard(f"flip of {shape} gives {shape}, the card's output is {card.outputs[0].shape}")
    coords = _coords(len(shape))
    for d in set(_dims(call.get("dims", []), len(shape), "flip")) if shape else ():
        coords[d] = f"{shape[d] - 1}LL - o{d}"
    return _plan(card, "gather_shift", [Branch.reading("", x.index, coords, x.spec.stride)])


def pixel_shuffle_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """pixel_shuffle by ``r``: output ``(c, h, w)`` of the last three dims reads channel
    ``c * r * r + (h % r) * r + w % r`` at ``(h / r, w / r)``; pixel_unshuffle reads the other way."""
    x = tensor_argument(call, "self")
    _same_dtype(card, [x], base)
    shape, n = x.spec.shape, len(x.spec.shape)
    shuffle = base == "pixel_shuffle"
    r = call["upscale_factor" if shuffle else "downscale_factor"]
    if n < 3 or not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise UnsupportedCard(f"{base} of {shape} by {r!r} is not templated")
    *batch, channels, height, width = shape
    want = ([*batch, channels // (r * r), height * r, width * r] if shuffle
            else [*batch, channels * r * r, height // r, width // r])
    if card.outputs[0].shape != want or (channels % (r * r) if shuffle else height % r or width % r):
        raise UnsupportedCard(f"{base} of {shape} by {r} into {card.outputs[0].shape} is not templated")
    coords = _coords(n)
    c, h, w = (f"o{d}" for d in (n - 3, n - 2, n - 1))
    if shuffle:
        coords[n - 3:] = [f"{c} * {r * r}LL + ({h} % {r}LL) * {r}LL + {w} % {r}LL", f"{h} / {r}LL", f"{w} / {r}LL"]
    else:
        coords[n - 3:] = [f"{c} / {r * r}LL", f"{h} * {r}LL + ({c} / {r}LL) % {r}LL", f"{w} * {r}LL + {c} % {r}LL"]
    return _plan(card, "gather_reshape", [Branch.reading("", x.index, coords, x.spec.stride)])


def int_pair(value: Any) -> TypeGuard[list[int]]:
    """A pair of Python ints, as a card encodes ``int[2]`` arguments (kernel sizes, strides, paddings)."""
    return isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)


def im2col_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """im2col (``F.unfold``): output ``(c * kh * kw + ki * kw + kj, oy * ow + ox)`` of ``[N,] C*kh*kw, L``
    reads ``(c, oy * sh - ph + ki * dh, ox * sw - pw + kj * dw)`` of ``[N,] C, H, W``, zero where that
    lies in the padding, as eager's im2col."""
    x = tensor_argument(call, "self")
    _same_dtype(card, [x], base)
    shape, n = x.spec.shape, len(x.spec.shape)
    params = [call.get(name) for name in ("kernel_size", "dilation", "padding", "stride")]
    pairs: list[list[int]] = [p for p in params if int_pair(p)]
    if n not in (3, 4) or len(pairs) != len(params):
        raise UnsupportedCard(f"im2col of {shape} with {params} is not templated")
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = pairs
    channels, height, width = shape[-3:]
    oh = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if min(kh, kw, dh, dw, sh, sw) < 1 or min(ph, pw) < 0 or oh < 1 or ow < 1 \
            or card.outputs[0].shape != [*shape[:-3], channels * kh * kw, oh * ow]:
        raise UnsupportedCard(f"im2col of {shape} with {params} into {card.outputs[0].shape} is not templated")
    batch = ["o0"] if n == 4 else []
    col, pos = (f"o{d}" for d in (n - 3, n - 2))
    y = f"({pos} / {ow}LL) * {sh}LL - {ph}LL + (({col} / {kw}LL) % {kh}LL) * {dh}LL"
    x_at = f"({pos} % {ow}LL) * {sw}LL - {pw}LL + ({col} % {kw}LL) * {dw}LL"
    coords = [*batch, f"{col} / {kh * kw}LL", y, x_at]
    inside = f"(uint64_t)({y}) < {height}ULL && (uint64_t)({x_at}) < {width}ULL"
    read = Branch.reading(inside, x.index, coords, x.spec.stride)
    return _plan(card, "gather_reshape", [read, Branch("", fill_bits(0, card.outputs[0].dtype))])


def roll_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """roll: along each rolled dim output index ``o`` reads ``(o - shift) mod n``; without dims the input
    is rolled flattened in row-major order, as eager flattens it."""
    x = tensor_argument(call, "self")
    _same_dtype(card, [x], "roll")
    shape = x.spec.shape
    shifts = _listed(call["shifts"])
    dims = _dims(call.get("dims") or [], len(shape), "roll")
    if card.outputs[0].shape != shape or not math.prod(shape):
        raise UnsupportedCard(f"roll of {shape} into {card.outputs[0].shape} moves nothing")
    if not shape:  # one element: every roll leaves it where it is
        return _plan(card, "gather_shift", [Branch("", f"in{x.index}[0]")])
    if not dims:
        if len(shifts) != 1:
            raise UnsupportedCard(f"roll without dims takes one shift, not {shifts}")
        numel = math.prod(shape)
        row_major = row_major_strides(shape)
        linear = offset(_coords(len(shape)), row_major)
        source = cxx.linear_offset(f"({linear} + {(-shifts[0]) % numel}LL) % {numel}LL", shape, x.spec.stride)
        return _plan(card, "gather_shift", [Branch("", f"in{x.index}[{source}]")])
    if len(shifts) != len(dims):
        raise UnsupportedCard(f"roll shifts {shifts} and dims {dims} differ in length")
    total = dict.fromkeys(dims, 0)
    for shift, d in zip(shifts, dims, strict=True):
        total[d] += shift
    coords = _coords(len(shape))
    for d, shift in total.items():
        if (-shift) % shape[d]:
            coords[d] = f"(o{d} + {(-shift) % shape[d]}LL) % {shape[d]}LL"
    return _plan(card, "gather_shift", [Branch.reading("", x.index, coords, x.spec.stride)])


# ---- reshape that copies -----------------------------------------------------------------------


def _views(shape: list[int], stride: list[int], to: list[int]) -> bool:
    """Whether eager reshapes a tensor of this layout to ``to`` by a view (no data is read)."""
    import torch

    try:
        torch.empty_strided(shape, stride, device="meta").view(to)
    except RuntimeError:
        return False
    return True


def reshape_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan | GatherPlan:
    """reshape (or flatten, unflatten) of an input whose strides admit no view: eager copies it into a
    new contiguous tensor in row-major order. The capture keeps only calls that copied (those that
    return a view alias their input and are not searched), and the guard's variant key holds the
    input's strides, so a call that eager would serve with a view never reaches the kernel.

    The copy's bytes are those of the input made contiguous in its own shape, so a float tensor is
    copied by the elementwise copy template over that shape (tiled transposes, vector stores); the
    gather engine, which walks the output and decomposes each element's row-major index, serves the
    rest."""
    x = tensor_argument(call, "self" if "self" in call else "input")
    out = card.outputs[0]
    _same_dtype(card, [x], base)
    if math.prod(out.shape) != math.prod(x.spec.shape):
        raise UnsupportedCard(f"{card.op} of {x.spec.shape} to {out.shape} changes the element count")
    if _views(x.spec.shape, x.spec.stride, out.shape):
        raise UnsupportedCard(f"{card.op} of {x.spec.shape} stride {x.spec.stride} to {out.shape} is a view in "
                              "eager: it moves no data, and a copy would not alias its input as eager's result does")
    contiguous = row_major_strides(out.shape)
    if any(out.stride[d] != contiguous[d] for d in range(len(out.shape)) if out.shape[d] != 1):
        raise UnsupportedCard(f"{card.op} wrote stride {out.stride}: only a contiguous copy is templated")
    as_input = out.model_copy(update={"shape": list(x.spec.shape), "stride": row_major_strides(x.spec.shape)})
    if out.dtype in cxx.FLOAT_DTYPES:
        return ElementwisePlan(family="elementwise_copy", summary=f"{card.op}: {x.spec.shape} stride {x.spec.stride} "
                               f"copied contiguous, read as {out.shape}", inputs=tuple(card.inputs),
                               outputs=(as_input,), operands=(Operand(x.index, x.spec.dtype),), expression="x0",
                               card_outputs=tuple(card.outputs))
    flat = offset(_coords(len(out.shape)), contiguous)
    source = cxx.linear_offset(flat, x.spec.shape, x.spec.stride)
    return _plan(card, "gather_reshape", [Branch("", f"in{x.index}[{source}]")])



# ---- affine_grid -------------------------------------------------------------------------------


def _grid_coordinate(index: str, steps: int, align_corners: bool) -> str:
    """Eager's ``linspace_from_neg_one`` at ``index`` (C, over the output coordinates), in float:
    linspace's two halves (``-1 + step * i`` below ``steps / 2``, ``1 - step * (steps - 1 - i)`` from
    it), scaled by ``(steps - 1) / steps`` without ``align_corners``; 0 for a single step."""
    if steps <= 1:
        return "0.0f"
    step = f"(2.0f / (float){steps - 1})"
    value = (f"({index} < {steps // 2}LL ? -1.0f + {step} * (float){index} "
             f": 1.0f - {step} * (float)({steps - 1}LL - {index}))")
    return value if align_corners else f"({value} * {float(steps - 1)!r}f / {float(steps)!r}f)"


def affine_grid_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """affine_grid_generator of 2-d grids (``F.affine_grid``): each output point is the float32
    transform ``theta`` (N x 2 x 3) applied to eager's base grid point ``(x, y, 1)``: family
    ``gather_affine_grid``. Eager multiplies by a batched matmul; the sum here is in the same order
    of terms, and its rounding may differ in the last bit."""
    theta = tensor_argument(call, "theta")
    size, align = call.get("size"), call.get("align_corners")
    out = card.outputs[0]
    if not isinstance(size, list) or len(size) != 4 or not isinstance(align, bool):
        raise UnsupportedCard(f"affine_grid of size {size!r}: only 2-d grids (a 4-d size) are templated")
    n, _, h, w = size
    if theta.spec.dtype != "float32" or out.dtype != "float32" or theta.spec.shape != [n, 2, 3]:
        raise UnsupportedCard(f"affine_grid of a {theta.spec.dtype} theta of {theta.spec.shape} into {out.dtype}: "
                              "a float32 N x 2 x 3 theta is templated")
    if out.shape != [n, h, w, 2]:
        raise UnsupportedCard(f"affine_grid output {out.shape} is not [{n}, {h}, {w}, 2]")

    def term(column: int) -> str:  # the gather engine reads raw bits
        return f"{_VALUE['float32']}(in{theta.index}[{offset(['o0', 'o3', str(column)], theta.spec.stride)}])"

    x, y = _grid_coordinate("o2", w, align), _grid_coordinate("o1", h, align)
    value = f"kf_bits_of_f32({x} * {term(0)} + {y} * {term(1)} + {term(2)})"
    return _plan(card, "gather_affine_grid", [Branch("", value)], helpers=conversion_helpers(value))
