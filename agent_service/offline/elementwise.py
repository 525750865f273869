"""The elementwise engine: one output written from broadcast operands through a C expression.

Unary ops, binary ops with broadcasting and scalars, gated activations (two halves of one
tensor), batch norm in inference (per-channel operands) and fake quantization (an int32 zero
point per channel) are all this one kernel shape. Dims
are coalesced from the card's strides, so contiguous and channels-last cases become flat loops;
the innermost dim moves in 16-byte vectors on cuda when every operand allows it.

An operand laid out across the output (a transposed view copied contiguous, a channels-last
tensor added to a contiguous one) is read along its own fastest dim, which the output walks with
a stride: on cuda, tiled mode stages 32 x 32 tiles of such operands in shared memory, read along
the operand's fast dim and written along the output's, so both sides move whole 32-element runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import broadcast_strides, coalesce, is_dense
from agent_service.offline.plan import cpu_thread_choices, cuda_grid_limit
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo
from kforge_domain.dtypes import DTYPE_BYTES

#: Integer operand dtypes a plan may read as stored (``int32_t x<i>``, with ``integer_operands``), so
#: that its expression mixes them with floats by C's conversions, as eager's kernels do.
INTEGER_OPERAND_DTYPES = ("int32",)


@dataclass(frozen=True)
class Operand:
    """An input tensor read as a broadcast view of the output's shape."""

    tensor: int
    dtype: str
    offset: int = 0
    strides: tuple[int, ...] | None = None  # per output dim; None: broadcast from the tensor's spec


@dataclass(frozen=True)
class ValueRange:
    """Eager raises where an element of input ``tensor`` lies outside ``[low, high]`` (a zero point
    outside the quantized range). The cpu kernel checks before writing and returns
    ``STATUS_BAD_INPUT``, so that eager serves the call and raises; a cuda kernel reads nothing back
    to the host and computes its formula for such values."""

    tensor: int
    low: int
    high: int


@dataclass(frozen=True)
class ChannelStats:
    """Batch norm's saved statistics outputs: ``save_mean = mean``, ``save_invstd = 1/sqrt(var + eps)``."""

    mean: int  # input index
    var: int  # input index
    save_mean: int  # output index
    save_invstd: int  # output index
    channels: int
    eps: float

    def params(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], backend: str) -> tuple[str, str]:
        restrict = "__restrict__" if backend == "cuda" else "__restrict"
        names = [("m", inputs[self.mean], f"inputs[{self.mean}]", True),
                 ("v", inputs[self.var], f"inputs[{self.var}]", True),
                 ("sm", outputs[self.save_mean], f"outputs[{self.save_mean}]", False),
                 ("si", outputs[self.save_invstd], f"outputs[{self.save_invstd}]", False)]
        params, args = [], []
        for name, spec, ref, const in names:
            t = cxx.element_type(spec.dtype, backend)
            params.append(f"{'const ' if const else ''}{t} *{restrict} {name}")
            args.append(f"({'const ' if const else ''}{t} *){ref}.data")
        return ", ".join(params), ", ".join(args)

    def body(self, backend: str, outputs: Sequence[TensorSpec]) -> str:
        tm = cxx.element_type(outputs[self.save_mean].dtype, backend)
        ti = cxx.element_type(outputs[self.save_invstd].dtype, backend)
        return (f"sm[c] = kf_from_f32<{tm}>(kf_to_f32(m[c])); "
                f"si[c] = kf_from_f32<{ti}>(1.0f / sqrtf(kf_to_f32(v[c]) + {cxx.cfloat(self.eps)}));")


@dataclass(frozen=True)
class ElementwisePlan:
    """``out = expression(x0, x1, ...)`` elementwise, in fp32.

    The expression uses ``x<i>`` for operand ``i`` and the macros ``KF_EXP``, ``KF_TANH``,
    ``KF_ERF``, which the knobs bind to fast or libm versions.
    """

    family: str
    summary: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    operands: tuple[Operand, ...]
    expression: str
    uses_math: bool = False
    channel_stats: ChannelStats | None = None
    # An in-place op's plan: operand 0 is the tensor the op mutates, which the kernel contract
    # passes as the output, pre-filled; it is read through the output's pointer (no restrict).
    in_place: bool = False
    # The card's own outputs where ``outputs`` describes the same bytes in another shape (a reshape
    # that copies, written as a contiguous copy in its input's shape): kf_launch checks these.
    card_outputs: tuple[TensorSpec, ...] | None = None
    # eager's cuda arithmetic where it differs from its cpu one (casts of floats to integers)
    cuda_expression: str = ""
    value_ranges: tuple[ValueRange, ...] = ()
    # The expression is written for int32 operands as stored (fake quantization's zero point). Any
    # other formula sees floats only: given int32 operands as stored, C would divide two of them as
    # integers where eager divides their float values.
    integer_operands: bool = False

    @property
    def operand_dtypes(self) -> list[str]:
        return [self.inputs[op.tensor].dtype for op in self.operands]

    def expression_for(self, backend: str) -> str:
        return self.cuda_expression if backend == "cuda" and self.cuda_expression else self.expression

    @property
    def checked_outputs(self) -> tuple[TensorSpec, ...]:
        """The output layouts kf_launch refuses to run without."""
        return self.outputs if self.card_outputs is None else self.card_outputs

    def __post_init__(self) -> None:
        """Refuse what the kernel cannot compute when the plan is made, so a refusal is known
        before any source is rendered (coverage and card selection ask for plans only)."""
        if self.outputs[0].dtype not in cxx.FLOAT_DTYPES:
            raise UnsupportedCard(f"output dtype {self.outputs[0].dtype} is not a float dtype the templates handle")
        readable = (*cxx.FLOAT_DTYPES, *INTEGER_OPERAND_DTYPES) if self.integer_operands else cxx.FLOAT_DTYPES
        for dtype in self.operand_dtypes:
            if dtype not in readable:
                raise UnsupportedCard(f"input dtype {dtype} is not a float dtype the templates handle")

    def _layout(self) -> tuple[list[int], list[int], list[list[int]]]:
        out = self.outputs[0]
        if not is_dense(out):
            raise UnsupportedCard(f"output layout stride={out.stride} overlaps or has gaps")
        strides = []
        for op in self.operands:
            spec = self.inputs[op.tensor]
            strides.append(list(op.strides) if op.strides is not None else broadcast_strides(spec, out.shape))
        return coalesce(out.shape, out.stride, strides)

    def _max_vector(self) -> int:
        """Widest vector every operand allows (1 when the innermost dim cannot be vectorised)."""
        shape, out_strides, op_strides = self._layout()
        widest = max(DTYPE_BYTES[d] for d in (self.outputs[0].dtype, *self.operand_dtypes))
        vec = 16 // widest
        if out_strides[-1] != 1 or not self.outputs[0].aligned16:
            return 1
        for op, strides in zip(self.operands, op_strides, strict=True):
            spec = self.inputs[op.tensor]
            if strides[-1] not in (0, 1) or not spec.aligned16:
                return 1
            if strides[-1] == 1 and (op.offset % vec or any(s % vec for s in strides[:-1])):
                return 1
        while vec > 1 and shape[-1] % vec:
            vec //= 2
        if any(s % vec for s in out_strides[:-1]):
            return 1
        return vec

    def tile_dim(self) -> int | None:
        """The coalesced dim along which the operands read across the output are contiguous, if any.

        Tiled mode needs every such operand to have stride 1 along one and the same dim (not the
        output's innermost); None when no operand reads across the output or they disagree.
        """
        shape, _, op_strides = self._layout()
        across = [s for s in op_strides if s[-1] not in (0, 1)]
        if not across or len(shape) < 2:
            return None
        fast = {next((d for d in range(len(shape) - 1) if s[d] == 1), None) for s in across}
        if len(fast) != 1 or None in fast:
            return None
        return fast.pop()

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        self._layout()
        if backend == "cuda":
            vec = self._max_vector()
            tiled = self.tile_dim() is not None
            return KnobSpace({
                "mode": ("tiled", "direct") if tiled else ("direct",),
                "threads_per_block": (256, 128, 512, 1024),
                "vector": (vec, 1) if vec > 1 else (1,),
                "unroll": (2, 1, 4),
                "waves": (1, 2, 4, 0),  # 0: one block per chunk of the tensor, as eager's kernels launch
                "fast_math": (True, False) if self.uses_math else (True,),
            }, only_in={name: ("direct",) for name in ("threads_per_block", "vector", "unroll", "waves")})
        return KnobSpace({
            "threads": cpu_thread_choices(device, (*self.inputs, *self.outputs)),
            "schedule": ("static", "dynamic"),
            "block_elems": (4096, 1024, 16384, 65536),
            "simd": (True, False),
            "fast_math": (True, False) if self.uses_math else (True,),
        })

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        return _render_cuda(self, knobs, device) if backend == "cuda" else _render_cpu(self, knobs)


def _offsets(shape: Sequence[int], names_strides: Sequence[tuple[str, Sequence[int]]], linear: str, indent: str) -> str:
    """C statements: the element offset of each named tensor for logical index ``linear`` (outer dims)."""
    lines = [f"{indent}int64_t rem = {linear}; (void)rem;"] if len(shape) else []
    for name, _ in names_strides:
        lines.append(f"{indent}int64_t {name} = 0;")
    for d in range(len(shape) - 1, -1, -1):
        lines.append(f"{indent}{{ const int64_t c = rem % {shape[d]}LL; rem /= {shape[d]}LL;")
        for name, strides in names_strides:
            if strides[d]:
                lines.append(f"{indent}  {name} += c * {strides[d]}LL;")
        lines.append(f"{indent}}}")
    return "\n".join(lines)


def _math_macros(backend: str, fast: bool) -> str:
    """The math an expression calls; fast on the cpu means the prelude's own vectorising forms
    (libm's calls keep g++ from vectorising a loop)."""
    if backend == "cuda":
        exp = "__expf(v)" if fast else "expf(v)"
        return (f"#define KF_EXP(v) {exp}\n#define KF_TANH(v) tanhf(v)\n#define KF_ERF(v) erff(v)\n"
                "#define KF_LOG(v) logf(v)\n#define KF_LOG1P(v) log1pf(v)\n#define KF_ERFINV(v) erfinvf(v)\n")
    if fast:
        return ("#define KF_EXP(v) kf_expf(v)\n"
                "#define KF_TANH(v) (1.0f - 2.0f / (kf_expf(2.0f * (v)) + 1.0f))\n"
                "#define KF_ERF(v) kf_erff(v)\n#define KF_LOG(v) kf_logf(v)\n#define KF_LOG1P(v) kf_log1pf(v)\n"
                "#define KF_ERFINV(v) kf_erfinvf(v)\n")
    return ("#define KF_EXP(v) expf(v)\n#define KF_TANH(v) tanhf(v)\n"
            "#define KF_ERF(v) erff(v)\n#define KF_LOG(v) logf(v)\n#define KF_LOG1P(v) log1pf(v)\n"
            "#define KF_ERFINV(v) kf_erfinvf(v)\n")


def _stored(dtype: str, backend: str) -> str:
    """The C++ type an operand of ``dtype`` is stored as."""
    return cxx.storage_type(dtype, backend) if dtype in INTEGER_OPERAND_DTYPES else cxx.element_type(dtype, backend)


def _value_type(dtype: str) -> str:
    """The C++ type an expression sees an operand of ``dtype`` as: floats in fp32, integers as stored."""
    return cxx.storage_type(dtype, "cpu") if dtype in INTEGER_OPERAND_DTYPES else "float"


def _value(dtype: str, load: str) -> str:
    """The expression's value of an operand of ``dtype`` loaded by ``load``."""
    return load if dtype in INTEGER_OPERAND_DTYPES else f"kf_to_f32({load})"


def _range_checks(plan: ElementwisePlan) -> str:
    """cpu kf_launch lines returning STATUS_BAD_INPUT where an input lies outside its :class:`ValueRange`."""
    lines = []
    for check in plan.value_ranges:
        spec = plan.inputs[check.tensor]
        t = cxx.storage_type(spec.dtype, "cpu")
        lines += [f"  for (int64_t i = 0; i < {spec.numel}LL; ++i) {{",
                  _offsets(spec.shape, [("at", spec.stride)], "i", "    "),
                  f"    const {t} v = ((const {t} *)inputs[{check.tensor}].data)[at];",
                  f"    if (v < {check.low}LL || v > {check.high}LL) return {cxx.STATUS_BAD_INPUT};",
                  "  }"]
    return "".join(line + "\n" for line in lines)


def _signature(plan: ElementwisePlan, backend: str) -> tuple[str, str]:
    """Kernel parameter list and the matching argument list from kf_launch."""
    params, args = [], []
    for i, op in enumerate(plan.operands):
        t = _stored(plan.inputs[op.tensor].dtype, backend)
        if i == 0 and plan.in_place:
            params.append(f"const {t} *in0")
            args.append(f"(const {t} *)outputs[0].data")
            continue
        restrict = "__restrict__" if backend == "cuda" else "__restrict"
        params.append(f"const {t} *{restrict} in{i}")
        args.append(f"(const {t} *)inputs[{op.tensor}].data + {op.offset}")
    out_t = cxx.element_type(plan.outputs[0].dtype, backend)
    params.append(f"{out_t} *out")
    args.append(f"({out_t} *)outputs[0].data")
    return ", ".join(params), ", ".join(args)


def _render_cpu(plan: ElementwisePlan, knobs: Knobs) -> str:
    shape, out_strides, op_strides = plan._layout()
    inner = shape[-1]
    block = min(int(knobs["block_elems"]), inner)
    chunks_per_row = cxx.ceil_div(inner, block)
    rows = 1
    for size in shape[:-1]:
        rows *= size
    out_t = cxx.element_type(plan.outputs[0].dtype, "cpu")
    params, args = _signature(plan, "cpu")
    names = [(f"o{i}", s[:-1]) for i, s in enumerate(op_strides)] + [("oo", out_strides[:-1])]
    loads = "\n".join(
        f"        const {_value_type(d)} x{i} = {_value(d, f'in{i}[o{i} + c * {s[-1]}LL]')};"
        for i, (d, s) in enumerate(zip(plan.operand_dtypes, op_strides, strict=True))
    )
    threads = f" num_threads({knobs['threads']})" if knobs["threads"] else ""
    simd = "#pragma omp simd" if knobs["simd"] else ""
    launch = cxx.cpu_kf_launch(plan.inputs, plan.checked_outputs,
                               f"{_range_checks(plan)}  kf_elementwise({args});\n{_cpu_stats_call(plan)}")
    return f"""{cxx.CPU_PRELUDE}
{_math_macros("cpu", bool(knobs["fast_math"]))}
/* {plan.summary} */
static void kf_elementwise({params}) {{
#pragma omp parallel for{threads} schedule({knobs["schedule"]})
  for (int64_t blk = 0; blk < {rows * chunks_per_row}LL; ++blk) {{
    const int64_t row = blk / {chunks_per_row}LL, c0 = (blk % {chunks_per_row}LL) * {block}LL;
    const int64_t c1 = c0 + {block}LL < {inner}LL ? c0 + {block}LL : {inner}LL;
{_offsets(shape[:-1], names, "row", "    ")}
{simd}
    for (int64_t c = c0; c < c1; ++c) {{
{loads}
      out[oo + c * {out_strides[-1]}LL] = kf_from_f32<{out_t}>({cxx.vectorising_cpu_math(plan.expression_for("cpu"))});
    }}
  }}
}}

{_cpu_stats_fn(plan)}
{launch}"""


def _cpu_stats_fn(plan: ElementwisePlan) -> str:
    stats = plan.channel_stats
    if stats is None:
        return ""
    params, _ = stats.params(plan.inputs, plan.outputs, "cpu")
    return (f"static void kf_channel_stats({params}) {{\n"
            f"  for (int64_t c = 0; c < {stats.channels}LL; ++c) {{ {stats.body('cpu', plan.outputs)} }}\n}}\n")


def _cpu_stats_call(plan: ElementwisePlan) -> str:
    stats = plan.channel_stats
    return "" if stats is None else f"  kf_channel_stats({stats.params(plan.inputs, plan.outputs, 'cpu')[1]});\n"


def _cuda_stats_fn(plan: ElementwisePlan) -> str:
    stats = plan.channel_stats
    if stats is None:
        return ""
    params, _ = stats.params(plan.inputs, plan.outputs, "cuda")
    return (f"__global__ void kf_channel_stats({params}) {{\n"
            f"  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (c < {stats.channels}LL) {{ {stats.body('cuda', plan.outputs)} }}\n}}\n")


def _cuda_stats_call(plan: ElementwisePlan) -> str:
    stats = plan.channel_stats
    if stats is None:
        return ""
    args = stats.params(plan.inputs, plan.outputs, "cuda")[1]
    blocks = cxx.ceil_div(stats.channels, 256)
    return f"  kf_channel_stats<<<{blocks}, 256, 0, (cudaStream_t)stream>>>({args});\n"


def _render_cuda(plan: ElementwisePlan, knobs: Knobs, device: DeviceInfo) -> str:
    if knobs.get("mode") == "tiled":
        return _render_cuda_tiled(plan, knobs, device)
    shape, out_strides, op_strides = plan._layout()
    vec = int(knobs["vector"])
    block, unroll = int(knobs["threads_per_block"]), int(knobs["unroll"])
    numel = 1
    for size in shape:
        numel *= size
    nvec = numel // vec
    inner = shape[-1]
    out_t = cxx.element_type(plan.outputs[0].dtype, "cuda")
    params, args = _signature(plan, "cuda")

    def index(names: Sequence[tuple[str, Sequence[int]]]) -> list[str]:
        return [f"      const int64_t e = v * {vec}LL, c = e % {inner}LL; (void)c;",
                _offsets(shape[:-1], names, f"e / {inner}LL", "      ")]

    input_names = [(f"o{i}", s[:-1]) for i, s in enumerate(op_strides)]
    held, loads, values = [], [], []
    for i, (dtype, s) in enumerate(zip(plan.operand_dtypes, op_strides, strict=True)):
        t, vt = _stored(dtype, "cuda"), _value_type(dtype)
        if vec > 1 and s[-1] == 1:
            held.append(f"  kf_vec<{t}, {vec}> l{i}[{unroll}];")
            loads.append(f"      l{i}[u] = kf_load_vec<{t}, {vec}>(in{i} + o{i} + c);")
            values.append(f"        const {vt} x{i} = {_value(dtype, f'l{i}[u].v[k]')};")
        elif s[-1] == 0:
            held.append(f"  {vt} b{i}[{unroll}];")
            # the read-only cache path is for data the kernel never writes
            load = f"in{i}[o{i}]" if i == 0 and plan.in_place else f"__ldg(in{i} + o{i})"
            loads.append(f"      b{i}[u] = {_value(dtype, load)};")
            values.append(f"        const {vt} x{i} = b{i}[u];")
        else:
            held.append(f"  {t} s{i}[{unroll}];")
            loads.append(f"      s{i}[u] = in{i}[o{i} + c * {s[-1]}LL];")
            values.append(f"        const {vt} x{i} = {_value(dtype, f's{i}[u]')};")
    store = (f"      kf_store_vec<{out_t}, {vec}>(out + oo + c, r);" if vec > 1
             else f"      out[oo + c * {out_strides[-1]}LL] = r.v[0];")
    body = [
        "    // Every load of the unrolled steps is issued before the first store: the bytes in flight",
        "    // per thread, not the thread count, bound a streaming kernel's bandwidth.",
        "#pragma unroll",
        f"    for (int u = 0; u < {unroll}; ++u) {{",
        f"      const int64_t v = first + (int64_t)u * {block};",
        f"      if (v >= {nvec}LL) continue;",
        *index(input_names), *loads,
        "    }",
        "#pragma unroll",
        f"    for (int u = 0; u < {unroll}; ++u) {{",
        f"      const int64_t v = first + (int64_t)u * {block};",
        f"      if (v >= {nvec}LL) continue;",
        *index([("oo", out_strides[:-1])]),
        f"      kf_vec<{out_t}, {vec}> r;",
        "#pragma unroll",
        f"      for (int k = 0; k < {vec}; ++k) {{",
        *values,
        f"        r.v[k] = kf_from_f32<{out_t}>({plan.expression_for('cuda')});",
        "      }",
        store,
        "    }",
    ]
    grid = min(cxx.ceil_div(nvec, block * unroll), 2**31 - 1)
    if knobs["waves"]:  # a persistent grid of that many device waves, each thread looping over the rest
        grid = min(grid, cuda_grid_limit(device, block) * int(knobs["waves"]))
    aligned = [f"inputs[{o.tensor}].data"
               for o, s in zip(plan.operands, op_strides, strict=True) if vec > 1 and s[-1] == 1]
    if vec > 1:
        aligned.append("outputs[0].data")
    body_text = "\n".join(body)
    held_text = "\n".join(held)
    return f"""{cxx.CUDA_PRELUDE}
{_math_macros("cuda", bool(knobs["fast_math"]))}
/* {plan.summary} */
__global__ void __launch_bounds__({block}) kf_elementwise({params}) {{
  const int64_t step = (int64_t)gridDim.x * {block * unroll}LL;
{held_text}
  for (int64_t first = (int64_t)blockIdx.x * {block * unroll}LL + threadIdx.x; first < {nvec}LL; first += step) {{
{body_text}
  }}
}}

{_cuda_stats_fn(plan)}
extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.checked_outputs, aligned)}
  kf_elementwise<<<{max(grid, 1)}, {block}, 0, (cudaStream_t)stream>>>({args});
{_cuda_stats_call(plan)}{cxx.cuda_launch_epilogue()}
}}
"""


# ---- cuda, operands read across the output, through shared-memory tiles -------------------------

TILE = 32
TILE_ROWS = 8  # threads per block: TILE x TILE_ROWS, each moving TILE / TILE_ROWS elements per phase


def _render_cuda_tiled(plan: ElementwisePlan, knobs: Knobs, device: DeviceInfo) -> str:
    """Tiles of (tile dim ``t``, innermost dim ``i``): operands read across the output are loaded
    along ``t`` into shared memory, then every output element is computed and stored along ``i``."""
    shape, out_strides, op_strides = plan._layout()
    t = plan.tile_dim()
    assert t is not None, "tiled mode offered without a tile dim"
    last = len(shape) - 1
    batch = [d for d in range(len(shape)) if d not in (t, last)]
    batch_shape = [shape[d] for d in batch]
    tiles_t, tiles_i = cxx.ceil_div(shape[t], TILE), cxx.ceil_div(shape[last], TILE)
    total = tiles_t * tiles_i * math.prod(batch_shape)
    out_t = cxx.element_type(plan.outputs[0].dtype, "cuda")
    params, args = _signature(plan, "cuda")
    across = [i for i, s in enumerate(op_strides) if s[-1] not in (0, 1)]
    names = [(f"o{i}", [s[d] for d in batch]) for i, s in enumerate(op_strides)]
    names.append(("oo", [out_strides[d] for d in batch]))
    dtypes = plan.operand_dtypes
    stage = "\n".join(
        f"    for (int r = threadIdx.y; r < {TILE}; r += {TILE_ROWS}) {{\n"
        f"      const int64_t ti = i0 + r, tt = t0 + threadIdx.x;\n"
        f"      if (ti < {shape[last]}LL && tt < {shape[t]}LL)\n"
        f"        tile{i}[r][threadIdx.x] = {_value(dtypes[i], f'in{i}[o{i} + ti * {op_strides[i][-1]}LL + tt]')};\n"
        "    }"
        for i in across)
    loads = []
    for i, s in enumerate(op_strides):
        if i in across:
            loads.append(f"        const {_value_type(dtypes[i])} x{i} = tile{i}[threadIdx.x][r];")
        else:
            load = f"in{i}[o{i} + tt * {s[t]}LL + ti * {s[-1]}LL]"
            loads.append(f"        const {_value_type(dtypes[i])} x{i} = {_value(dtypes[i], load)};")
    tiles = "\n".join(f"  __shared__ {_value_type(dtypes[i])} tile{i}[{TILE}][{TILE + 1}];" for i in across)
    loads_text = "\n".join(loads)
    grid = max(1, min(total, cuda_grid_limit(device, TILE * TILE_ROWS)))
    return f"""{cxx.CUDA_PRELUDE}
{_math_macros("cuda", bool(knobs["fast_math"]))}
/* {plan.summary}; tiled over dims {t} and {last} of {shape} */
__global__ void __launch_bounds__({TILE * TILE_ROWS}) kf_elementwise({params}) {{
{tiles}
  for (int64_t tile = blockIdx.x; tile < {total}LL; tile += gridDim.x) {{
    const int64_t i0 = (tile % {tiles_i}LL) * {TILE}, t0 = (tile / {tiles_i}LL % {tiles_t}LL) * {TILE};
{_offsets(batch_shape, names, f"tile / {tiles_i * tiles_t}LL", "    ")}
{stage}
    __syncthreads();
    for (int r = threadIdx.y; r < {TILE}; r += {TILE_ROWS}) {{
      const int64_t tt = t0 + r, ti = i0 + threadIdx.x;
      if (tt < {shape[t]}LL && ti < {shape[last]}LL) {{
{loads_text}
        out[oo + tt * {out_strides[t]}LL + ti] = kf_from_f32<{out_t}>({plan.expression_for("cuda")});
      }}
    }}
    __syncthreads();
  }}
}}

{_cuda_stats_fn(plan)}
extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.checked_outputs)}
  kf_elementwise<<<{grid}, dim3({TILE}, {TILE_ROWS}), 0, (cudaStream_t)stream>>>({args});
{_cuda_stats_call(plan)}{cxx.cuda_launch_epilogue()}
}}
"""
