"""The row engine: statistics over rows of a contiguous tensor, then an optional per-element write.

Reductions (sum, mean, amax), softmax and log-softmax, layer norm, RMS norm (plain, zero-centred
weight, gated) and group norm are one kernel shape: a row of ``length`` elements (stride
``inner``) is reduced to a few statistics, then each element is written from them. On cuda a
row belongs to one thread, one warp or one block; the row is held in registers when it fits
(one pass over memory), read with 16-byte vectors, reduced with warp shuffles or a shared-memory
tree. Few long rows are split over several blocks whose partial statistics a second kernel
merges (split mode), or kept in shared memory across a grid barrier (resident mode); short rows
reduced to one value are staged through shared memory (tile mode). On cpu rows are spread over
OpenMP threads and reduced with ``omp simd`` loops.

- :mod:`.plan`: :class:`~.plan.RowPlan`, the card's row computation, its checks and knob space;
- :mod:`.kinds`: one :class:`~.kinds.RowKind` record per kind, all that differs between kinds;
- :mod:`.cpu`, :mod:`.cuda_rows`, :mod:`.cuda_split`, :mod:`.cuda_resident`, :mod:`.cuda_tile`:
  one renderer each (split and resident share :mod:`.chunks`);
- ``row_helpers.cuh``: the cuda reduction helpers pasted into every cuda source (:mod:`.helpers`).
"""
