"""The sort engine: sort, argsort and topk along one dim, in eager's order of ties.

Each row along the dim becomes ``(key, index)`` pairs: the key is an unsigned integer whose order
is the order eager sorts values in (see :mod:`.keys`), so comparing pairs lexicographically gives
eager's stable order, ties by ascending index, whatever the dtype. The values are copied as raw
bits from the input, never converted.

- :mod:`.keys`: the key of each dtype, with NaN and -0.0 placed as eager places them;
- :mod:`.plan`: :class:`~.plan.SortPlan`, the card's rows, what eager's order is, checks, knobs;
- :mod:`.cpu`, :mod:`.cuda`: one renderer each.
"""
