"""The forge's sandbox pool against real sandbox services: each takes the candidates it says it takes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from forge_service.clients import SandboxClient, SandboxPool
from forge_service.runs import _first_device
from gpu_sandbox_service import server
from servicekit.errors import FailedPrecondition


def test_a_sandbox_with_two_run_slots_gets_two_candidates_at_once(tmp_path: Path) -> None:
    async def admitted() -> tuple[int, int, str]:
        bound = await server.start(backend="cpu", work_dir=tmp_path, workers=2)
        client = SandboxClient(bound.address)
        try:
            pool = SandboxPool([client])
            before = pool.size
            info = await _first_device(pool, "cpu")
            return before, pool.size, info.backend
        finally:
            await client.close()
            await bound.stop()

    assert asyncio.run(admitted()) == (1, 2, "cpu")


def test_an_address_given_twice_is_one_sandbox_taking_what_it_says(tmp_path: Path) -> None:
    async def admitted() -> tuple[int, int]:
        bound = await server.start(backend="cpu", work_dir=tmp_path, workers=2)
        clients = [SandboxClient(bound.address), SandboxClient(bound.address)]
        try:
            pool = SandboxPool(clients)
            await _first_device(pool, "cpu")
            return len(pool.clients), pool.size
        finally:
            for client in clients:
                await client.close()
            await bound.stop()

    assert asyncio.run(admitted()) == (1, 2)


def test_a_run_for_a_backend_no_sandbox_serves_names_what_each_serves(tmp_path: Path) -> None:
    async def refused() -> None:
        bound = await server.start(backend="cpu", work_dir=tmp_path)
        client = SandboxClient(bound.address)
        try:
            await _first_device(SandboxPool([client]), "cuda")
        finally:
            await client.close()
            await bound.stop()

    with pytest.raises(FailedPrecondition, match=r"no sandbox serves backend 'cuda' \(127\.0\.0\.1:\d+: cpu\)"):
        asyncio.run(refused())
