from pathlib import Path

import pytest
import torch

from kforge_torch.eviction import EvictionUnavailable, Evictor, build_library, held_tensors
from kforge_torch.timing import Timer


@pytest.fixture(scope="module")
def evictor(tmp_path_factory: pytest.TempPathFactory) -> Evictor:
    return Evictor(build_library(tmp_path_factory.mktemp("evict")))


def test_the_library_is_built_once_and_reused(tmp_path: Path) -> None:
    first = build_library(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert build_library(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name], "no partial build left behind"


def test_without_a_compiler_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.raises(EvictionUnavailable, match="no C compiler: 'no-such-compiler'"):
        build_library(tmp_path)


def test_eviction_writes_dirty_lines_back(evictor: Evictor) -> None:
    torch.manual_seed(0)
    base = torch.randn(257, 129)
    written = base.clone()
    written.mul_(3.0)  # dirty in the cache
    expected = base * 3.0
    with torch.inference_mode():
        inference = torch.arange(1000.0)
    views = [written, written[1:, ::2], written.t(), torch.empty(0), torch.tensor(2.5), inference,
             torch.ones(3).expand(4, 3)]
    evictor.evict(views)
    assert torch.equal(written, expected) and torch.equal(inference, torch.arange(1000.0))


def test_a_timer_that_evicts_never_writes_the_flush_buffer(evictor: Evictor) -> None:
    timer = Timer("cpu", 64 << 20, evictor=evictor)
    x = torch.randn(1 << 16)
    times = [timer.time_us(lambda: torch.softmax(x, 0), [x]) for _ in range(5)]
    assert all(t > 0 for t in times) and timer.evicts and timer._flush_buffer is None
    assert timer.cold_start_words == "evicting its operands from every cache level"
    assert Timer("cpu", 64 << 20).cold_start_words == "writing 128 MiB (twice the last-level cache)"


def test_a_modules_held_tensors_include_its_constants() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    module.constant = torch.ones(2)
    held = held_tensors(module)
    assert any(t is module.constant for t in held)
    assert any(t is module[0].weight for t in held) and any(t is module[1].running_mean for t in held)
