"""The harness's check that a candidate's timed median holds all the device work it caused.

Calls are timed by :class:`kforge_torch.timing.Timer` (capture times eager the same way). Its
events see only the streams they wait for: a candidate that works on a non-blocking stream of
its own escapes them (and work it starts while the flush still runs falls before the start
event). :func:`escaped_work` catches that against the host clock over back-to-back calls
(:meth:`~kforge_torch.timing.Timer.series`) ended by ``torch.cuda.synchronize``, which waits for
every stream of the device, non-blocking ones too.
"""

from __future__ import annotations

from kforge_torch.timing import Series

#: Relative disagreement allowed between two figures of one call (clock changes, a warm cache).
NOISE_REL = 0.25
#: Absolute disagreement allowed per call, microseconds.
NOISE_US = 2.0
#: Host time a genuine call may take beyond its device time: descriptors, ctypes, a few launches.
LAUNCH_ALLOWANCE_US = 20.0


def escaped_work(median_us: float, candidate: Series, eager: Series) -> str | None:
    """Why the candidate's timed median misses device work it caused, or None when it does not.

    Eager keeps all its work on the harness's stream, so its series gives the fixed cost of the
    synchronisation (wall minus stream). A genuine candidate's wall time per call is then its
    stream time, and at most the larger of its timed median and its host time (a launch-bound
    call), the host time excused only up to :data:`LAUNCH_ALLOWANCE_US` beyond the median, since
    a call that waits inside ``kf_launch`` for work on a stream of its own also holds the host.
    """
    overhead_us = max(0.0, eager.wall_us - eager.stream_us) + NOISE_US
    where = (f"{candidate.wall_us:.3g} us a call by the wall clock over {candidate.calls} back-to-back calls "
             f"ended by a device synchronisation")
    if candidate.wall_us > candidate.stream_us * (1 + NOISE_REL) + overhead_us:
        return f"work outside the given stream: {where}, {candidate.stream_us:.3g} us on the harness's stream"
    accounted_us = max(median_us * (1 + NOISE_REL), min(candidate.host_us, median_us + LAUNCH_ALLOWANCE_US))
    if candidate.wall_us > accounted_us + overhead_us:
        return (f"work outside the given stream: {where}, {median_us:.3g} us timed "
                f"(the host held {candidate.host_us:.3g} us a call)")
    return None
