"""Moving a capture's reference samples: writing them in capture, fetching them into the forge.

A large model's samples are gigabytes (16 GiB for the SD3.5 VAE decoder at 1024 px), written by
capture and then copied over gRPC into the run's folder. Both are timed one blob at a time and as
the code does it now, several at a time, in one process, alternating, on the same data:

- writing: ``capture_service.session._write_samples`` on synthetic records, with one writer thread
  and with ``SAMPLE_WRITERS``;
- fetching: a real capture service on loopback captures a model of a few large elementwise ops,
  then ``CaptureClient.fetch_blob`` copies every blob one after another, ``fetch_blobs`` copies
  them ``BLOB_FETCHES`` at a time, and ``take_local_blobs`` links them from the service's work
  folder (what the forge does when the capture service is embedded).

Prints a table and writes JSON.

    .venv/bin/python bench/capture_io.py OUT.json [--mb 64] [--cards 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import capture_service.session as session
from capture_service import server as capture_server
from capture_service.blobs import BlobStore
from capture_service.records import CallSample
from forge_service.clients import BLOB_FETCHES, CaptureClient
from forge_service.local_blobs import take_local_blobs
from kernel_forge.capture.v1 import messages_pb2 as capture_pb2
from kforge_domain.blobs import SAFETENSORS_SUFFIX, blob_file_name

LINKED = "linked locally"
MODEL = """
import torch


class Chain(torch.nn.Module):
    def forward(self, x):
        for op in (torch.tanh, torch.sigmoid, torch.relu, torch.exp, torch.neg, torch.abs, torch.sin, torch.cos):
            x = op(x)
        return x


def get_model():
    return Chain()


def get_inputs():
    return torch.randn({rows}, 1024)
"""


@dataclass
class SyntheticRecord:
    """What ``_write_samples`` reads of a record: one sample of one input and one output."""

    eager_us: float
    samples: list[CallSample] = field(default_factory=list)
    optimisable: bool = True
    vendor_op: bool = False
    call_count: int = 1


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def write_seconds(records: list[SyntheticRecord], writers: int, work: Path) -> float:
    folder = Path(tempfile.mkdtemp(dir=work))
    try:
        return timed(lambda: session._write_samples(records, BlobStore(folder), 1 << 50,  # type: ignore[arg-type]
                                                    writers))
    finally:
        shutil.rmtree(folder)


async def fetch_seconds(spec: Path, work: Path, rounds: int) -> tuple[dict[str, list[float]], float]:
    """Seconds per round of each way of fetching every blob of a capture of ``spec``, and their MiB."""
    bound = await capture_server.start(work_dir=work / "captures")
    client = CaptureClient(bound.address)
    seconds: dict[str, list[float]] = {"one at a time": [], f"{BLOB_FETCHES} at a time": [], LINKED: []}
    mib = 0.0
    try:
        request = capture_pb2.StartCaptureRequest(model_spec=str(spec), sample_budget_bytes=1 << 40)

        async def ignore(_: object) -> None:
            return None

        capture_id = await client.capture(request, ignore)
        cards, _ = await client.cards(capture_id)
        shas = sorted({blob for card in cards for s in card.samples for blob in (s.inputs_blob, s.outputs_blob)})
        names = {sha: blob_file_name(sha, SAFETENSORS_SUFFIX) for sha in shas}
        for _ in range(rounds):
            for label in seconds:
                folder = Path(tempfile.mkdtemp(dir=work))
                started = time.perf_counter()
                if label == "one at a time":
                    for sha in shas:
                        await client.fetch_blob(capture_id, sha, folder / sha)
                elif label == LINKED:
                    await asyncio.to_thread(take_local_blobs, work / "captures", capture_id,
                                            {sha: (names[sha], folder / sha) for sha in shas})
                else:
                    await client.fetch_blobs(capture_id, {sha: folder / sha for sha in shas})
                seconds[label].append(time.perf_counter() - started)
                mib = sum(f.stat().st_size for f in folder.iterdir()) / 2**20
                shutil.rmtree(folder)
        return seconds, mib
    finally:
        await client.close()
        await bound.stop(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--mb", type=int, default=64, help="each sample tensor's size")
    parser.add_argument("--cards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rows = args.mb * 2**20 // 4 // 1024
    writers = session.SAMPLE_WRITERS
    rows_out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        torch.manual_seed(0)
        records = []
        for i in range(args.cards):
            x = torch.randn(rows, 1024)
            records.append(SyntheticRecord(eager_us=float(args.cards - i), samples=[CallSample([x], [x.neg()])]))
        total_mb = sum(s.nbytes for r in records for s in r.samples) / 2**20
        write = {1: [], writers: []}  # type: dict[int, list[float]]
        for _ in range(args.rounds):
            for count in write:
                write[count].append(write_seconds(records, count, work))
        del records
        spec = work / "chain.py"
        spec.write_text(MODEL.format(rows=rows))
        fetch, fetched_mb = asyncio.run(fetch_seconds(spec, work, args.rounds))
    base_write = statistics.median(write[1])
    for count, values in write.items():
        rows_out.append({"step": "write samples", "how": f"{count} writer thread{'s' * (count > 1)}",
                         "mb": total_mb, "seconds": statistics.median(values), "all": values,
                         "speedup": base_write / statistics.median(values)})
    base_fetch = statistics.median(fetch["one at a time"])
    for label, values in fetch.items():
        rows_out.append({"step": "fetch blobs", "how": label, "mb": fetched_mb,
                         "seconds": statistics.median(values), "all": values,
                         "speedup": base_fetch / statistics.median(values)})
    print(f"{'step':14} {'how':18} {'MiB':>7} {'s':>7} {'speedup':>8}")
    for row in rows_out:
        print(f"{row['step']:14} {row['how']:18} {row['mb']:>7.0f} {row['seconds']:>7.2f} {row['speedup']:>7.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": platform.machine(), "cpu_count": os.cpu_count(),
                                    "rounds": args.rounds, "rows": rows_out}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
