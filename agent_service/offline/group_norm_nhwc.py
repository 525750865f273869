"""Group norm of a channels-last input, whose groups are blocks of adjacent channels.

A channels-last ``[N, C, *S]`` tensor is ``[N, P, C]`` in storage (``P`` pixels): group ``g`` of
sample ``n`` is columns ``[g * cpg, (g + 1) * cpg)`` of each of the ``P`` pixel rows, no run of
memory, so the row engine cannot walk it. Here a block takes a run of whole pixel rows of one
sample (one run of memory) and each thread keeps the same channel vector throughout, so it adds
only to its own group's sums. A first kernel stores every block's per-group sums (shifted by a
value of the group, against cancellation), a second merges them per group, a third writes the
run normalised: the input is read twice and the output written once, like the row engine's
split mode. Eager on CUDA writes the output contiguous (NCHW): the third kernel then stages a
tile of pixels in shared memory and writes each channel's pixels of the tile as one run. Eager
on the CPU keeps the output channels-last.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import is_contiguous
from agent_service.offline.plan import cpu_thread_choices, multiprocessors
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo

#: Shared memory the contiguous-output tile may take (bytes): under the 48 KiB of static shared memory.
TILE_BYTES = 40 * 1024
#: Pixels per staged tile, largest first: 32 two-byte pixels of a channel are one 64-byte store.
TILE_PIXELS = (32, 16, 8)
MAX_BLOCK = 1024
#: Groups the template takes at most (each block stores one float2 of sums per group in the workspace).
MAX_GROUPS = 4096
#: Warps per block of the kernel merging the blocks' sums, one group per warp.
MERGE_WARPS = 8


def channels_last_strides(shape: list[int]) -> list[int]:
    """The strides of a dense channels-last ``[N, C, *S]`` tensor (storage ``[N, *S, C]``)."""
    strides = [0] * len(shape)
    step = 1
    for d in [1, *range(len(shape) - 1, 1, -1), 0]:
        strides[d] = step
        step *= shape[d]
    return strides


def _laid_out(spec: TensorSpec, strides: list[int]) -> bool:
    return all(size == 1 or have == want for size, have, want in zip(spec.shape, spec.stride, strides, strict=True))


def is_channels_last(spec: TensorSpec) -> bool:
    """Dense channels-last with at least one spatial dim (size-1 dims may carry any stride)."""
    return len(spec.shape) >= 3 and _laid_out(spec, channels_last_strides(list(spec.shape)))


@dataclass(frozen=True)
class ChannelsLastGroupNormPlan:
    """``native_group_norm`` / ``group_norm`` over a channels-last input; output channels-last or contiguous."""

    summary: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    x: int
    weight: int | None
    bias: int | None
    eps: float
    groups: int
    row_outputs: dict[str, int] = field(default_factory=dict)  # "mean" / "rstd" -> output index
    family: str = "group_norm"

    def __post_init__(self) -> None:
        x, y = self.inputs[self.x], self.outputs[0]
        if not is_channels_last(x) or min(x.stride, default=0) < 0:
            raise UnsupportedCard(f"input layout stride={x.stride} is not dense channels-last")
        if x.dtype not in cxx.FLOAT_DTYPES or y.dtype not in cxx.FLOAT_DTYPES:
            raise UnsupportedCard("only float32, float16 and bfloat16 group norm is templated")
        if y.shape != x.shape or not (self.y_channels_last or is_contiguous(y)):
            raise UnsupportedCard(f"output layout stride={y.stride} is neither the input's nor contiguous")
        for name, index in self.row_outputs.items():
            out = self.outputs[index]
            if out.numel != self.samples * self.groups or not is_contiguous(out):
                raise UnsupportedCard(f"{name} output {out.shape} is not a contiguous [N, groups]")
        if self.groups > MAX_GROUPS:
            raise UnsupportedCard(f"{self.groups} groups are more than the {MAX_GROUPS} templated")
        if self.columns(self._vector()) > MAX_BLOCK:
            raise UnsupportedCard(f"{self.channels} channels are more than a block of {MAX_BLOCK} threads covers")
        if not self.y_channels_last and self.tile_pixels() == 0:
            raise UnsupportedCard(f"a tile of {self.channels} channels does not fit in shared memory")

    @property
    def samples(self) -> int:
        return self.inputs[self.x].shape[0]

    @property
    def channels(self) -> int:
        return self.inputs[self.x].shape[1]

    @property
    def pixels(self) -> int:
        return math.prod(self.inputs[self.x].shape[2:])

    @property
    def per_group(self) -> int:
        return self.channels // self.groups

    @property
    def y_channels_last(self) -> bool:
        return _laid_out(self.outputs[0], channels_last_strides(list(self.outputs[0].shape)))

    def columns(self, vec: int) -> int:
        """Channel vectors per pixel: the threads one pixel row takes."""
        return self.channels // vec

    def _vector(self) -> int:
        """Elements per access: a vector never crosses a group and x is 16-byte aligned."""
        vec = cxx.vector_width(self.inputs[self.x].dtype) if self.inputs[self.x].aligned16 else 1
        while vec > 1 and self.per_group % vec:
            vec //= 2
        return vec

    def tile_pixels(self) -> int:
        """Pixels per staged tile of the contiguous output (0: not even the smallest tile fits)."""
        return next((p for p in TILE_PIXELS if p * self._pitch() * self._y_bytes() <= TILE_BYTES), 0)

    def _y_bytes(self) -> int:
        return cxx.ELEMENT_BYTES[self.outputs[0].dtype]

    def _pitch(self) -> int:
        """Elements per staged pixel row: an odd number of 4-byte words, so a warp reading one channel
        down 32 pixels touches 32 banks."""
        words = cxx.ceil_div(self.channels * self._y_bytes(), 4) | 1
        return words * 4 // self._y_bytes()

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cpu":
            return KnobSpace({"threads": cpu_thread_choices(device, (*self.inputs, *self.outputs)),
                              "schedule": ("static", "dynamic")})
        vec = self._vector()
        store = self.store_vector()
        return KnobSpace({
            "threads_per_block": (256, 512, 128, 1024),  # rounded down to whole pixel rows of channel vectors
            "vector": (vec, 1) if vec > 1 and self.columns(1) <= MAX_BLOCK else (vec,),
            "blocks_per_sm": (4, 2, 8),
            "unroll": (0, 4),  # pixel rows each thread loads ahead of use; 0: as the compiler chooses
            "store_vector": (1, store) if store > 1 else (1,),  # contiguous output: pixels per store
            # What merges one group's sums over the blocks (see _merge). The warp first: on the H100
            # (bench/gpu/group_norm_nhwc.py, run 105) it took the VAE decoder's channels-last group
            # norms from 41.5 to 31.0 us (1x512x128x128 bf16) and from 655 to 639 us (1x512x512x512).
            "merge": ("warp", "thread"),
        })

    def store_vector(self) -> int:
        """Pixels of one channel a thread may store at once into a contiguous output (1: one at a time).

        A 16-byte store needs y aligned, whole vectors per channel (pixels a multiple of it) and
        tiles of at least that many pixels; tiles start at multiples of the tile size.
        """
        if self.y_channels_last or not self.outputs[0].aligned16:
            return 1
        store = min(cxx.vector_width(self.outputs[0].dtype), self.tile_pixels())
        return store if store > 1 and self.pixels % store == 0 else 1

    def block(self, vec: int, target: int) -> int:
        """Threads per block near ``target``: whole pixel rows of ``vec``-wide channel vectors."""
        cols = self.columns(vec)
        return cols * max(1, target // cols)

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        return _render_cuda(self, knobs, device) if backend == "cuda" else _render_cpu(self, knobs)

    # -- pieces both backends share ---------------------------------------------------------

    def _types(self, backend: str) -> str:
        names = {"TX": self.inputs[self.x], "TY": self.outputs[0]}
        if self.weight is not None:
            names["TW"] = self.inputs[self.weight]
        if self.bias is not None:
            names["TB"] = self.inputs[self.bias]
        for name, index in self.row_outputs.items():
            names["TM" if name == "mean" else "TR"] = self.outputs[index]
        return "".join(f"typedef {cxx.element_type(s.dtype, backend)} {n};\n" for n, s in names.items())

    def _affine(self, channel: str) -> tuple[str, str]:
        """The weight and bias of ``channel`` as float expressions."""
        w = f"kf_to_f32(w[{channel}])" if self.weight is not None else "1.0f"
        b = f"kf_to_f32(b[{channel}])" if self.bias is not None else "0.0f"
        return w, b

    def _y_offset(self, n: str, channel: str, pixel: str) -> str:
        c, p = self.channels, self.pixels
        if self.y_channels_last:
            return f"{n} * {p * c}LL + {pixel} * {c}LL + {channel}"
        return f"{n} * {p * c}LL + {channel} * {p}LL + {pixel}"

    def _stat_writes(self, index: str, mean: str, rstd: str, indent: str) -> str:
        lines = []
        if "mean" in self.row_outputs:
            lines.append(f"{indent}mean_out[{index}] = kf_from_f32<TM>({mean});")
        if "rstd" in self.row_outputs:
            lines.append(f"{indent}rstd_out[{index}] = kf_from_f32<TR>({rstd});")
        return "\n".join(lines) + ("\n" if lines else "")

    def _params(self) -> tuple[str, str]:
        """Kernel parameters for x, weight, bias, y and the statistic outputs, and the host arguments."""
        params = ["const TX *__restrict__ x"]
        args = [f"(const TX *)inputs[{self.x}].data"]
        for name, index, ctype in (("w", self.weight, "TW"), ("b", self.bias, "TB")):
            if index is not None:
                params.append(f"const {ctype} *__restrict__ {name}")
                args.append(f"(const {ctype} *)inputs[{index}].data")
        params.append("TY *__restrict__ y")
        args.append("(TY *)outputs[0].data")
        for param, arg in self.stat_pointers():
            params.append(param)
            args.append(arg)
        return ", ".join(params), ", ".join(args)

    def stat_pointers(self) -> list[tuple[str, str]]:
        """(kernel parameter, host argument) of each statistic output the card has: mean, then rstd."""
        return [(f"{ctype} *__restrict__ {name}_out", f"({ctype} *)outputs[{self.row_outputs[name]}].data")
                for name, ctype in (("mean", "TM"), ("rstd", "TR")) if name in self.row_outputs]


# ---- cpu ---------------------------------------------------------------------------------------


def _render_cpu(plan: ChannelsLastGroupNormPlan, knobs: Knobs) -> str:
    c, p, cpg, groups = plan.channels, plan.pixels, plan.per_group, plan.groups
    params, args = plan._params()
    w, b = plan._affine("ch")
    threads = f" num_threads({knobs['threads']})" if knobs["threads"] else ""
    launch = cxx.cpu_kf_launch(plan.inputs, plan.outputs, f"  kf_group_norm({args});\n")
    return f"""{cxx.CPU_PRELUDE}
{plan._types("cpu")}/* {plan.summary}; {knobs} */
static void kf_group_norm({params.replace("__restrict__", "__restrict")}) {{
#pragma omp parallel for{threads} schedule({knobs["schedule"]})
  for (int64_t i = 0; i < {plan.samples * groups}LL; ++i) {{
    const int64_t n = i / {groups}, g = i % {groups};
    const TX *xs = x + n * {p * c}LL;
    const float shift = kf_to_f32(xs[g * {cpg}]);
    double s = 0.0, q = 0.0;
    for (int64_t p = 0; p < {p}LL; ++p)
      for (int64_t k = 0; k < {cpg}; ++k) {{
        const double d = (double)kf_to_f32(xs[p * {c}LL + g * {cpg} + k]) - shift;
        s += d;
        q += d * d;
      }}
    const double count = {float(p * cpg)!r}, m = s / count, var = fmax(q / count - m * m, 0.0);
    const float mean = (float)(shift + m), rstd = 1.0f / sqrtf((float)var + {cxx.cfloat(plan.eps)});
{plan._stat_writes("i", "mean", "rstd", "    ")}    for (int64_t p = 0; p < {p}LL; ++p)
      for (int64_t k = 0; k < {cpg}; ++k) {{
        const int64_t ch = g * {cpg} + k;
        const float a = rstd * {w};
        y[{plan._y_offset("n", "ch", "p")}] = kf_from_f32<TY>((kf_to_f32(xs[p * {c}LL + ch]) - mean) * a + {b});
      }}
  }}
}}

{launch}"""


# ---- cuda --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Grid:
    """How the blocks split the pixels: ``chunks`` runs of ``chunk`` pixel rows per sample."""

    block: int
    vec: int
    cols: int
    rows: int  # pixel rows a block covers per step
    chunks: int
    chunk: int
    unroll: int  # pixel rows each thread loads before using any (0: the compiler's choice)
    store: int  # pixels per store into a contiguous output

    @property
    def unroll_pragma(self) -> str:
        """The pragma that goes before a loop over pixel rows."""
        return f"#pragma unroll {self.unroll}\n" if self.unroll else ""


def _grid(plan: ChannelsLastGroupNormPlan, knobs: Knobs, device: DeviceInfo) -> _Grid:
    vec, store = int(knobs["vector"]), int(knobs["store_vector"])
    cols, block = plan.columns(vec), plan.block(vec, int(knobs["threads_per_block"]))
    sms = multiprocessors(device)
    wanted = cxx.ceil_div(int(knobs["blocks_per_sm"]) * sms, plan.samples)
    chunk = cxx.ceil_div(plan.pixels, max(1, min(wanted, plan.pixels)))
    if store > 1:  # every tile starts at a multiple of the tile size, so its vector stores are aligned
        tile = plan.tile_pixels()
        chunk = cxx.ceil_div(chunk, tile) * tile
    return _Grid(block=block, vec=vec, cols=cols, rows=block // cols, chunks=cxx.ceil_div(plan.pixels, chunk),
                 chunk=chunk, unroll=int(knobs["unroll"]), store=store)


def _render_cuda(plan: ChannelsLastGroupNormPlan, knobs: Knobs, device: DeviceInfo) -> str:
    g = _grid(plan, knobs, device)
    c, p, cpg, groups, n = plan.channels, plan.pixels, plan.per_group, plan.groups, plan.samples
    params, args = plan._params()
    locate = (f"  const int64_t n = blockIdx.x / {g.chunks}, p0 = (int64_t)(blockIdx.x % {g.chunks}) * {g.chunk}LL;\n"
              f"  const int64_t p1 = p0 + {g.chunk}LL < {p}LL ? p0 + {g.chunk}LL : {p}LL;\n"
              f"  const int col = threadIdx.x % {g.cols}, row = threadIdx.x / {g.cols};\n"
              f"  const int g = col * {g.vec} / {cpg};\n"
              f"  const TX *xs = x + n * {p * c}LL;\n")
    w, b = plan._affine("col * VEC + k")
    merge, merge_launch = _merge(plan, g, str(knobs["merge"]))
    aligned = [f"inputs[{plan.x}].data"] + (["outputs[0].data"] if plan.y_channels_last or g.store > 1 else [])
    scratch = cxx.cuda_scratch("partials", "float2", n * (g.chunks + 1) * groups)
    stat_args = "".join(f", {arg}" for _, arg in plan.stat_pointers())
    return f"""{cxx.CUDA_PRELUDE}
{plan._types("cuda")}constexpr int VEC = {g.vec};
/* {plan.summary}; {knobs}; blocks of {g.block} threads, {g.chunks} per sample of {g.chunk} pixels */
{scratch.export()}
/* Each thread's sums are merged per group in a fixed order (shared-memory atomics would add them in
   whatever order the threads arrive: a different rounding on every call). */
__global__ void __launch_bounds__({g.block}) kf_gn_sums(const TX *__restrict__ x, float2 *__restrict__ partials) {{
  __shared__ float2 thread_sums[{g.block}];
{locate}  const float shift = kf_to_f32(xs[g * {cpg}]);
  float s = 0.0f, q = 0.0f;
{g.unroll_pragma}  for (int64_t p = p0 + row; p < p1; p += {g.rows}) {{
    const kf_vec<TX, VEC> v = kf_load_vec<TX, VEC>(xs + p * {c}LL + col * VEC);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {{
      const float d = kf_to_f32(v.v[k]) - shift;
      s += d;
      q += d * d;
    }}
  }}
  thread_sums[threadIdx.x] = make_float2(s, q);
  __syncthreads();
  for (int i = threadIdx.x; i < {groups}; i += {g.block}) {{
    float2 sum = make_float2(0.0f, 0.0f);
    for (int r = 0; r < {g.rows}; ++r)
      for (int k = 0; k < {cpg // g.vec}; ++k) {{  /* the group's channel vectors of pixel row r */
        const float2 part = thread_sums[r * {g.cols} + i * {cpg // g.vec} + k];
        sum.x += part.x;
        sum.y += part.y;
      }}
    partials[(int64_t)blockIdx.x * {groups} + i] = sum;
  }}
}}

{merge}
__global__ void __launch_bounds__({g.block}) kf_gn_apply({params}, const float2 *__restrict__ stats) {{
{locate}  const float2 st = stats[n * {groups} + g];
  float scale[VEC], offset[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) {{
    scale[k] = st.y * {w};
    offset[k] = {b} - st.x * scale[k];
  }}
{_apply_loop(plan, g)}}}

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, aligned if g.vec > 1 or g.store > 1 else [], scratch)}
  cudaStream_t s = (cudaStream_t)stream;
{scratch.take(len(plan.outputs))}  float2 *stats = partials + {n * g.chunks * groups}LL;
  kf_gn_sums<<<{n * g.chunks}, {g.block}, 0, s>>>((const TX *)inputs[{plan.x}].data, partials);
  kf_gn_merge<<<{merge_launch}, 0, s>>>((const TX *)inputs[{plan.x}].data, partials, stats{stat_args});
  kf_gn_apply<<<{n * g.chunks}, {g.block}, 0, s>>>({args}, stats);
{cxx.cuda_launch_epilogue()}
}}
"""


def _merge(plan: ChannelsLastGroupNormPlan, g: _Grid, how: str) -> tuple[str, str]:
    """The kernel merging the blocks' sums into each group's mean and rstd, and its launch shape.

    ``thread``: a thread per group walks every chunk's partial in turn (hundreds of loads one
    after another). ``warp``: a warp per group, lane l adding the partials of chunks l, l + 32, ...,
    then the lanes' sums added in a fixed tree. Either way every call rounds alike.
    """
    c, p, cpg, groups, n = plan.channels, plan.pixels, plan.per_group, plan.groups, plan.samples
    stat_params = "".join(f", {param}" for param, _ in plan.stat_pointers())
    finish = (f"    const double count = {float(p * cpg)!r}, m = s / count, var = fmax(q / count - m * m, 0.0);\n"
              f"    const float mean = kf_to_f32(x[n * {p * c}LL + g * {cpg}]) + (float)m;\n"
              f"    const float rstd = rsqrtf((float)var + {cxx.cfloat(plan.eps)});\n"
              f"    stats[n * {groups} + g] = make_float2(mean, rstd);\n"
              f"{plan._stat_writes(f'n * {groups} + g', 'mean', 'rstd', '    ')}")
    signature = ("kf_gn_merge(const TX *__restrict__ x, const float2 *__restrict__ partials,\n"
                 f"    float2 *__restrict__ stats{stat_params})")
    if how == "thread":
        block = min(MAX_BLOCK, cxx.ceil_div(groups, 32) * 32)
        return (f"__global__ void __launch_bounds__({block}) {signature} {{\n"
                "  const int64_t n = blockIdx.x;\n"
                f"  for (int g = threadIdx.x; g < {groups}; g += {block}) {{\n"
                "    double s = 0.0, q = 0.0;\n"
                f"    for (int k = 0; k < {g.chunks}; ++k) {{\n"
                f"      const float2 part = partials[(n * {g.chunks} + k) * {groups} + g];\n"
                "      s += part.x;\n      q += part.y;\n    }\n"
                f"{finish}  }}\n}}\n", f"{n}, {block}")
    warps = min(MERGE_WARPS, groups)
    per_sample = cxx.ceil_div(groups, warps)
    return (f"__global__ void __launch_bounds__({warps * 32}) {signature} {{\n"
            f"  const int64_t n = blockIdx.x / {per_sample};\n"
            f"  const int g = (int)(blockIdx.x % {per_sample}) * {warps} + (int)(threadIdx.x / 32);\n"
            "  const int lane = threadIdx.x % 32;\n"
            f"  if (g >= {groups}) return;\n"
            "  double s = 0.0, q = 0.0;\n"
            f"  for (int k = lane; k < {g.chunks}; k += 32) {{\n"
            f"    const float2 part = partials[(n * {g.chunks} + k) * {groups} + g];\n"
            "    s += part.x;\n    q += part.y;\n  }\n"
            "#pragma unroll\n  for (int offset = 16; offset > 0; offset /= 2) {\n"
            "    s += __shfl_down_sync(0xffffffffu, s, offset);\n"
            "    q += __shfl_down_sync(0xffffffffu, q, offset);\n  }\n"
            f"  if (lane == 0) {{\n{finish}  }}\n}}\n", f"{n * per_sample}, {warps * 32}")


def _apply_loop(plan: ChannelsLastGroupNormPlan, g: _Grid) -> str:
    """Normalise this block's pixel rows: vector stores to a channels-last y, or through a tile to NCHW."""
    c, p = plan.channels, plan.pixels
    normalised = "kf_from_f32<TY>(kf_to_f32(v.v[k]) * scale[k] + offset[k])"
    if plan.y_channels_last:
        return (f"  TY *ys = y + n * {p * c}LL;\n"
                f"{g.unroll_pragma}"
                f"  for (int64_t p = p0 + row; p < p1; p += {g.rows}) {{\n"
                f"    const kf_vec<TX, VEC> v = kf_load_vec<TX, VEC>(xs + p * {c}LL + col * VEC);\n"
                "    kf_vec<TY, VEC> out;\n"
                f"#pragma unroll\n    for (int k = 0; k < VEC; ++k) out.v[k] = {normalised};\n"
                f"    kf_store_vec<TY, VEC>(ys + p * {c}LL + col * VEC, out);\n  }}\n")
    tile, pitch = plan.tile_pixels(), plan._pitch()
    return (f"  __shared__ TY tile[{tile * pitch}];\n"
            f"  TY *ys = y + n * {p * c}LL;\n"
            f"  for (int64_t t0 = p0; t0 < p1; t0 += {tile}) {{\n"
            f"    const int count = p1 - t0 < {tile} ? (int)(p1 - t0) : {tile};\n"
            f"{g.unroll_pragma}"
            f"    for (int r = row; r < count; r += {g.rows}) {{\n"
            f"      const kf_vec<TX, VEC> v = kf_load_vec<TX, VEC>(xs + (t0 + r) * {c}LL + col * VEC);\n"
            f"#pragma unroll\n      for (int k = 0; k < VEC; ++k) tile[r * {pitch} + col * VEC + k] = {normalised};\n"
            "    }\n    __syncthreads();\n"
            f"{_tile_stores(plan, g)}    __syncthreads();\n  }}\n")


def _tile_stores(plan: ChannelsLastGroupNormPlan, g: _Grid) -> str:
    """Each channel's pixels of the staged tile, stored as runs of the contiguous output.

    With ``store`` pixels per store a thread reads that many pixels of one channel down the tile
    and writes them as one vector; a tile's pixel count is then a multiple of ``store``.
    """
    c, p, tile, pitch, sv = plan.channels, plan.pixels, plan.tile_pixels(), plan._pitch(), g.store
    if sv == 1:
        return (f"    for (int e = threadIdx.x; e < {c * tile}; e += {g.block}) {{\n"
                f"      const int ch = e / {tile}, r = e % {tile};\n"
                f"      if (r < count) ys[(int64_t)ch * {p}LL + t0 + r] = tile[r * {pitch} + ch];\n"
                "    }\n")
    runs = tile // sv
    return (f"    for (int e = threadIdx.x; e < {c * runs}; e += {g.block}) {{\n"
            f"      const int ch = e / {runs}, r = e % {runs} * {sv};\n"
            "      if (r < count) {\n"
            f"        kf_vec<TY, {sv}> out;\n"
            f"#pragma unroll\n        for (int k = 0; k < {sv}; ++k) out.v[k] = tile[(r + k) * {pitch} + ch];\n"
            f"        kf_store_vec<TY, {sv}>(ys + (int64_t)ch * {p}LL + t0 + r, out);\n"
            "      }\n    }\n")
