"""The ``packager`` command: build a .cast from a run bundle, inspect it, verify it.

``packager build BUNDLE|RUN_DIR|RUN_ID -o F.cast [--min-speedup X] [--runs-dir DIR] [--sign-key-file F]``
``packager inspect F.cast [--json]``
``packager verify F.cast [--key-file F]``

The build reads a run bundle (``packager.bundle``) that ``kforge export-bundle`` writes, never
the forge's run store, so the packager works without the forge installed. A run directory (or
run id) is accepted when it holds its bundle.

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
from packager.bundle import BUNDLE_FILE, RUN_BUNDLE_DIR, read_bundle
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


def resolve_bundle(run: str, runs_dir: Path) -> Path:
    """A bundle given directly, or the bundle inside a run directory given directly or by id under ``runs_dir``."""
    for place in (Path(run), runs_dir / run):
        if not place.is_dir():
            continue
        if (place / BUNDLE_FILE).is_file():
            return place
        if (place / RUN_BUNDLE_DIR / BUNDLE_FILE).is_file():
            return place / RUN_BUNDLE_DIR
        raise CliError(f"{place} is not a run bundle and holds none: export the run's bundle first "
                       f"(kforge export-bundle {run})")
    raise CliError(f"no run bundle or run directory {run!r} (also looked for {runs_dir / run})")


def cmd_build(args: argparse.Namespace) -> int:
    from packager.format import build_cast

    bundle = read_bundle(resolve_bundle(args.run, args.runs_dir))
    key = read_key_file(args.sign_key_file)
    manifest = build_cast(args.output, bundle.model, bundle.kernels, bundle.fallbacks, min_speedup=args.min_speedup,
                          signing_key=key)
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
    build = subparsers.add_parser("build", help="build a .cast from a run bundle (kforge export-bundle)")
    build.add_argument("run", help="run bundle, or a run directory or run id (under --runs-dir) holding one")
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
