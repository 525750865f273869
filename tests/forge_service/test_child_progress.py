import sys
import textwrap
import time
from pathlib import Path

from forge_service.child_progress import PREFIX, run_reporting


def _child(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(body))
    return [sys.executable, str(script)]


def test_progress_reaches_the_parent_while_the_child_still_runs(tmp_path: Path) -> None:
    # The child waits for a file the parent's callback writes: it only ends if each line arrives as it is written.
    go = tmp_path / "go"
    cmd = _child(tmp_path, f"""
        import pathlib, sys, time
        print({PREFIX!r} + "compiling", file=sys.stderr, flush=True)
        while not pathlib.Path({str(go)!r}).exists():
            time.sleep(0.01)
        print("a warning of no interest", file=sys.stderr, flush=True)
        print({PREFIX!r} + "timed", file=sys.stderr, flush=True)
        print('{{"measured": true}}')
    """)
    heard: list[str] = []

    def on_progress(step: str) -> None:
        heard.append(step)
        go.touch()

    outcome = run_reporting(cmd, 60, on_progress)
    assert heard == ["compiling", "timed"]
    assert outcome.returncode == 0 and not outcome.timed_out
    assert outcome.stdout.strip() == '{"measured": true}'
    assert outcome.stderr_tail == ["a warning of no interest"]


def test_a_failing_child_leaves_its_last_words_not_its_progress(tmp_path: Path) -> None:
    cmd = _child(tmp_path, f"""
        import sys
        print({PREFIX!r} + "compiling", file=sys.stderr, flush=True)
        raise RuntimeError("the model raised")
    """)
    outcome = run_reporting(cmd, 60, lambda step: None)
    assert outcome.returncode == 1
    assert outcome.stderr_tail[-1] == "RuntimeError: the model raised"
    assert not any(PREFIX in line for line in outcome.stderr_tail)


def test_a_child_past_its_time_limit_is_killed(tmp_path: Path) -> None:
    cmd = _child(tmp_path, f"""
        import sys, time
        print({PREFIX!r} + "compiling", file=sys.stderr, flush=True)
        time.sleep(600)
    """)
    started = time.perf_counter()
    heard: list[str] = []
    outcome = run_reporting(cmd, 2.0, heard.append)
    assert outcome.timed_out and outcome.returncode is None
    assert heard == ["compiling"]
    assert time.perf_counter() - started < 30
