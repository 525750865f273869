"""argmax and argmin on cuda with a warp or a block per output element.

The gather engine's ``flat`` mode gives each output element one thread that walks its whole
row: right where the reduced dim is an outer one (neighbouring threads read neighbouring
elements), slow where it is the innermost (each thread strides alone through a long row, and a
single output, a greedy decode's argmax over the vocabulary, gets one thread in all). Here a
group of threads, a warp or the whole block, shares each output: lane ``l`` scans elements
``l, l + G, ...`` keeping its first best, then the group combines the lanes' winners.

Eager's choice is kept exactly: the first index of the largest (smallest) value, any NaN beating
every number and the first NaN winning. The combine is associative and commutative under that
rule (a NaN over a number, else the better value, else the lower index), so the order in which
the shuffles and the shared-memory step meet the lanes' winners does not change the result.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_service.offline.knobs import Knobs
from agent_service.offline.plan import cuda_grid
from kforge_domain.device import DeviceInfo

GROUP_MODES = ("warp", "block")
GROUP_MIN_LENGTH = 64  # shorter rows leave most of a warp idle: the flat walk is tried first there
BLOCK_FIRST_LENGTH = 4096  # rows this long give a whole block work (a vocabulary's logits): block first


@dataclass(frozen=True)
class ArgReduction:
    """Each output element reduces ``value`` (a C expression of ``k`` and the coordinates ``o<d>``,
    of C type ``value_type``) over ``k`` in ``[0, length)``; ``beats`` is ``>`` (argmax) or ``<``."""

    length: int
    value: str
    value_type: str
    beats: str
    inner: bool  # the reduced elements are adjacent in memory (a lane's neighbours read its neighbours)


def modes(reduction: ArgReduction) -> tuple[str, ...]:
    """The cuda modes worth trying, best guess first; ``flat`` is the gather engine's own walk."""
    if reduction.inner and reduction.length >= BLOCK_FIRST_LENGTH:
        return ("block", "warp", "flat")
    if reduction.inner and reduction.length >= GROUP_MIN_LENGTH:
        return ("warp", "block", "flat")
    return ("flat", "warp", "block") if reduction.length >= GROUP_MIN_LENGTH else ("flat",)


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


def kernel(reduction: ArgReduction, knobs: Knobs, device: DeviceInfo, params: str, total: int,
           coords: str, store: str) -> tuple[str, int, int]:
    """The kernel source, grid and block for ``knobs["mode"]`` in :data:`GROUP_MODES`; ``coords``
    defines ``o<d>`` from the output index ``i``, ``store`` is that element's offset in ``out``."""
    block = int(knobs["threads_per_block"])
    group = 32 if knobs["mode"] == "warp" else block
    per_block = block // group
    grid = cuda_grid(device, block, int(knobs["waves"]), -(-total // per_block))
    v = reduction.value_type
    across_warps = "" if group == 32 else f"""    __shared__ {v} kf_best[{block // 32}];
    __shared__ int64_t kf_found[{block // 32}];
    if ((lane & 31) == 0) {{ kf_best[lane >> 5] = best; kf_found[lane >> 5] = found; }}
    __syncthreads();
    if (lane < 32) {{
      found = lane < {block // 32} ? kf_found[lane] : -1;
      if (found >= 0) best = kf_best[lane];
      kf_warp_combine(best, found);
    }}
    __syncthreads();
"""
    source = f"""{_better(reduction)}
__global__ void __launch_bounds__({block}) kf_gather({params}) {{
  const int lane = threadIdx.x % {group};
  for (int64_t i = (int64_t)blockIdx.x * {per_block} + threadIdx.x / {group}; i < {total}LL;
       i += (int64_t)gridDim.x * {per_block}) {{
{coords}
    {v} best = 0;
    int64_t found = -1;
    for (int64_t k = lane; k < {reduction.length}LL; k += {group}) {{
      const {v} v = {reduction.value};
      if (found < 0 || (best == best && (v != v || v {reduction.beats} best))) {{ best = v; found = k; }}
    }}
    kf_warp_combine(best, found);
{across_warps}    if (lane == 0) out[{store}] = (T)found;
  }}
}}
"""
    return source, grid, block
