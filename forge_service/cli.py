"""``kforge``: optimise a model, resume and inspect runs, serve the services.

With no service addresses, ``kforge optimize`` starts every service on 127.0.0.1 (ephemeral
ports, real gRPC) in this process; with ``--forge ADDR`` it drives a remote forge service.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from rich.console import Console
from rich.table import Table

from forge_service.config import DEFAULT_PATIENCE, GRAD_MODES, RunConfig
from forge_service.end_to_end import EndToEnd, end_to_end_line
from forge_service.parent_policy import DEFAULT_POLICY, POLICIES
from forge_service.progress import CARD_EVENTS, PHASE_EVENTS, ProgressView
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from kernel_forge.forge.v1 import service_pb2_grpc as forge_grpc
from kforge_domain.backends import BACKEND_CHOICES
from kforge_domain.paths import DEFAULT_RUNS_DIR
from servicekit import terminal
from servicekit.cli_options import (
    add_metrics_arguments,
    add_security_arguments,
    security_from_args,
    start_metrics_from_args,
)
from servicekit.client import channel
from servicekit.errors import KforgeError

console = Console(stderr=True)
out = terminal.console()  # tables fold long op names to fit; JSON is printed unwrapped

SERVICES = {
    "capture": "capture_service.server",
    "agent": "agent_service.server",
    "sandbox": "gpu_sandbox_service.server",
    "forge": "forge_service.server",
}
PROJECT_LOGGERS = ("forge_service", "capture_service", "agent_service", "gpu_sandbox_service", "packager",
                   "servicekit", "search_core", "ui")
PLUGIN_CLIS = ("capture_service.cli", "gpu_sandbox_service.cli", "ui.cli")


# -- connections -------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def forge_stub(args: argparse.Namespace) -> AsyncIterator[forge_grpc.ForgeServiceStub]:
    """A stub of the forge named by --forge, or of an embedded one started for this command.

    The security options secure the connections to the services given by address: the forge
    itself, or with an embedded forge the --capture, --agent and --sandbox services.
    """
    if getattr(args, "forge", None):
        chan = channel(args.forge, security_from_args(args))
        try:
            yield forge_grpc.ForgeServiceStub(chan)
        finally:
            await chan.close()
        return
    from forge_service.embedded import embedded_services

    async with embedded_services(
        args.runs_dir, backend=getattr(args, "backend", "auto"), capture=getattr(args, "capture", None),
        agent=getattr(args, "agent", None), sandboxes=getattr(args, "sandbox", None),
        client_security=security_from_args(args),
    ) as services:
        chan = channel(services.forge_address)
        try:
            yield forge_grpc.ForgeServiceStub(chan)
        finally:
            await chan.close()


def add_connection_arguments(parser: argparse.ArgumentParser, services: bool = False) -> None:
    parser.add_argument("--forge", metavar="ADDR", help="a running forge service (default: start one here)")
    parser.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR, help="run directories (embedded)")
    if services:
        parser.add_argument("--capture", metavar="ADDR", help="a running capture service")
        parser.add_argument("--agent", metavar="ADDR", help="a running agent service")
        parser.add_argument("--sandbox", action="append", metavar="ADDR",
                            help="a running sandbox service (repeat for several)")
    add_security_arguments(parser)


# -- following a run ---------------------------------------------------------------------------
async def follow(stub: forge_grpc.ForgeServiceStub, run_id: str, verbose: bool) -> forge_pb2.Run:
    """Show the run's progress on stderr until it stops (every event too with ``-v``); returns its final state.

    Progress goes to stderr whatever the output format, so ``--json`` keeps stdout for the outcome.
    """
    view = ProgressView(sys.stderr, sys.stderr.isatty())
    try:
        async for event in stub.WatchRun(forge_pb2.WatchRunRequest(run_id=run_id)):
            run = await stub.GetRun(forge_pb2.GetRunRequest(run_id=run_id))
            if verbose or event.kind in PHASE_EVENTS:
                view.phase(run, event.timestamp, f"{event.card_id} {event.message}" if event.card_id else event.message)
            if event.kind in CARD_EVENTS and event.card_id:
                cards = (await stub.ListCards(forge_pb2.ListRunCardsRequest(run_id=run_id))).cards
                card = next((c for c in cards if c.card.id == event.card_id), None)
                if card is not None:
                    view.card(run, card, event.timestamp, started=event.kind == "card_started")
    finally:
        view.close()
    return await stub.GetRun(forge_pb2.GetRunRequest(run_id=run_id))


def card_table(cards: list[forge_pb2.RunCard]) -> Table:
    """The searched cards, each op in full above its card id; eager time as median ± IQR."""
    numbers = ("share", "eager µs ± IQR", "best µs", "speedup")
    table = terminal.folding_table("operator cards", ("op\ncard", *numbers, "class", "status"), right=numbers,
                                   whole=(*numbers, "class"))
    for c in cards:
        if c.status == "skipped":
            continue
        table.add_row(
            f"{c.card.op}\n{c.card.id}", f"{c.card.time_share:.1%}", eager_text(c),
            f"{c.best_latency_us:.2f}" if c.HasField("best_latency_us") else "—",
            f"{c.speedup:.2f}x" if c.HasField("speedup") else "—", c.audit_class,
            c.status + (f" ({c.reason})" if c.reason and c.status != "done" else ""),
        )
    return table


def eager_text(card: forge_pb2.RunCard) -> str:
    """A card's eager time as median ± IQR, ``12.30 ± 0.40``: with a kernel, the series its speedup was
    timed in, else the capture's; "—" for a figure not recorded."""
    spread: float | None
    if card.HasField("eager_latency_us"):
        median = card.eager_latency_us
        spread = card.eager_spread_us if card.HasField("eager_spread_us") else None
    else:
        median = card.card.eager_us  # 0: not timed
        spread = card.card.eager_spread_us if card.card.HasField("eager_spread_us") else None
    if not median:
        return "—"
    return f"{median:.2f} ± " + (f"{spread:.2f}" if spread is not None else "—")


async def export_cast(stub: forge_grpc.ForgeServiceStub, run_id: str, dest: Path) -> int:
    data = bytearray()
    async for chunk in stub.ExportCast(forge_pb2.ExportCastRequest(run_id=run_id)):
        data += chunk.data
    dest.write_bytes(bytes(data))
    return len(data)


async def finish(stub: forge_grpc.ForgeServiceStub, run: forge_pb2.Run, args: argparse.Namespace) -> int:
    """Print the outcome of a stopped run and write its .cast; returns the exit code."""
    cards = list((await stub.ListCards(forge_pb2.ListRunCardsRequest(run_id=run.run_id))).cards)
    report: dict[str, Any] = {}
    if run.status == "done":
        rep = await stub.GetReport(forge_pb2.GetReportRequest(run_id=run.run_id))
        report = json.loads(rep.json)
    if getattr(args, "out", None) and run.status == "done":
        size = await export_cast(stub, run.run_id, args.out)
        console.print(f"wrote {args.out} ({size} bytes)")
    if args.json:
        out.print_json(data={
            "run": as_json(run),
            "cards": [as_json(c) for c in cards],
            "report": report,
        })
    else:
        out.print(card_table(cards))
        skipped = [c for c in cards if c.status == "skipped"]
        if skipped:
            # Module cards contain operator cards, and a compiled-only card is another layout of one:
            # only eager operator cards' shares add up.
            share = sum(c.card.time_share for c in skipped if c.card.kind != "module" and not c.card.compiled_only)
            out.print(f"{len(skipped)} other cards (operators: {share:.1%} of eager time) stay on eager; "
                      f"`kforge report {run.run_id}` lists why")
        e2e = report.get("end_to_end") or {}
        if e2e.get("measured"):
            out.print(end_to_end_line(EndToEnd.model_validate(e2e)))
        elif e2e:
            out.print(f"end to end not measured: {e2e.get('error')}")
        out.print(f"run {run.run_id}: {run.status}" + (f" — {run.error}" if run.error else "")
                  + f" ({run.evaluations_done} evaluations, run dir {run.run_dir})")
    return 0 if run.status == "done" else 1


def as_json(message: Any) -> dict[str, Any]:
    """A message as JSON for scripts: every field, zero counts too (``cards_total: 0``), by its proto name."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


# -- commands ----------------------------------------------------------------------------------
async def cmd_optimize(args: argparse.Namespace) -> int:
    config = RunConfig(
        model_spec=str(Path(args.model_spec).resolve()) if Path(args.model_spec.split(":")[0]).exists()
        else args.model_spec,
        backend=args.backend, proposer=args.proposer, api_base=args.api_base or "", budget_per_card=args.budget,
        max_cards=args.max_cards, max_compiled_cards=args.max_compiled_cards,
        budget_usd=args.budget_usd, time_limit_s=args.time_limit,
        target_cards=args.target_card or [], sandbox_addresses=args.sandbox if args.forge and args.sandbox else [],
        seed=args.seed, grad_mode=args.grad_mode, samples=args.samples, min_speedup=args.min_speedup,
        include_vendor_ops=args.include_vendor_ops, parallel=args.parallel,
        sample_budget_bytes=args.sample_budget_mb << 20, skip_compile_baseline=args.no_compile_baseline,
        cuda_graphs=args.cuda_graphs, search_policy=args.search_policy, patience=args.patience,
    )
    async with forge_stub(args) as stub:
        run = await stub.StartRun(forge_pb2.StartRunRequest(config=config.to_proto()))
        console.print(f"run {run.run_id} in {run.run_dir or args.runs_dir}")
        run = await follow(stub, run.run_id, verbose=args.verbose)
        return await finish(stub, run, args)


async def cmd_resume(args: argparse.Namespace) -> int:
    async with forge_stub(args) as stub:
        run = await stub.ResumeRun(forge_pb2.ResumeRunRequest(run_id=args.run_id))
        run = await follow(stub, run.run_id, verbose=args.verbose)
        return await finish(stub, run, args)


async def cmd_runs(args: argparse.Namespace) -> int:
    async with forge_stub(args) as stub:
        runs = (await stub.ListRuns(forge_pb2.ListRunsRequest())).runs
    if args.json:
        out.print_json(data=[as_json(r) for r in runs])
        return 0
    numbers = ("evaluations", "cost $", "e2e speedup")
    table = terminal.folding_table("runs", ("run", "model\nproposer", "backend", "status", *numbers),
                                   right=numbers, whole=("run", "backend", "status", "evaluations", "cost $"))
    for r in runs:
        table.add_row(r.run_id, f"{r.model_name}\n{r.config.proposer}", r.config.backend, r.status,
                      f"{r.evaluations_done}/{r.evaluations_budget}", f"{r.cost.usd:.4f}",
                      f"{r.best_e2e_speedup:.2f}x" if r.HasField("best_e2e_speedup") else "—")
    out.print(table)
    return 0


async def cmd_report(args: argparse.Namespace) -> int:
    async with forge_stub(args) as stub:
        report = await stub.GetReport(forge_pb2.GetReportRequest(run_id=args.run_id))
    # Written as is: a console would wrap long lines, breaking the JSON and the Markdown tables.
    sys.stdout.write((report.json if args.json else report.markdown).rstrip("\n") + "\n")
    return 0


def cmd_export_bundle(args: argparse.Namespace) -> int:
    """Write a run's bundle, which ``packager build`` reads; local: it opens the run directory itself."""
    from forge_service.bundle import export_bundle
    from packager.errors import CastError
    from servicekit.errors import FailedPrecondition, NotFound

    run_dir = Path(args.run) if Path(args.run).is_dir() else args.runs_dir / args.run
    if not run_dir.is_dir():
        raise NotFound(f"no run directory {args.run!r} (also looked for {run_dir})")
    try:
        path, bundle = export_bundle(run_dir, args.out)
    except (LookupError, CastError) as exc:
        raise FailedPrecondition(str(exc)) from exc
    console.print(f"wrote {path}: {len(bundle.kernels)} kernels, {len(bundle.fallbacks)} cards on eager")
    return 0


async def cmd_serve(args: argparse.Namespace) -> int:
    from servicekit.server import serve_until_signal

    module = importlib.import_module(SERVICES[args.service])
    metrics = start_metrics_from_args(args)
    started = await module.start_from_args(args)
    bound = getattr(started, "bound", started)
    console.print(f"{args.service} service listening on {bound.address}")
    try:
        await serve_until_signal(bound)
    finally:
        if hasattr(started, "manager"):
            await started.manager.close()
        if metrics is not None:
            metrics.close()
    return 0


# -- parser ------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kforge", description="Kernel Forge: faster PyTorch models, verified.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", required=True)

    opt = sub.add_parser("optimize", help="capture a model, search kernels for its cards, write a .cast")
    opt.add_argument("model_spec", metavar="MODEL_SPEC",
                     help="a .py file defining get_model() and get_inputs(), or package.module:factory")
    opt.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")
    opt.add_argument("--budget", type=int, default=8, help="candidate evaluations per card")
    opt.add_argument("--max-cards", type=int, default=5, help="search the K cards carrying the most eager time")
    opt.add_argument("--max-compiled-cards", type=int, default=None,
                     help="also search up to K cards of layouts only torch.compile's graphs make "
                          "(default: half of --max-cards; 0: none)")
    opt.add_argument("--out", type=Path, help="write the .cast here")
    opt.add_argument("--proposer", default="offline", help='"offline" or a litellm model, e.g. openai/gpt-4.1')
    opt.add_argument("--api-base", help="base URL of an OpenAI-compatible or other litellm endpoint")
    opt.add_argument("--budget-usd", type=float, help="stop spending on LLM calls past this many dollars")
    opt.add_argument("--time-limit", type=float,
                     help="stop searching once the run has lasted this many seconds, capture included "
                          "(packaging and the end-to-end check follow)")
    opt.add_argument("--target-card", action="append", help="search this card id or op (repeatable)")
    opt.add_argument("--seed", type=int, default=0)
    opt.add_argument("--samples", type=int, default=2, help="reference samples kept per card")
    opt.add_argument("--grad-mode", choices=GRAD_MODES, default="inference")
    opt.add_argument("--sample-budget-mb", type=int, default=0,
                     help="total size of captured reference samples (default: the capture service's)")
    opt.add_argument("--min-speedup", type=float, default=1.0, help="package kernels at least this much faster")
    opt.add_argument("--include-vendor-ops", action="store_true", help="also search convolution/matmul/attention")
    opt.add_argument("--parallel", type=int, default=0,
                     help="candidates in flight (default: what the sandboxes take at once, several per GPU)")
    opt.add_argument("--no-compile-baseline", action="store_true",
                     help="end to end, time eager and the .cast only: no torch.compile (minutes on a large model); "
                          "parity is then judged by the output dtype's tolerance, and capture adds no cards for "
                          "the layouts only torch.compile's graphs make")
    opt.add_argument("--cuda-graphs", action="store_true",
                     help="end to end, also compare torch.compile and cast.compile with mode=reduce-overhead")
    opt.add_argument("--search-policy", choices=POLICIES, default=DEFAULT_POLICY,
                     help="how a card's search picks the candidates it revises: mcts (default), greedy (always the "
                          "fastest so far) or beam (the 3 fastest in turn), to compare searches at equal budget")
    opt.add_argument("--patience", type=int, default=DEFAULT_PATIENCE,
                     help="stop a card after this many evaluations without improvement (0: spend its whole budget)")
    opt.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_connection_arguments(opt, services=True)
    opt.set_defaults(func=cmd_optimize)

    res = sub.add_parser("resume", help="continue a run that was interrupted")
    res.add_argument("run_id", metavar="RUN_ID")
    res.add_argument("--out", type=Path, help="write the .cast here")
    res.add_argument("--json", action="store_true")
    add_connection_arguments(res, services=True)
    res.set_defaults(func=cmd_resume)

    runs = sub.add_parser("runs", help="list runs")
    runs.add_argument("--json", action="store_true")
    add_connection_arguments(runs)
    runs.set_defaults(func=cmd_runs)

    rep = sub.add_parser("report", help="a run's report (Markdown, or --json)")
    rep.add_argument("run_id", metavar="RUN_ID")
    rep.add_argument("--json", action="store_true")
    add_connection_arguments(rep)
    rep.set_defaults(func=cmd_report)

    bundle = sub.add_parser("export-bundle", help="write a finished run's bundle for `packager build`")
    bundle.add_argument("run", metavar="RUN", help="run directory, or run id under --runs-dir")
    bundle.add_argument("--out", type=Path, help="the bundle directory (default: RUN_DIR/bundle)")
    bundle.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR, help="where run ids are looked up")
    bundle.set_defaults(func=cmd_export_bundle)

    serve = sub.add_parser("serve", help="run one service until SIGTERM")
    serve_sub = serve.add_subparsers(dest="service", required=True)
    for name, module_name in SERVICES.items():
        p = serve_sub.add_parser(name, help=f"the {name} service")
        importlib.import_module(module_name).add_serve_arguments(p)
        add_metrics_arguments(p)
        p.set_defaults(func=cmd_serve)

    for module_name in PLUGIN_CLIS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(sub)
    return parser


def run_command(func: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> int:
    try:
        result = func(args)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except KforgeError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    except grpc.aio.AioRpcError as exc:
        console.print(f"[red]error:[/] {exc.code().name}: {exc.details()}")
        return 2
    except KeyboardInterrupt:
        console.print("interrupted")
        return 130


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.verbose:  # the project's own details; libraries (grpc, asyncio, matplotlib) stay at warnings
        for name in PROJECT_LOGGERS:
            logging.getLogger(name).setLevel(logging.DEBUG)
    return run_command(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
