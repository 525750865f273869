"""argmax and argmin on cuda with a warp, a block, or several blocks per output element.

The gather engine's ``flat`` mode gives each output element one thread that walks its whole
row: right where the reduced dim is an outer one (neighbouring threads read neighbouring
elements), slow where it is the innermost (each thread strides alone through a long row, and a
single output, a greedy decode's argmax over the vocabulary, gets one thread in all). Here a
group of threads, a warp or the whole block, shares each output: lane ``l`` scans elements
``l, l + G, ...`` keeping its first best, then the group combines the lanes' winners. Where the
outputs are too few to give every multiprocessor a block (a sampler's argmax over 8 rows of
logits), ``split`` mode cuts each row into pieces, one block each, whose winners a second kernel
combines, a warp per output, from the caller's workspace.

Eager's choice is kept exactly: the first index of the largest (smallest) value, any NaN beating
every number and the first NaN winning. The combine is associative and commutative under that
rule (a NaN over a number, else the better value, else the lower index), so the order in which
the shuffles, the shared-memory step and the pieces meet the lanes' winners does not change the
result.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_service.offline import cxx
from agent_service.offline.knobs import Knobs
from agent_service.offline.plan import cuda_grid, multiprocessors
from kforge_domain.device import DeviceInfo

GROUP_MODES = ("warp", "block", "split")
GROUP_MIN_LENGTH = 64  # shorter rows leave most of a warp idle: the flat walk is tried first there
BLOCK_FIRST_LENGTH = 4096  # rows this long give a whole block work (a vocabulary's logits): block first
SPLIT_MIN_LENGTH = 4096  # rows shorter than this are one block's work at most: never split
PER_THREAD = (16, 4, 64)  # elements each thread of a split-mode block scans: a piece is block x this
MERGE_BLOCK = 128  # the combining kernel's block: four outputs, a warp each


@dataclass(frozen=True)
class ArgReduction:
    """Each output element reduces ``value`` (a C expression of ``k`` and the coordinates ``o<d>``,
    of C type ``value_type``) over ``k`` in ``[0, length)``; ``beats`` is ``>`` (argmax) or ``<``."""

    length: int
    value: str
    value_type: str
    beats: str
    inner: bool  # the reduced elements are adjacent in memory (a lane's neighbours read its neighbours)


@dataclass(frozen=True)
class ArgKernel:
    """A rendered reduction: its device code, the launch lines of ``kf_launch`` (stream ``s``, kernel
    arguments ``args``), and the workspace it takes, if any."""

    source: str
    launch: str
    workspace: cxx.Workspace | None = None


def modes(reduction: ArgReduction, outputs: int, device: DeviceInfo) -> tuple[str, ...]:
    """The cuda modes worth trying, best guess first; ``flat`` is the gather engine's own walk.
    ``split`` is offered for long rows whose ``outputs`` leave multiprocessors without a block, and
    tried first where they leave most of them idle."""
    split = reduction.length >= SPLIT_MIN_LENGTH and outputs < multiprocessors(device)
    if split and outputs <= multiprocessors(device) // 2:
        return ("split", "block", "warp", "flat")
    if reduction.inner and reduction.length >= BLOCK_FIRST_LENGTH:
        return ("block", "warp", "flat", *(("split",) if split else ()))
    if reduction.inner and reduction.length >= GROUP_MIN_LENGTH:
        return ("warp", "block", "flat")
    if reduction.length >= GROUP_MIN_LENGTH:
        return ("flat", "warp", "block", *(("split",) if split else ()))
    return ("flat",)


def per_thread_choices(reduction: ArgReduction, outputs: int, device: DeviceInfo) -> tuple[int, ...]:
    """:data:`PER_THREAD`, first the most work per thread that still gives every multiprocessor a
    block of a 256-thread split (fewer, longer pieces merge cheaper), else the least."""
    def blocks(per_thread: int) -> int:
        return outputs * cxx.ceil_div(reduction.length, 256 * per_thread)

    filling = [p for p in PER_THREAD if blocks(p) >= multiprocessors(device)]
    first = max(filling) if filling else min(PER_THREAD)
    return (first, *(p for p in PER_THREAD if p != first))


def _better(reduction: ArgReduction) -> str:
    """``kf_better(vb, ib, va, ia)``: whether candidate b wins over a under eager's rule."""
    v = reduction.value_type
    return f"""static __device__ __forceinline__ bool kf_better({v} vb, int64_t ib, {v} va, int64_t ia) {{
  if (ib < 0) return false;
  if (ia < 0) return true;
  const bool bn = vb != vb, an = va != va;
  if (an || bn) return an && bn ? ib < ia : bn;
  if (vb {reduction.beats} va) return true;
  if (va {reduction.beats} vb) return false;
  return ib < ia;
}}
static __device__ __forceinline__ void kf_warp_combine({v} &best, int64_t &found) {{
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {{
    const {v} other = __shfl_down_sync(0xffffffffu, best, offset);
    const int64_t at = __shfl_down_sync(0xffffffffu, found, offset);
    if (kf_better(other, at, best, found)) {{ best = other; found = at; }}
  }}
}}
"""


def _scan(reduction: ArgReduction, start: str, stop: str, step: str) -> str:
    """A lane's walk over ``k`` from ``start`` to ``stop`` by ``step``, keeping its first best."""
    v = reduction.value_type
    return f"""    {v} best = 0;
    int64_t found = -1;
    for (int64_t k = {start}; k < {stop}; k += {step}) {{
      const {v} v = {reduction.value};
      if (found < 0 || (best == best && (v != v || v {reduction.beats} best))) {{ best = v; found = k; }}
    }}
    kf_warp_combine(best, found);
"""


def _across_warps(reduction: ArgReduction, block: int) -> str:
    """The block's warps' winners combined by the first warp (lane ``lane`` of the block)."""
    v, warps = reduction.value_type, block // 32
    return f"""    __shared__ {v} kf_best[{warps}];
    __shared__ int64_t kf_found[{warps}];
    if ((lane & 31) == 0) {{ kf_best[lane >> 5] = best; kf_found[lane >> 5] = found; }}
    __syncthreads();
    if (lane < 32) {{
      found = lane < {warps} ? kf_found[lane] : -1;
      if (found >= 0) best = kf_best[lane];
      kf_warp_combine(best, found);
    }}
    __syncthreads();
"""


def kernel(reduction: ArgReduction, knobs: Knobs, device: DeviceInfo, params: str, args: str, total: int,
           coords: str, write: str) -> ArgKernel:
    """The kernels and launch for ``knobs["mode"]`` in :data:`GROUP_MODES`; ``coords`` defines
    ``o<d>`` from the output index ``i``, ``write`` stores that element's result from its winning
    index ``found`` (the kernel's parameters ``params`` in scope)."""
    if knobs["mode"] == "split":
        return _split(reduction, knobs, params, args, total, coords, write)
    block = int(knobs["threads_per_block"])
    group = 32 if knobs["mode"] == "warp" else block
    per_block = block // group
    grid = cuda_grid(device, block, int(knobs["waves"]), cxx.ceil_div(total, per_block))
    across_warps = "" if group == 32 else _across_warps(reduction, block)
    source = f"""{_better(reduction)}
__global__ void __launch_bounds__({block}) kf_gather({params}) {{
  const int lane = threadIdx.x % {group};
  for (int64_t i = (int64_t)blockIdx.x * {per_block} + threadIdx.x / {group}; i < {total}LL;
       i += (int64_t)gridDim.x * {per_block}) {{
{coords}
{_scan(reduction, "lane", f"{reduction.length}LL", str(group))}{across_warps}    if (lane == 0) {write}
  }}
}}
"""
    return ArgKernel(source, f"  kf_gather<<<{grid}, {block}, 0, s>>>({args});\n")


def _split(reduction: ArgReduction, knobs: Knobs, params: str, args: str, total: int, coords: str,
           write: str) -> ArgKernel:
    """Each output's row cut into pieces of ``threads_per_block * per_thread`` elements, a block per
    piece writing its winner to the workspace; then a warp per output combines its pieces' winners."""
    block = int(knobs["threads_per_block"])
    span = block * int(knobs["per_thread"])
    pieces = cxx.ceil_div(reduction.length, span)
    scratch = cxx.cuda_scratch("kf_parts", "kf_arg_part", total * pieces)
    warps = MERGE_BLOCK // 32
    v = reduction.value_type
    source = f"""{_better(reduction)}
struct kf_arg_part {{ {v} best; int64_t found; }};
{scratch.export()}
/* {pieces} pieces of {span} elements per output */
__global__ void __launch_bounds__({block}) kf_arg_pieces({params}, kf_arg_part *__restrict__ kf_parts) {{
  const int lane = threadIdx.x;
  const int64_t i = blockIdx.x / {pieces}, k0 = (int64_t)(blockIdx.x % {pieces}) * {span}LL;
  (void)i;  /* a reduction to one element reads no coordinate */
  const int64_t k1 = k0 + {span}LL < {reduction.length}LL ? k0 + {span}LL : {reduction.length}LL;
{coords}
{_scan(reduction, "k0 + lane", "k1", str(block))}{_across_warps(reduction, block)}    if (lane == 0) {{
      kf_parts[blockIdx.x].best = best;
      kf_parts[blockIdx.x].found = found;
    }}
}}

__global__ void __launch_bounds__({MERGE_BLOCK}) kf_arg_merge({params},
                                                     const kf_arg_part *__restrict__ kf_parts) {{
  const int lane = threadIdx.x % 32;
  for (int64_t i = (int64_t)blockIdx.x * {warps} + threadIdx.x / 32; i < {total}LL;
       i += (int64_t)gridDim.x * {warps}) {{
{coords}
    {v} best = 0;
    int64_t found = -1;
    for (int64_t p = lane; p < {pieces}LL; p += 32) {{
      const kf_arg_part part = kf_parts[i * {pieces}LL + p];
      if (kf_better(part.best, part.found, best, found)) {{ best = part.best; found = part.found; }}
    }}
    kf_warp_combine(best, found);
    if (lane == 0) {write}
  }}
}}
"""
    merge_grid = cxx.ceil_div(total, warps)
    launch = (f"  kf_arg_pieces<<<{total * pieces}, {block}, 0, s>>>({args}, kf_parts);\n"
              f"  kf_arg_merge<<<{merge_grid}, {MERGE_BLOCK}, 0, s>>>({args}, kf_parts);\n")
    return ArgKernel(source, launch, scratch)
