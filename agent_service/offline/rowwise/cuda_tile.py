"""The cuda tile renderer: short rows reduced to one value each (global pooling), a block staging
a run of whole rows in shared memory with 16-byte loads, then each thread reducing one row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs
from agent_service.offline.plan import cuda_grid_limit
from agent_service.offline.rowwise.kinds import fill
from kforge_domain.device import DeviceInfo

if TYPE_CHECKING:
    from agent_service.offline.rowwise.plan import RowPlan

TILE_FLOATS = 8192  # shared memory per block for tile mode: 32 KiB


def render(plan: RowPlan, knobs: Knobs, device: DeviceInfo) -> str:
    """A block stages whole rows in shared memory (16-byte loads when aligned); a thread reduces each."""
    block, length = int(knobs["threads_per_block"]), plan.length
    x_spec = plan.inputs[plan.x]
    xt = cxx.element_type(x_spec.dtype, "cuda")
    vec = 16 // cxx.ELEMENT_BYTES[x_spec.dtype] if x_spec.aligned16 else 1
    pitch = length | 1  # an odd row pitch: threads reading rows side by side hit distinct banks
    rows_per_block = min(block, TILE_FLOATS // pitch) // vec * vec
    if rows_per_block == 0:
        raise UnsupportedCard("rows too long to tile")
    stats = plan.row_kind.tile
    if stats is None:
        raise AssertionError(f"{plan.kind} rows are not tiled")
    init, update, value = stats.init, stats.update, fill(stats.value, n=cxx.cfloat(float(length)))
    out = plan.outputs[plan.row_outputs["value"]]
    ot = cxx.element_type(out.dtype, "cuda")
    grid = max(1, min(cxx.ceil_div(plan.rows, rows_per_block), cuda_grid_limit(device, block)))
    vector_load = (
        f"    if (n == {rows_per_block * length}LL) {{\n"
        f"      for (int64_t i = threadIdx.x; i < n / {vec}; i += {block}) {{\n"
        f"        const kf_vec<{xt}, {vec}> lv = kf_load_vec<{xt}, {vec}>(src + i * {vec});\n"
        f"#pragma unroll\n        for (int k = 0; k < {vec}; ++k) {{\n"
        f"          const int64_t e = i * {vec} + k;\n"
        f"          tile[(e / {length}) * {pitch} + e % {length}] = kf_to_f32(lv.v[k]);\n"
        "        }\n      }\n    } else\n") if vec > 1 else ""
    aligned = [f"inputs[{plan.x}].data"] if vec > 1 else []
    return f"""{cxx.CUDA_PRELUDE}
/* {plan.summary}; {knobs} */
__global__ void __launch_bounds__({block}) kf_tile(const {xt} *__restrict__ x, {ot} *__restrict__ r_value) {{
  __shared__ float tile[{rows_per_block * pitch}];
  for (int64_t row0 = (int64_t)blockIdx.x * {rows_per_block}; row0 < {plan.rows}LL;
       row0 += (int64_t)gridDim.x * {rows_per_block}) {{
    const int64_t rows = {plan.rows}LL - row0 < {rows_per_block} ? {plan.rows}LL - row0 : {rows_per_block};
    const int64_t n = rows * {length}LL;
    const {xt} *src = x + row0 * {length}LL;
{vector_load}    {{
      for (int64_t e = threadIdx.x; e < n; e += {block})
        tile[(e / {length}) * {pitch} + e % {length}] = kf_to_f32(src[e]);
    }}
    __syncthreads();
    for (int r = threadIdx.x; r < rows; r += {block}) {{
      float acc = {init};
      for (int j = 0; j < {length}; ++j) {{
        const float v = tile[r * {pitch} + j];
        {update}
      }}
      r_value[{plan.row_index_c("row0 + r")}] = kf_from_f32<{ot}>({value});
    }}
    __syncthreads();
  }}
}}

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, aligned)}
  kf_tile<<<{grid}, {block}, 0, (cudaStream_t)stream>>>((const {xt} *)inputs[{plan.x}].data,
                                                         ({ot} *)outputs[{plan.row_outputs["value"]}].data);
{cxx.cuda_launch_epilogue()}
}}
"""
