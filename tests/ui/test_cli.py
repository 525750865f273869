"""``kforge ui``: the parser, bad options, and a real dashboard process against a real forge."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from forge_service.cli import build_parser, main
from servicekit.errors import Unavailable
from tests.ui.seeding import LLM_RUN_ID
from ui.client import ForgeClient, ForgeError
from ui.connection import FORGE_ENV_VAR, ForgeTarget
from ui.local_forge import BackgroundForge

KFORGE = Path(sys.executable).with_name("kforge")
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_kforge_has_a_ui_command_with_its_options() -> None:
    args = build_parser().parse_args(["ui", "--forge", "127.0.0.1:5", "--port", "9000", "--runs-dir", "r"])
    assert (args.forge, args.port, args.runs_dir, args.host) == ("127.0.0.1:5", 9000, Path("r"), "127.0.0.1")


def test_a_bad_port_is_refused_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", "--forge", "127.0.0.1:5", "--port", "70000"]) == 2
    assert "--port must be 1..65535" in capsys.readouterr().err


def test_a_plain_text_forge_on_another_machine_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", "--forge", "10.1.2.3:50050", "--port", str(_free_port())]) == 2
    assert "refusing a plain-text connection" in capsys.readouterr().err


def test_a_dashboard_port_in_use_is_refused_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["ui", "--runs-dir", str(tmp_path / "runs"), "--backend", "cpu", "--port", str(port)]) == 2
    assert f"the dashboard cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def _wait_until_served(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                assert r.read() == b"ok"
                return
        except OSError:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "the dashboard did not come up"
            time.sleep(0.3)


def _stop(proc: subprocess.Popen[bytes]) -> str:
    """SIGTERM, as a service manager stops it; kforge stops Streamlit and its forge, then exits."""
    proc.terminate()
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130 and "interrupted" in out, out
    return out


def test_kforge_ui_serves_the_dashboard_for_a_given_forge(forge_address: str) -> None:
    port = _free_port()
    proc = subprocess.Popen([str(KFORGE), "ui", "--forge", forge_address, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_until_served(proc, port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert b"<title>" in r.read()
    finally:
        out = _stop(proc)
    assert f"dashboard on http://127.0.0.1:{port} (forge service {forge_address})" in out


def test_kforge_ui_without_a_forge_starts_a_local_one_on_the_runs_dir(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([str(KFORGE), "ui", "--runs-dir", str(tmp_path / "runs"), "--backend", "cpu",
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        match = re.search(r"\(forge service (127\.0\.0\.1:\d+)\)", line)
        assert match, line
        client = ForgeClient(ForgeTarget.from_environ({FORGE_ENV_VAR: match.group(1)}), timeout_s=10)
        assert client.list_runs() == []
        assert (tmp_path / "runs").is_dir()
        _wait_until_served(proc, port)
    finally:
        _stop(proc)
    with pytest.raises(ForgeError, match="not reachable"):
        ForgeClient(ForgeTarget.from_environ({FORGE_ENV_VAR: match.group(1)}), timeout_s=2).list_runs()


def test_a_forge_that_cannot_start_is_reported() -> None:
    @contextlib.asynccontextmanager
    async def broken() -> AsyncIterator[str]:
        raise OSError("address already in use")
        yield ""  # pragma: no cover

    with pytest.raises(Unavailable, match="could not start: address already in use"):
        BackgroundForge(broken).start(timeout_s=10)


# Run in a child process: tests/service_process.py says why no forge loop runs in a test's thread.
BACKGROUND_FORGE_CHECK = """
import sys
from pathlib import Path

from tests.ui.forge_process import forge
from ui.client import ForgeClient, ForgeError
from ui.connection import FORGE_ENV_VAR, ForgeTarget
from ui.local_forge import background_forge

runs_dir = Path(sys.argv[1])
with background_forge(lambda: forge("forge-only", runs_dir)) as address:
    runs = ForgeClient(ForgeTarget.from_environ({FORGE_ENV_VAR: address}), timeout_s=5).list_runs()
    print("served", *sorted(run.run_id for run in runs))
try:
    ForgeClient(ForgeTarget.from_environ({FORGE_ENV_VAR: address}), timeout_s=2).list_runs()
except ForgeError as exc:
    print("after the block:", exc)
"""


def test_a_background_forge_serves_until_the_block_ends(runs_dir: Path, optimized_run_id: str) -> None:
    proc = subprocess.run([sys.executable, "-c", BACKGROUND_FORGE_CHECK, str(runs_dir)], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    served, after = proc.stdout.splitlines()
    assert served.split()[0] == "served" and {optimized_run_id, LLM_RUN_ID} <= set(served.split()[1:])
    assert after.startswith("after the block:") and "not reachable" in after

