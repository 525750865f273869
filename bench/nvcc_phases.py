"""Where nvcc's time goes when the sandbox builds a cuda candidate, and which flags cut it.

The offline proposer renders real candidates (a bf16 softmax, a group norm, a gelu and a row sum at
their default knobs for an H200, plus ``includes_only``: their headers around a one-line kernel, the
fixed cost of any build), or ``--sources`` names a folder of ``.cu`` files. Each is built into a
shared object by every variant of flags below, in interleaved rounds, with ``nvcc -time``. Per
variant the table gives the median wall and CPU seconds of one build (CPU: all of nvcc's processes),
the median of the differences from ``before`` built back to back on the same source (what a busy
machine disturbs least), and the median ms of each nvcc phase (``[dlink]``: the device-link step's
own). Then every variant's kernels are disassembled (``cuobjdump -sass``: the instructions with
their encodings) and compared, function by function, with ``before``'s: a flag change may count
only if every kernel's SASS is identical. cuobjdump and nvdisasm come with the CUDA toolkit, or
from the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels (``--tools`` their ``bin`` folders).

    .venv/bin/python bench/nvcc_phases.py [--rounds 5] [--variants sandbox,host_O1,...] [--sources DIR]
        [--arch sm_90] [--tools DIR ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpu_sandbox_service.compiler import INCLUDE_DIR, detect_toolchain  # noqa: E402

if TYPE_CHECKING:
    from kforge_domain.card import OperatorCard

TRIVIAL_KERNEL = """__global__ void kf_fill(float *y) { y[threadIdx.x] = 1.0f; }
extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {
  kf_fill<<<1, 32, 0, (cudaStream_t)stream>>>((float *)outputs[0].data);
  return cudaGetLastError() != cudaSuccess;
}
"""


def variants(arch: str) -> dict[str, list[str]]:
    """Flag sets to compare, without input and output paths: ``before`` the sandbox's flags until it skipped
    device linking, ``sandbox`` its flags now, each other one ``before`` with one change."""
    before = [f"-arch={arch}", "-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", f"-I{INCLUDE_DIR}"]
    number = arch.removeprefix("sm_")
    sass_only = [f"-gencode=arch=compute_{number},code={arch}", *before[1:]]
    return {
        "before": before,
        "sandbox": detect_toolchain("cuda", arch).flags(),
        "host_O1": [*before[:1], "-O1", *before[2:]],
        "host_O0": [*before[:1], "-O0", *before[2:]],
        "sass_only": sass_only,
        "pipe": [*before, "-Xcompiler", "-pipe"],
        "split_compile": [*before, "-split-compile=0"],
        "cudart_shared": [*before, "-cudart", "shared"],
    }


def _card(op: Any, args: list[Any]) -> OperatorCard:
    """The cuda card of one aten call, as capture writes it (the call runs on the cpu)."""
    import torch

    from kforge_domain.card import OperatorCard, TensorSpec
    from packager.variant import tensor_signature, variant_key

    def spec(t: torch.Tensor) -> TensorSpec:
        s = tensor_signature(t)
        return TensorSpec(shape=list(s.shape), stride=list(s.stride), dtype=s.dtype,
                          storage_offset=s.storage_offset, aligned16=s.aligned16)

    name = f"aten::{op._schema.name.removeprefix('aten::')}.{op._overloadname}"
    with torch.inference_mode():
        result = op(*args)
    outs = [r for r in (result if isinstance(result, (tuple, list)) else [result]) if isinstance(r, torch.Tensor)]
    key = variant_key(name, args, {}).to_json()
    key["tensors"] = [{**t, "device": "cuda"} for t in key["tensors"]]
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return OperatorCard(id=name, kind="aten", op=name, device="cuda", key=key, inputs=[spec(t) for t in tensors],
                        outputs=[spec(o) for o in outs])


def proposer_sources(arch: str) -> dict[str, str]:
    """Candidates the offline proposer writes for a few common cards, at their default knobs."""
    import torch

    from agent_service.offline.catalog import plan_for_card
    from kforge_domain.device import DeviceInfo

    aten, bf16 = torch.ops.aten, torch.bfloat16
    device = DeviceInfo(backend="cuda", name="NVIDIA H200", arch=arch, sm_count=132, l2_bytes=60 << 20)
    calls: dict[str, tuple[Any, list[Any]]] = {
        "softmax": (aten._softmax.default, [torch.randn(256, 1024, dtype=bf16), -1, False]),
        "group_norm": (aten.native_group_norm.default,
                       [torch.randn(2, 128, 32, 32, dtype=bf16), torch.randn(128, dtype=bf16),
                        torch.randn(128, dtype=bf16), 2, 128, 1024, 32, 1e-6]),
        "gelu": (aten.gelu.default, [torch.randn(64, 1024, dtype=bf16)]),
        "row_sum": (aten.sum.dim_IntList, [torch.randn(8, 65536, dtype=bf16), [-1]]),
    }
    sources = {}
    for name, (op, args) in calls.items():
        plan = plan_for_card(_card(op, args), "cuda")
        sources[name] = plan.render("cuda", plan.knob_space("cuda", device).default(), device)
    # The fixed cost: the templates' headers around a one-line kernel.
    includes = [line for line in sources["softmax"].splitlines() if line.startswith("#include")]
    sources["includes_only"] = "\n".join([*includes, TRIVIAL_KERNEL])
    return sources


def _phase_ms(csv_path: Path) -> dict[str, float]:
    """nvcc's ``-time`` CSV as phase -> ms; phases of the device-link step are marked ``[dlink]``."""
    phases: dict[str, float] = defaultdict(float)
    with csv_path.open() as f:
        rows = list(csv.reader(f))
    for row in rows[1:]:
        if len(row) < 8:
            continue
        phase, output, ms = row[1].strip(), Path(row[3].strip()).name, float(row[6])
        phases[phase + (" [dlink]" if output.startswith("tmpxft") and "_dlink." in output else "")] += ms
    return dict(phases)


def build(nvcc: str, flags: list[str], source: Path, library: Path) -> tuple[float, float, dict[str, float]]:
    """Wall seconds and CPU seconds (every process of nvcc's) of one build, and its phases' ms."""
    timing = library.with_suffix(".csv")
    timing.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([nvcc, *flags, "-time", str(timing), "-o", str(library), str(source)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc {' '.join(flags)} failed on {source.name}:\n{proc.stderr[-3000:]}")
    return wall, cpu, _phase_ms(timing)


def kernel_sass(cuobjdump: str, library: Path) -> dict[str, str]:
    """Each kernel's SASS (instructions with their encodings), by mangled name."""
    text = subprocess.run([cuobjdump, "-sass", str(library)], capture_output=True, text=True, check=True).stdout
    functions: dict[str, str] = {}
    for block in re.split(r"^\s*Function : ", text, flags=re.M)[1:]:
        name, _, body = block.partition("\n")
        code = [line.strip() for line in body.splitlines() if line.strip().startswith(("/*", ".headerflags"))]
        functions[name.strip()] = "\n".join(code)
    return functions


def exports(library: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--variants", default="", help="comma-separated names (default: all)")
    parser.add_argument("--sources", type=Path, help="a folder of .cu candidates instead of the proposer's")
    parser.add_argument("--tools", type=Path, action="append", default=[], help="folders holding cuobjdump/nvdisasm")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    os.environ["PATH"] = os.pathsep.join([*map(str, args.tools), os.environ["PATH"]])
    nvcc = detect_toolchain("cuda", args.arch).compiler
    all_variants = variants(args.arch)
    names = [n for n in args.variants.split(",") if n] or list(all_variants)
    chosen = {n: all_variants[n] for n in ["before", *names] if n in all_variants}
    if args.sources:
        sources = {p.stem: p.read_text() for p in sorted(args.sources.glob("*.cu"))}
    else:
        sources = proposer_sources(args.arch)
    if not sources:
        parser.error(f"no .cu file in {args.sources}")

    walls: dict[str, list[float]] = defaultdict(list)
    cpus: dict[str, list[float]] = defaultdict(list)
    phases: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="nvcc-phases-") as tmp:
        work = Path(tmp)
        for name, text in sources.items():
            (work / f"{name}.cu").write_text(text)
        for _ in range(args.rounds):
            for source in sources:
                order = list(chosen)
                rng.shuffle(order)  # interleaved: a busy spell of the machine spreads over every variant
                for variant in order:
                    wall, cpu, ms = build(nvcc, chosen[variant], work / f"{source}.cu",
                                          work / f"{source}.{variant}.so")
                    walls[variant].append(wall)
                    cpus[variant].append(cpu)
                    for phase, value in ms.items():
                        phases[variant][phase].append(value)

        cuobjdump = shutil.which("cuobjdump")
        sass_same: dict[str, bool | None] = {}
        exported: dict[str, bool] = {}
        for variant in chosen:
            exported[variant] = all("kf_launch" in exports(work / f"{s}.{variant}.so") for s in sources)
            if cuobjdump is None:
                sass_same[variant] = None
                continue
            sass_same[variant] = all(
                kernel_sass(cuobjdump, work / f"{s}.{variant}.so") == kernel_sass(cuobjdump, work / f"{s}.before.so")
                for s in sources)
            if variant == "before":
                assert all(kernel_sass(cuobjdump, work / f"{s}.before.so") for s in sources), "no kernel SASS found"

    all_phases = sorted({p for v in phases.values() for p in v},
                        key=lambda p: -statistics.median(phases["before"].get(p, [0.0])))
    base = statistics.median(walls["before"])
    report: dict[str, dict[str, Any]] = {}
    for variant in chosen:
        per_phase = {p: statistics.median(phases[variant][p]) for p in all_phases if phases[variant].get(p)}
        report[variant] = {"flags": chosen[variant], "wall_s_median": statistics.median(walls[variant]),
                           "wall_s_median_by_source": {
                               s: statistics.median(walls[variant][i::len(sources)]) for i, s in enumerate(sources)},
                           "cpu_s_median": statistics.median(cpus[variant]),
                           "phase_ms_median": per_phase, "sass_identical": sass_same[variant],
                           "exports_kf_launch": exported[variant]}
    print(f"{len(sources)} sources x {args.rounds} rounds, {os.cpu_count()} cpus: median of the builds")
    width = max(len(v) for v in chosen) + 2
    print(f"{'':<28}" + "".join(f"{v:>{width}}" for v in chosen))
    print(f"{'wall s':<28}" + "".join(f"{report[v]['wall_s_median']:>{width}.3f}" for v in chosen))
    print(f"{'vs before':<28}" + "".join(f"{report[v]['wall_s_median'] / base - 1:>+{width}.1%}" for v in chosen))
    # The builds of one source in one round ran back to back: their differences cancel a busy spell.
    for variant in chosen:
        report[variant]["paired_wall_delta_s_median"] = statistics.median(
            v - b for v, b in zip(walls[variant], walls["before"], strict=True))
        report[variant]["paired_cpu_delta_s_median"] = statistics.median(
            v - b for v, b in zip(cpus[variant], cpus["before"], strict=True))
    print(f"{'paired wall delta s':<28}" + "".join(
        f"{report[v]['paired_wall_delta_s_median']:>+{width}.3f}" for v in chosen))
    cpu_base = report["before"]["cpu_s_median"]
    print(f"{'cpu s':<28}" + "".join(f"{report[v]['cpu_s_median']:>{width}.3f}" for v in chosen))
    print(f"{'vs before':<28}" + "".join(f"{report[v]['cpu_s_median'] / cpu_base - 1:>+{width}.1%}" for v in chosen))
    print(f"{'paired cpu delta s':<28}" + "".join(
        f"{report[v]['paired_cpu_delta_s_median']:>+{width}.3f}" for v in chosen))
    print(f"{'SASS as before':<28}" + "".join(
        f"{ {True: 'same', False: 'DIFFERS', None: '?'}[sass_same[v]]:>{width}}" for v in chosen))
    print(f"{'exports kf_launch':<28}" + "".join(f"{str(exported[v]).lower():>{width}}" for v in chosen))
    for phase in all_phases:
        print(f"{phase + ' ms':<28}" + "".join(
            f"{report[v]['phase_ms_median'].get(phase, 0.0):>{width}.1f}" for v in chosen))
    by_source = report["before"]["wall_s_median_by_source"]
    print("before, wall s by source: " + ", ".join(f"{s} {w:.3f}" for s, w in by_source.items()))
    if args.json:
        args.json.write_text(json.dumps({"sources": list(sources), "rounds": args.rounds, "cpus": os.cpu_count(),
                                         "nvcc": detect_toolchain("cuda", args.arch).version,
                                         "variants": report}, indent=2))


if __name__ == "__main__":
    main()
