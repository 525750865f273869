"""Row kinds are records: each one complete, reached from the catalog, and compiling in every mode.

A sample card per kind is rendered at every ``stats`` value on cpu and at every mode the cuda
knob space offers (with every ``stats`` value in the modes that read it); cpu sources build with
g++, cuda sources with nvcc for sm_90 (compile only).
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.catalog import ATEN_OPS, plan_for_card
from agent_service.offline.rowwise.helpers import CUDA_ROW_HELPERS
from agent_service.offline.rowwise.kinds import ROW_KINDS
from agent_service.offline.rowwise.plan import RowPlan
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import NVCC, aten_card, compile_cpu, cuda_bundle, nvcc_object

aten = torch.ops.aten
bf16 = torch.bfloat16
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)
PLACEHOLDER = re.compile(r"\{(n|d|eps|L|xj|simd|inner)\}")


def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def _samples() -> dict[str, list[tuple[Any, list[Any]]]]:
    """Per kind: a card of short rows (row modes, tile) and one of few long rows (split, resident)."""
    weight, bias = r(1024, dtype=bf16), r(1024, dtype=bf16)
    return {
        "sum": [(aten.sum.dim_IntList, [r(64, 48), [-1]]), (aten.sum.dim_IntList, [r(8, 16384, dtype=bf16), [-1]]),
                (aten.sum.dim_IntList, [r(16, 64, 32), [1]])],
        "mean": [(aten.mean.dim, [r(8, 64, 7, 7, dtype=bf16), [-1, -2], True]), (aten.mean.dim, [r(4, 16384), [-1]])],
        "amax": [(aten.amax.default, [r(64, 1024, dtype=bf16), [-1]]), (aten.amax.default, [r(4, 16384), [-1]]),
                 (aten.amax.default, [r(33, 50, dtype=torch.float16), [-1]])],
        "var": [(aten.var.dim, [r(64, 1024, dtype=bf16), [-1]]), (aten.var.correction, [r(4, 16384), [-1]]),
                (aten.var.dim, [r(6, 4, 40)[::2], [1]])],
        "std": [(aten.std.dim, [r(64, 300), [-1], False]), (aten.std.dim, [r(4, 16384, dtype=bf16), [-1]])],
        "vector_norm": [(aten.linalg_vector_norm.default, [r(64, 48), 2, [-1]]),
                        (aten.linalg_vector_norm.default, [r(4, 16384, dtype=bf16), 2, [-1]])],
        "logsumexp": [(aten.logsumexp.default, [r(64, 1024, dtype=bf16), [-1]]),
                      (aten.logsumexp.default, [r(4, 16384), [-1]]),
                      (aten.logsumexp.default, [r(3, 70, 33)[:, 5:], [1], True])],
        "softmax": [(aten._softmax.default, [r(64, 1024), -1, False]),
                    (aten._softmax.default, [r(4, 16384, dtype=bf16), -1, False]),
                    (aten._softmax.default, [r(4, 64, 100), 1, False])],
        "log_softmax": [(aten._log_softmax.default, [r(64, 1024, dtype=bf16), -1, False]),
                        (aten._log_softmax.default, [r(4, 16384), -1, False])],
        "layer_norm": [(aten.native_layer_norm.default, [r(64, 1024, dtype=bf16), [1024], weight, bias, 1e-5]),
                       (aten.native_layer_norm.default, [r(4, 16384), [16384], r(16384), r(16384), 1e-5])],
        "rms_norm": [(aten.rms_norm.default, [r(64, 1024, dtype=bf16), [1024], weight, 1e-6]),
                     (aten.rms_norm.default, [r(4, 16384), [16384], r(16384), 1e-6])],
        "group_norm": [(aten.native_group_norm.default, [r(2, 64, 8, 8), r(64), r(64), 2, 64, 64, 8, 1e-5]),
                       (aten.group_norm.default, [r(1, 64, 64, 64, dtype=bf16), 32, r(64, dtype=bf16),
                                                  r(64, dtype=bf16), 1e-6])],
    }


def _plans(backend: str) -> list[tuple[str, RowPlan]]:
    plans = []
    for kind, calls in _samples().items():
        for i, (op, args) in enumerate(calls):
            card, _ = aten_card(op, args)
            tensors = [{**t, "device": backend} for t in card.key["tensors"]]
            card = card.model_copy(update={"device": backend, "key": {**card.key, "tensors": tensors}})
            plan = plan_for_card(card, backend)
            assert isinstance(plan, RowPlan) and plan.kind == kind, (kind, plan)
            plans.append((f"{kind}_{i}", plan))
    return plans


def _variants(plan: RowPlan, backend: str, device: DeviceInfo) -> list[dict[str, Any]]:
    """The default knobs with each mode (cuda) and each stats value the mode reads (and each stash setting)."""
    space = plan.knob_space(backend, device)
    variants: dict[str, dict[str, Any]] = {}
    for mode in space.choices.get("mode", (None,)):
        for stats in space.choices["stats"]:
            for stash in space.choices.get("stash_exp", (False,)):
                knobs = space.normalise({**space.default(), "mode": mode, "stats": stats, "stash_exp": stash})
                variants[repr(sorted(knobs.items()))] = knobs
    return list(variants.values())


def test_every_kind_the_catalog_names_has_a_record_and_every_record_is_reached() -> None:
    named = {b.keywords["kind"] for b in ATEN_OPS.values() if isinstance(b, partial) and "kind" in b.keywords}
    assert named <= set(ROW_KINDS)
    assert {plan.kind for _, plan in _plans("cpu")} == set(ROW_KINDS)


@pytest.mark.parametrize("name", sorted(ROW_KINDS))
def test_each_record_is_complete(name: str) -> None:
    kind = ROW_KINDS[name]
    assert kind.name == name
    names = [s.name for s in kind.stats]
    assert names and len(set(names)) == len(names)
    for stats in kind.stats:
        assert stats.cuda and stats.cpu, stats.name
    # Every merge a kernel names is a functor of row_helpers.cuh.
    ops = {p.op for s in kind.stats for p in s.cuda} | {kind.chunk.block_op, kind.chunk.merge_op}
    for op in ops:
        assert f"struct {op} " in CUDA_ROW_HELPERS, op
    # A kind writes elements, per-row values, or both; tiling and stashing are for one of them each.
    assert kind.write is not None or kind.row_values
    assert kind.tile is None or kind.write is None
    assert kind.stash is None or (kind.write is not None and kind.stash.stats in names)
    assert not kind.grouped or kind.write is not None


def test_every_kind_renders_each_cpu_variant_and_it_builds_with_gxx(tmp_path: Path) -> None:
    for name, plan in _plans("cpu"):
        for knobs in _variants(plan, "cpu", CPU):
            source = plan.render("cpu", knobs, CPU)
            assert not PLACEHOLDER.search(source), (name, knobs, PLACEHOLDER.search(source))
            compile_cpu(source, tmp_path)


def _cuda_sources() -> dict[str, str]:
    sources: dict[str, str] = {}
    for name, plan in _plans("cuda"):
        for i, knobs in enumerate(_variants(plan, "cuda", H200)):
            source = plan.render("cuda", knobs, H200)
            assert not PLACEHOLDER.search(source), (name, knobs, PLACEHOLDER.search(source))
            sources[f"{name}_{i}"] = source
    return sources


def test_every_kind_reaches_every_cuda_mode() -> None:
    modes: dict[str, set[str]] = {}
    for _, plan in _plans("cuda"):
        modes.setdefault(plan.kind, set()).update(k["mode"] for k in _variants(plan, "cuda", H200))
    for kind, seen in modes.items():
        record = ROW_KINDS[kind]
        # tile mode reduces short rows with one accumulator: kinds of two statistics have no tile form
        expected = {"warp", "block", "split"} | ({"resident"} if record.write else {"tile"} if record.tile else set())
        assert expected <= seen, (kind, seen)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_kind_compiles_in_every_cuda_mode_for_sm90(tmp_path: Path) -> None:
    rc, err = nvcc_object(cuda_bundle(_cuda_sources()), tmp_path / "row_kinds.cu")
    assert rc == 0, err[-4000:]
    assert "warning" not in err, err[-4000:]
