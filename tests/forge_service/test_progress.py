"""The progress view of `kforge optimize`: a redrawn line on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io

from forge_service.progress import ProgressView, clock
from kernel_forge.common.v1 import types_pb2
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2


def card(evaluations: int, best_us: float | None = None, speedup: float | None = None) -> forge_pb2.RunCard:
    msg = forge_pb2.RunCard(card=types_pb2.OperatorCard(id="c1", op="aten::silu.default"), evaluations=evaluations,
                            budget=8)
    if best_us is not None:
        msg.best_latency_us, msg.speedup = best_us, speedup
    return msg


def test_the_estimate_follows_the_pace_of_the_search_and_a_time_limit_caps_it() -> None:
    text = io.StringIO()
    view = ProgressView(text, terminal=False)
    run = forge_pb2.Run(created_at=1000.0, evaluations_budget=16, evaluations_done=0)
    view.phase(run, 1030.0, "captured 3 cards")
    view.card(run, card(0), 1030.0, started=True)
    run.evaluations_done = 4
    view.card(run, card(4, 12.34, 1.85), 1050.0)
    run.config.time_limit_s = 60.0
    view.card(run, card(5, 12.34, 1.85), 1051.0)
    assert text.getvalue().splitlines() == [
        "[0:30] captured 3 cards",
        "aten::silu.default (c1): 0/8 evaluations, no passing kernel yet | run 0/16 evaluations, 0:30 elapsed, "
        "estimate after the first evaluation",
        # 4 evaluations in 20 s of search: 12 more take 60 s.
        "aten::silu.default (c1): 4/8 evaluations, best 12.3 µs, 1.85x | run 4/16 evaluations, 0:50 elapsed, "
        "about 1:00 of search left",
        "aten::silu.default (c1): 5/8 evaluations, best 12.3 µs, 1.85x | run 4/16 evaluations, 0:51 elapsed, "
        "about 0:09 of search left",
    ]


def test_a_terminal_gets_one_redrawn_line_under_the_phases() -> None:
    text = io.StringIO()
    view = ProgressView(text, terminal=True)
    run = forge_pb2.Run(created_at=0.0, evaluations_budget=8, evaluations_done=1)
    view.card(run, card(1, 5.0, 1.1), 10.0, started=True)
    view.card(run, card(2, 4.0, 1.4), 20.0)
    view.phase(run, 21.0, "budget raised to 12: still improving")
    view.close()
    frames = text.getvalue().split("\r\x1b[2K")
    assert frames[0] == "" and len(frames) == 5 and text.getvalue().endswith("\n")
    assert frames[2].startswith("aten::silu.default (c1): 2/8 evaluations, best 4 µs, 1.40x") and "\n" not in frames[2]
    assert frames[3] == "[0:21] budget raised to 12: still improving\n"
    assert frames[4] == frames[2] + "\n"


def test_clock_reads_minutes_then_hours() -> None:
    assert (clock(0), clock(59.6), clock(61), clock(3725)) == ("0:00", "1:00", "1:01", "1:02:05")
