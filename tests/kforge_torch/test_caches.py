"""The cache size a timer flushes: per level from sysfs (instruction caches left out), the largest
on cpu; on a GPU its L2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kforge_torch.caches import cpu_cache_sizes, last_level_cache_bytes

MIB = 1024 * 1024


def _cache(root: Path, index: int, level: int, kind: str, size: str) -> None:
    folder = root / f"index{index}"
    folder.mkdir(parents=True)
    (folder / "level").write_text(f"{level}\n")
    (folder / "type").write_text(f"{kind}\n")
    (folder / "size").write_text(f"{size}\n")


def test_cache_sizes_are_read_from_sysfs_without_instruction_caches(tmp_path: Path) -> None:
    _cache(tmp_path, 0, 1, "Data", "48K")
    _cache(tmp_path, 1, 1, "Instruction", "32K")
    _cache(tmp_path, 2, 2, "Unified", "2048K")
    _cache(tmp_path, 3, 3, "Unified", "96M")
    assert cpu_cache_sizes(tmp_path) == {1: 48 * 1024, 2: 2 * MIB, 3: 96 * MIB}


def test_a_cpu_s_last_level_is_its_largest_cache() -> None:
    assert last_level_cache_bytes(torch.device("cpu")) == max(cpu_cache_sizes().values()) > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="reads a GPU's properties")
def test_a_gpu_s_last_level_is_its_l2() -> None:
    props = torch.cuda.get_device_properties(0)
    assert last_level_cache_bytes(torch.device("cuda", 0)) == props.L2_cache_size > 0
