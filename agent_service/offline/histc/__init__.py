"""The histc engine: counts of a tensor's elements in ``bins`` equal bins between ``min`` and ``max``.

Each element's bin is computed with eager's own arithmetic on the card's backend, so the counts
are eager's exactly; the elements may be visited in any order (a count does not depend on it).

- :mod:`.eager_range`: the range and bin arithmetic eager uses per backend and dtype, and the
  cards it refuses (a range eager takes from the data, or one it rejects);
- :mod:`.plan`: :class:`~.plan.HistcPlan`, the card's walk over the input and knob space;
- :mod:`.cpu`, :mod:`.cuda`: one renderer each.
"""
