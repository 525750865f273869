"""The scan engine: inclusive prefix sums and products (cumsum, cumprod) along one dim.

A card's scan is ``rows`` independent runs of ``length`` elements, each run at a row offset of the
input and the output (any strides: the other dims are walked by division by constants) with a
fixed step between its elements. On cpu the runs are spread over OpenMP threads and each is walked
in order, accumulating as eager's cpu kernel does (so the result is eager's, bit for bit), or,
where the runs lie side by side in memory (a scan over a middle or outer dim), a block of adjacent
runs is walked together with ``omp simd``. On cuda a run belongs to one thread (runs side by side:
coalesced), one warp or one block, scanned with warp shuffles; few long runs are split into chunks
whose totals a first kernel reduces, so a second scans every chunk from its carry in parallel.

- :mod:`.elements`: storage, conversion and accumulation of each dtype, as eager converts;
- :mod:`.plan`: :class:`~.plan.ScanPlan`, the card's runs, checks and knob space;
- :mod:`.cpu`, :mod:`.cuda`: one renderer each.
"""
