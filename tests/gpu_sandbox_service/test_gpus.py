"""`kforge serve sandbox --gpus`: the selection, its checks, and one run slot pinned per GPU."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_sandbox_service import server
from gpu_sandbox_service.pool import CANDIDATES_PER_GPU, WorkerPool, select_gpus, slot_gpus
from servicekit.errors import InvalidArgument

ROOT = Path(__file__).resolve().parents[2]
EIGHT = [str(i) for i in range(8)]


def test_all_selects_every_visible_gpu_and_ids_keep_their_order() -> None:
    assert select_gpus("all", EIGHT) == EIGHT
    assert select_gpus(" 2, 0 ", EIGHT) == ["2", "0"]
    assert select_gpus("5", ["4", "5"]) == ["5"]


@pytest.mark.parametrize(("spec", "visible", "says"), [
    ("0,8", EIGHT, "GPU 8 not visible here (8 visible: 0, 1, 2, 3, 4, 5, 6, 7)"),
    ("0", ["4", "5"], "GPU 0 not visible here (2 visible: 4, 5)"),
    ("1,1", EIGHT, "GPU 1 listed twice"),
    ("0,,1", EIGHT, "expected 'all' or comma-separated GPU ids"),
    ("", EIGHT, "expected 'all' or comma-separated GPU ids"),
    ("all", [], "no GPU is visible here"),
])
def test_bad_selections_name_the_visible_gpus(spec: str, visible: list[str], says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        select_gpus(spec, visible)


def test_each_slot_is_pinned_to_one_selected_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")  # what serve_gpus leaves for --gpus 0,2

    async def two_slots() -> None:
        pool = WorkerPool("cuda", device_count=8)
        assert pool.size == 2
        async with pool.run_slot() as first, pool.run_slot() as second:
            assert [first.env, second.env] == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "2"}]
            assert first.index != second.index

    asyncio.run(two_slots())


def test_workers_alone_take_the_first_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert slot_gpus(4) == ["0", "1", "2", "3"]
    assert slot_gpus(4, workers=2) == ["0", "1"]
    assert WorkerPool("cpu", workers=3).size == 3


def test_a_gpu_takes_a_second_candidate_to_build_while_one_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    assert WorkerPool("cuda", device_count=3).candidate_slots == 3 * CANDIDATES_PER_GPU > 3
    assert WorkerPool("cpu", workers=3).candidate_slots == 3


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    server.add_serve_arguments(parser)
    return parser.parse_args(argv)


def test_gpus_with_workers_is_refused_before_anything_starts(tmp_path: Path) -> None:
    args = parse(["--backend", "cuda", "--gpus", "all", "--workers", "2", "--work-dir", str(tmp_path)])
    with pytest.raises(InvalidArgument, match="give --gpus or --workers, not both"):
        asyncio.run(server.start_from_args(args))


def test_gpus_on_cpu_is_refused(tmp_path: Path) -> None:
    args = parse(["--backend", "cpu", "--gpus", "0", "--work-dir", str(tmp_path)])
    with pytest.raises(InvalidArgument, match="--gpus needs the cuda backend"):
        asyncio.run(server.start_from_args(args))


def test_the_cli_reports_a_refused_selection_and_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "forge_service.cli", "serve", "sandbox", "--backend", "cpu",
                           "--gpus", "all", "--address", "127.0.0.1:0", "--work-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--gpus needs the cuda backend" in " ".join((proc.stdout + proc.stderr).split())


def test_a_cpu_sandbox_states_its_run_slots(tmp_path: Path) -> None:
    said: list[str] = []

    async def start_and_stop() -> None:
        bound = await server.start(backend="cpu", work_dir=tmp_path, workers=2, say=said.append)
        await bound.stop()

    asyncio.run(start_and_stop())
    assert "sandbox run slots: 2 (cpu)" in said and "sandbox takes 2 candidates at once" in said
