"""The ``packager`` command: build a .cast from a finished run, inspect it, verify it.

``packager build RUN_DIR|RUN_ID -o F.cast [--min-speedup X] [--runs-dir DIR] [--sign-key-file F]``
``packager inspect F.cast [--json]``
``packager verify F.cast [--key-file F]``

User errors print one line and exit 1; no traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from kforge_domain.paths import DEFAULT_RUNS_DIR
from packager.archive import read_archive
from packager.errors import CastError
from packager.manifest import MANIFEST_FILE, MODES, CastManifest


class CliError(Exception):
    """A problem with the command's arguments or inputs."""


def read_key_file(path: Path | None) -> bytes | None:
    """The signing key: the file's bytes without surrounding whitespace (so `echo key > f` works)."""
    if path is None:
        return None
    try:
        key = path.read_bytes().strip()
    except OSError as exc:
        raise CliError(f"cannot read key file {path}: {exc.strerror}") from exc
    if not key:
        raise CliError(f"key file {path} is empty")
    return key


def resolve_run_dir(run: str, runs_dir: Path) -> Path:
    """A run directory given directly, or a run id under ``runs_dir``."""
    direct = Path(run)
    if direct.is_dir():
        return direct
    candidate = runs_dir / run
    if candidate.is_dir():
        return candidate
    raise CliError(f"no run directory {run!r} (also looked for {candidate})")


def cmd_build(args: argparse.Namespace) -> int:
    from forge_service.store import package_inputs
    from packager.format import build_cast

    run_dir = resolve_run_dir(args.run, args.runs_dir)
    key = read_key_file(args.sign_key_file)
    try:
        model, kernels, fallbacks = package_inputs(run_dir)
    except Exception as exc:  # the run store names what is wrong with the run
        raise CliError(f"cannot read the run in {run_dir}: {exc}") from exc
    manifest = build_cast(args.output, model, kernels, fallbacks, min_speedup=args.min_speedup, signing_key=key)
    print(f"wrote {args.output}: {len(manifest.kernels)} kernels, {len(manifest.fallbacks)} cards on eager"
          f"{', signed' if key else ''}")
    return 0


def _manifest(path: Path, key: bytes | None = None) -> tuple[CastManifest, bool, bool, int]:
    archive = read_archive(path, key=key)
    if MANIFEST_FILE not in archive.files:
        raise CliError(f"{path}: {MANIFEST_FILE} is missing")
    manifest = CastManifest.from_json(archive.files[MANIFEST_FILE])
    return manifest, archive.signed, archive.signature_verified, len(archive.files)


def cmd_inspect(args: argparse.Namespace) -> int:
    manifest, signed, _, _ = _manifest(args.cast)
    if args.json:
        data = dataclasses.asdict(manifest)
        data["signed"] = signed
        print(json.dumps(data, indent=1, sort_keys=True))
        return 0
    from servicekit import terminal

    model = manifest.model
    out = terminal.console()
    numbers = ("eager µs\nkernel µs", "guard µs", "speedup")
    verdicts = "eager\ncompiled\nCUDA graphs"
    kernels = terminal.folding_table(f"{args.cast.name}: {model.name} (run {model.run_id}, {manifest.producer})",
                                     ("op\ncard", "class\narch", *numbers, verdicts), right=numbers,
                                     whole=(*numbers, verdicts))
    for k in manifest.kernels:
        kernels.add_row(f"{k.op}\n{k.card_id}", f"{k.audit_class}\n{k.arch}",
                        f"{k.eager_latency_us:.2f}\n{k.latency_us:.2f}", f"{k.guard_cost_us:.2f}",
                        f"{k.effective_speedup:.2f}x", "\n".join(k.mode_verdict(m).verdict for m in MODES))
    out.print(kernels)
    if manifest.fallbacks:
        fallbacks = terminal.folding_table("cards on eager", ("op\ncard", "class", "reason"))
        for f in manifest.fallbacks:
            fallbacks.add_row(f"{f.op}\n{f.card_id}", f.audit_class, f.reason)
        out.print(fallbacks)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    key = read_key_file(args.key_file)
    manifest, signed, verified, n_files = _manifest(args.cast, key)
    signature = "signature verified" if verified else "signed (no key given)" if signed else "unsigned"
    print(f"OK {args.cast}: {n_files} files verified, {len(manifest.kernels)} kernels, "
          f"format {manifest.format_version}, {signature}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add build / inspect / verify to a parser (``packager`` itself, or ``kforge``)."""
    build = subparsers.add_parser("build", help="build a .cast from a finished run")
    build.add_argument("run", help="run directory, or run id under --runs-dir")
    build.add_argument("-o", "--output", type=Path, required=True, help="the .cast to write")
    build.add_argument("--min-speedup", type=float, default=1.0, help="least speedup (guard cost included)")
    build.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR, help="where run ids are looked up")
    build.add_argument("--sign-key-file", type=Path, help="sign with the HMAC-SHA256 key in this file")
    build.set_defaults(func=cmd_build)
    inspect = subparsers.add_parser("inspect", help="list a .cast's kernels and fallbacks")
    inspect.add_argument("cast", type=Path)
    inspect.add_argument("--json", action="store_true", help="print the manifest as JSON")
    inspect.set_defaults(func=cmd_inspect)
    verify = subparsers.add_parser("verify", help="check a .cast's checksums, format version and signature")
    verify.add_argument("cast", type=Path)
    verify.add_argument("--key-file", type=Path, help="verify the signature with the key in this file")
    verify.set_defaults(func=cmd_verify)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="packager", description=__doc__.splitlines()[0])
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (CastError, CliError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
