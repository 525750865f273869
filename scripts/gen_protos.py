"""Generate the Python gRPC code of proto/ into the kernel_forge package.

The generated code is committed; `--check` regenerates into a temporary folder and fails when
the committed copy has drifted from the .proto files (CI runs it).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE = "kernel_forge"
HEADER = '"""Generated from proto/ by scripts/gen_protos.py. Do not edit."""\n'


def generate(out_dir: Path) -> None:
    """Run protoc (from grpcio-tools) over every .proto file, then add package markers."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    cmd = [
        sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}",
        f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", f"--pyi_out={out_dir}",
        *protos,
    ]
    subprocess.run(cmd, check=True, cwd=PROTO_ROOT)
    for folder in [out_dir / PACKAGE, *(p for p in (out_dir / PACKAGE).rglob("*") if p.is_dir())]:
        (folder / "__init__.py").write_text(HEADER)
    (out_dir / PACKAGE / "py.typed").write_text("")


def drifted(committed: Path, fresh: Path) -> list[str]:
    """Files that differ between two generated trees, by relative path."""
    names = {p.relative_to(committed) for p in committed.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    names |= {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
    return sorted(
        str(n) for n in names
        if not (committed / n).is_file() or not (fresh / n).is_file()
        or not filecmp.cmp(committed / n, fresh / n, shallow=False)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed code drifted")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        if args.check:
            diff = drifted(ROOT / PACKAGE, Path(tmp) / PACKAGE)
            if diff:
                print("generated gRPC code drifted from proto/: " + ", ".join(diff), file=sys.stderr)
                print("run: python scripts/gen_protos.py", file=sys.stderr)
                return 1
            print("generated gRPC code matches proto/")
            return 0
        shutil.rmtree(ROOT / PACKAGE, ignore_errors=True)
        shutil.copytree(Path(tmp) / PACKAGE, ROOT / PACKAGE)
    print(f"wrote {PACKAGE}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
