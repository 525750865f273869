"""Aten cards the sort engine covers: sort, argsort and topk along one dim, where eager's order is known.

The kernel writes ties in one order; a card is proposed only where eager's order of ties is
that one, found in PyTorch's source:

- cpu sort (aten/src/ATen/native/cpu/SortingKernel.cpp, ``sort_kernel``): ``stable=True`` is
  ``std::stable_sort`` with ``KeyValueCompAsc``/``KeyValueCompDesc`` (NaN after, or before,
  every number; -0.0 equal to 0.0): the stable order. ``stable=False`` (``sort.default``) is
  ``std::sort`` or x86-simd-sort's ``keyvalue_qsort``, neither stable: refused.
- cpu topk (aten/src/ATen/native/TopKImpl.h, ``topk_impl_loop``): ``std::partial_sort``, or
  ``std::nth_element`` then ``std::sort``, comparing values alone; the kernel makes the same calls
  (:mod:`agent_service.offline.sort.cpu`), so ties, and ``sorted=False``'s order, come out as
  eager's. Bool is refused: eager's cpu topk does not take it.
- cuda sort (aten/src/ATen/native/cuda/Sort.cpp ``sort_cuda_kernel``; ``sortKeyValueInplace``
  in Sort.cu): rows up to 4096 are sorted in place, rows of at most 32 by ``SmallBitonicSort``
  when ``stable`` is false (unstable, but deterministic: the kernel replays its network, order
  ``cuda_bitonic``), rows up to 128 by ``WarpMergeSort::StableSort`` with ``LTOp/GTOp<T, true>``
  (NaN largest, -0.0 equal to 0.0), longer rows by cub's ``BlockRadixSort`` (to 4096) or
  segmented radix sort (``launch_stable_sort_kernel``), both stable, on the values' bits: there a
  NaN with its sign bit set sorts before -inf (NaN order ``"bits"``). Every path with more than
  32 elements is stable whatever ``stable`` says. Which of the two paths sorts 2 to 128
  elements depends on the release: where the build leaves ``WarpMergeSort`` out (torch 2.11's
  ``HAS_WARP_MERGE_SORT()`` tests ``CUDA_VERSION >= 110600``, which no CUDA version passes), the
  radix sort takes them, with NaNs by their bits. On the GPU the two orders differ only where NaNs
  of both signs meet, and the kernel cannot know which release the device runs: a float sort of
  that range on the stable path is refused (:func:`_refuse_release_dependent`).
- cuda topk (aten/src/ATen/native/cuda/TensorTopK.cpp/.cu): a radix select whose float keys
  order -0.0 below 0.0 and every NaN largest, gathers the elements beyond the k-th and then those
  equal to it, each in index order, and sorts the k results with ``sortKeyValueInplace(...,
  stable=false)``: the bitonic network for k <= 32, the stable paths above it. The kernel does the
  same three steps (order ``cuda_topk``); integers with k > 32 take the plain stable order, which
  is the same there. Floats with 32 < k <= 128 are refused, as the sorts above. ``sorted=False``
  is refused: eager then returns the gathered order itself, which the GPU check
  (``tests/agent_service/offline/sort/test_cuda_orders.py``) does not cover. Bool is refused
  too: eager's cuda topk does not take it.
"""

from __future__ import annotations

from typing import Any

from agent_service.offline.call import UnsupportedCard, split_op_name, tensor_argument
from agent_service.offline.sort.keys import FLOAT_INF_BITS
from agent_service.offline.sort.plan import BITONIC_SIZE, SortPlan
from kforge_domain.card import OperatorCard

SORTS = ("sort", "argsort", "topk")
OVERLOADS = {"sort": ("default", "stable"), "argsort": ("default", "stable"), "topk": ("default",)}
CUDA_COMPARATOR_MAX = 128  # eager's cuda WarpMergeSort (comparator NaN order) sorts rows up to this long


def _refuse_release_dependent(op: str, dtype: str, length: int) -> None:
    """Refuse a cuda float sort of ``length`` elements on the stable path where eager's NaN order
    depends on its release (merge sort or radix sort, see the module docstring)."""
    if dtype in FLOAT_INF_BITS and 1 < length <= CUDA_COMPARATOR_MAX:
        raise UnsupportedCard(
            f"{op}: a cuda {dtype} sort of {length} elements on the stable path orders NaNs of either sign as "
            f"its release does (a merge sort treating them alike, or a radix sort by their bits, up to "
            f"{CUDA_COMPARATOR_MAX} elements); the kernel cannot know which release the device runs")


def _dim(call: dict[str, Any], rank: int) -> int:
    dim = int(call.get("dim", -1))
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise UnsupportedCard(f"dim {dim} is out of range for {rank} dims")
    return dim % max(rank, 1)


def _sort_plan(card: OperatorCard, base: str, overload: str, call: dict[str, Any], backend: str) -> SortPlan:
    x = tensor_argument(call)
    dim = _dim(call, len(x.spec.shape))
    length = x.spec.shape[dim] if x.spec.shape else 1
    stable = bool(call.get("stable")) if overload == "stable" else False
    order = "stable"
    if not stable and length > 1:
        if backend == "cpu":
            raise UnsupportedCard(f"{card.op} with stable=False: eager's cpu sort (std::sort or x86-simd-sort) "
                                  "orders ties its own way; only stable=True is templated on cpu")
        if length <= BITONIC_SIZE:
            order = "cuda_bitonic"
    if backend == "cuda" and order == "stable":
        _refuse_release_dependent(card.op, x.spec.dtype, length)
    bits = backend == "cuda" and length > CUDA_COMPARATOR_MAX
    descending = bool(call.get("descending", False))
    outputs = tuple(card.outputs)
    if len(outputs) != (1 if base == "argsort" else 2):
        raise UnsupportedCard(f"{card.op} writes {1 if base == 'argsort' else 2} outputs, the card has {len(outputs)}")
    return SortPlan(summary=f"{card.op} over dim {dim} of {x.spec.shape} {x.spec.dtype}"
                    f"{' descending' if descending else ''}", inputs=tuple(card.inputs), outputs=outputs,
                    x=x.index, dim=dim, k=length, descending=descending, order=order,
                    nan_order="bits" if bits else "comparator")


def _topk_plan(card: OperatorCard, call: dict[str, Any], backend: str) -> SortPlan:
    x = tensor_argument(call)
    dim = _dim(call, len(x.spec.shape))
    k, largest, in_order = int(call["k"]), bool(call.get("largest", True)), bool(call.get("sorted", True))
    dtype = x.spec.dtype
    if len(card.outputs) != 2:
        raise UnsupportedCard(f"{card.op} writes 2 outputs, the card has {len(card.outputs)}")
    if dtype == "bool":
        raise UnsupportedCard(f"eager's {backend} topk does not take bool")
    order = "cpu_topk" if backend == "cpu" else "stable"
    if backend == "cuda":
        if not in_order:
            raise UnsupportedCard("topk with sorted=False on cuda: eager returns the gathered order, not a sorted one")
        if k < 1:
            raise UnsupportedCard("topk with k=0 writes nothing")
        if dtype in FLOAT_INF_BITS or k <= BITONIC_SIZE:
            order = "cuda_topk"
        if k > BITONIC_SIZE:
            _refuse_release_dependent(card.op, dtype, k)
    bits = order == "cuda_topk" and k > CUDA_COMPARATOR_MAX
    return SortPlan(summary=f"{card.op} k={k} over dim {dim} of {x.spec.shape} {dtype}"
                    f"{' largest' if largest else ' smallest'}", inputs=tuple(card.inputs),
                    outputs=tuple(card.outputs), x=x.index, dim=dim, k=k, descending=largest, order=order,
                    nan_order="bits" if bits else "comparator", sorted_topk=in_order)


def sort_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> SortPlan:
    """sort, argsort (default and stable overloads) and topk: family ``sort``."""
    overload = split_op_name(card.op)[1]
    if overload not in OVERLOADS[base]:
        raise UnsupportedCard(f"{card.op}: only the {', '.join(OVERLOADS[base])} overloads are templated")
    backend = "cuda" if card.device == "cuda" else "cpu"
    plan = _topk_plan(card, call, backend) if base == "topk" else _sort_plan(card, base, overload, call, backend)
    if backend == "cuda":
        plan.check_cuda_fits()
    return plan
