"""The capture I/O bench writes and fetches real samples both ways and reports what it moved."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_bench_times_writing_and_fetching_one_and_several_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "capture_io.json"
    proc = subprocess.run([sys.executable, "bench/capture_io.py", str(out), "--mb", "1", "--cards", "3",
                           "--rounds", "1"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["step"], r["how"].split()[0]) for r in rows] == [
        ("write samples", "1"), ("write samples", rows[1]["how"].split()[0]),
        ("fetch blobs", "one"), ("fetch blobs", rows[3]["how"].split()[0]), ("fetch blobs", "linked")]
    assert all(r["seconds"] > 0 and r["speedup"] > 0 for r in rows)
    assert rows[0]["speedup"] == 1.0 and rows[2]["speedup"] == 1.0
    assert rows[0]["mb"] == 6.0  # three cards, one 1 MiB input and one output each
    assert rows[2]["mb"] == rows[3]["mb"] == rows[4]["mb"] > 8  # every blob each way: 1 MiB tensors
    assert "fetch blobs" in proc.stdout and f"wrote {out}" in proc.stdout
