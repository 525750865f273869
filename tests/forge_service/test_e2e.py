"""The end-to-end measurement child: eager, .cast, torch.compile, in one process."""

import json
import subprocess
import sys
from pathlib import Path

from packager.format import build_cast
from packager.manifest import ModelIdentity

MODEL = Path(__file__).parent / "models" / "tiny_mlp.py"


def test_a_cast_without_kernels_is_not_compiled_a_second_time(tmp_path: Path) -> None:
    cast = tmp_path / "empty.cast"
    build_cast(cast, ModelIdentity(str(MODEL), "tiny_mlp", "r1"), [], [])
    proc = subprocess.run([sys.executable, "-m", "forge_service.e2e", "--model", str(MODEL), "--cast", str(cast)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["measured"] and result["parity_ok"] and result["parity_max_rel_error"] == 0.0
    assert result["eager_ms"] > 0 and result["cast_ms"] > 0 and result["compile_ms"] > 0
    assert "cast_compile_ms" not in result and result["kernel_stats"] == {}
