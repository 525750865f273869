"""The row engine: statistics over rows of a contiguous tensor, then an optional per-element write.

Reductions (sum, mean, amax), softmax and log-softmax, layer norm, RMS norm (plain, zero-centred
weight, gated) and group norm are one kernel shape: a row of ``length`` elements (stride
``inner``) is reduced to a few statistics, then each element is written from them. On cuda a
row belongs to one thread, one warp or one block; the row is held in registers when it fits
(one pass over memory), read with 16-byte vectors, reduced with warp shuffles or a shared-memory
tree. Few long rows are split over several blocks whose partial statistics a second kernel
merges (split mode); short rows reduced to one value are staged through shared memory (tile
mode). On cpu rows are spread over OpenMP threads and reduced with ``omp simd`` loops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent_service.models import DeviceDescription
from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import is_contiguous, is_dense, storage_order_rows
from agent_service.offline.plan import cpu_thread_choices, cuda_grid_limit
from capture_service.cards import TensorSpec

KINDS = ("sum", "mean", "amax", "softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm")
MAX_CACHED_FLOATS = 64
# The per-row statistics each kind finishes with, declared in the kernel before they are set.
_STAT_DECLS = {"sum": "float st_sum;", "mean": "float st_sum;", "amax": "float st_m;",
               "softmax": "float st_m, st_sum;", "log_softmax": "float st_m, st_sum;", "rms_norm": "float st_sumsq;",
               "layer_norm": "float st_mean, st_var;", "group_norm": "float st_mean, st_var;"}
SPLIT_MIN_LENGTH = 8192
#: The knobs only some cuda modes read (threads_per_block is read by all): split and resident
#: modes reduce with their own statistics and stage no cached row, columns mode reduces across
#: warps its own way, and tile mode reads its rows one way.
_ROW_MODES = ("warp", "block", "thread", "columns")
_CUDA_KNOB_MODES: dict[str, tuple[str, ...]] = {
    "stats": _ROW_MODES,
    "cache_row": _ROW_MODES,
    "reduce": ("warp", "block", "thread", "split", "resident"),
    "vector": (*_ROW_MODES, "split", "resident"),
    "blocks_per_row": ("split",),
    "unroll": ("split",),
    "order": ("split",),
    "resident_blocks_per_sm": ("resident",),
}
# Resident mode stages each block's chunk in dynamic shared memory; the most a block may opt into
# per architecture (sm_80 164 KiB, sm_90 227 KiB; others 99 KiB), less room for the reduction.
RESIDENT_SMEM_BYTES = {"sm_80": 163 * 1024, "sm_87": 163 * 1024, "sm_90": 227 * 1024, "sm_100": 227 * 1024}
RESIDENT_DEFAULT_SMEM_BYTES = 99 * 1024
RESIDENT_RESERVED_BYTES = 16 * 1024
TILE_MAX_LENGTH = 256
CPU_LANES = 32  # partial values of a cpu row reduction (see _cpu_lane_reduce)
TILE_FLOATS = 8192  # shared memory per block for tile mode: 32 KiB
# Columns mode with a contiguous output apart from x: elements per row staged in shared memory
# before the block writes them along the output's rows.
STAGED_WRITE_ELEMENTS = 64

ACTIVATIONS = {
    "silu": "(({v}) / (1.0f + KF_EXP(-({v}))))",
    "gelu": "(0.5f * ({v}) * (1.0f + erff(({v}) * 0.7071067811865476f)))",
    "gelu_tanh": "(0.5f * ({v}) * (1.0f + tanhf(0.7978845608028654f * (({v}) + 0.044715f * ({v}) * ({v}) * ({v})))))",
    "relu": "(({v}) < 0.0f ? 0.0f : ({v}))",
}

# The running max of a row, keeping NaN as eager's amax does (fmaxf would return the other operand).
_MAX_KEEPING_NAN = "s.a = (v != v || v > s.a) ? v : s.a;"

CUDA_ROW_HELPERS = r"""
struct kf_stat { float a, b, c; };
__device__ __forceinline__ kf_stat kf_shfl(kf_stat s, int mask) {
  kf_stat r;
  r.a = __shfl_xor_sync(0xffffffffu, s.a, mask);
  r.b = __shfl_xor_sync(0xffffffffu, s.b, mask);
  r.c = __shfl_xor_sync(0xffffffffu, s.c, mask);
  return r;
}
struct kf_sum_op { __device__ __forceinline__ kf_stat operator()(kf_stat x, kf_stat y) const {
  kf_stat r = {x.a + y.a, x.b + y.b, x.c + y.c}; return r; } };
/* A max that keeps NaN, as eager's amax does (fmaxf returns the other operand). */
struct kf_max_op { __device__ __forceinline__ kf_stat operator()(kf_stat x, kf_stat y) const {
  kf_stat r = {(y.a != y.a || y.a > x.a) ? y.a : x.a, 0.0f, 0.0f}; return r; } };
/* Welford/Chan merge of (count, mean, M2). */
struct kf_welford_op { __device__ __forceinline__ kf_stat operator()(kf_stat x, kf_stat y) const {
  if (y.a == 0.0f) return x;
  if (x.a == 0.0f) return y;
  const float n = x.a + y.a, d = y.b - x.b, f = y.a / n;
  kf_stat r = {n, x.b + d * f, x.c + y.c + d * d * x.a * f}; return r; } };
/* Online softmax merge of (max, sum of exp(v - max)). */
struct kf_online_op { __device__ __forceinline__ kf_stat operator()(kf_stat x, kf_stat y) const {
  const float m = fmaxf(x.a, y.a);
  if (m == -INFINITY) { kf_stat r = {m, 0.0f, 0.0f}; return r; }
  kf_stat r = {m, x.b * __expf(x.a - m) + y.b * __expf(y.a - m), 0.0f}; return r; } };

/* Columns mode: the NT warps of a block split 32 adjacent rows; lane l of every warp holds row l. */
template <int NT, typename Op>
__device__ __forceinline__ kf_stat kf_column_reduce(kf_stat v, Op op, kf_stat *smem) {
  __syncthreads();
  smem[threadIdx.x] = v;
  __syncthreads();
  kf_stat r = smem[threadIdx.x & 31];
#pragma unroll
  for (int w = 1; w < NT; ++w) r = op(r, smem[w * 32 + (threadIdx.x & 31)]);
  return r;
}

/* Reduce over the NT threads sharing a row: NT == 1, one warp, or the whole block. */
template <int NT, bool TREE, typename Op>
__device__ __forceinline__ kf_stat kf_group_reduce(kf_stat v, Op op, kf_stat *smem) {
  if constexpr (NT == 1) {
    return v;
  } else if constexpr (TREE && NT > 32) {
    __syncthreads();
    smem[threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int s = NT / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) smem[threadIdx.x] = op(smem[threadIdx.x], smem[threadIdx.x + s]);
      __syncthreads();
    }
    return smem[0];
  } else {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = op(v, kf_shfl(v, m));
    if constexpr (NT <= 32) {
      return v;
    } else {
      __syncthreads();
      if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
      __syncthreads();
      kf_stat r = smem[0];
#pragma unroll
      for (int w = 1; w < NT / 32; ++w) r = op(r, smem[w]);
      return r;
    }
  }
}
"""


@dataclass(frozen=True)
class RowPlan:
    """A row computation over input ``x``; see the module docstring for the kinds."""

    family: str
    summary: str
    kind: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    x: int
    rows: int
    length: int
    inner: int = 1
    y: int | None = None  # output written per element (same layout as x)
    row_outputs: dict[str, int] = field(default_factory=dict)  # "value" | "mean" | "rstd" -> output index
    weight: int | None = None
    bias: int | None = None
    gate: int | None = None  # rms norm gated: y *= act(gate), gate laid out like x
    gate_activation: str = "silu"
    weight_offset: float = 0.0  # 1.0 for zero-centred weights: y *= (1 + w)
    round_before_weight: bool = False  # normalised value rounded to x's dtype before the weight
    eps: float = 0.0
    groups: int = 1  # group norm: channels per group = channels // groups
    channels: int = 0
    spatial: int = 1
    activation: str | None = None  # applied to the written value (norm + activation modules)
    # Rows over the last dim of a dense permuted tensor (a transposed view), walked in storage
    # order: the output and gate share the input's strides, so row r is storage [r*length, ...).
    storage_order: bool = False
    # The output's own ``inner`` when it is laid out otherwise than x (a dense permuted input whose
    # eager output is contiguous): element j of row r goes to (r / y_inner) * L * y_inner + j * y_inner
    # + r % y_inner. None: y shares x's layout.
    y_inner: int | None = None
    # Rows walked in storage order whose per-row outputs sit in logical order (a reduction of a
    # view whose kept dims are permuted in storage): row r's output is at the sum of
    # ((r / divisor) % size) * stride over these terms (layout.storage_rows). Empty: at r.
    row_order: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown row kind {self.kind}")
        specs = [self.inputs[self.x]] + [self.outputs[i] for i in ([self.y] if self.y is not None else [])]
        specs += [self.outputs[i] for i in self.row_outputs.values()]
        if any(s.dtype not in cxx.FLOAT_DTYPES for s in specs):
            raise UnsupportedCard("only float32, float16 and bfloat16 rows are templated")
        x = self.inputs[self.x]
        per_element = [self.outputs[self.y]] if self.y is not None else []
        per_element += [self.inputs[self.gate]] if self.gate is not None else []
        if self.storage_order:
            if self.row_outputs or self.kind == "group_norm" or storage_order_rows(x, per_element) is None:
                raise UnsupportedCard("rows cannot be walked in storage order")
        elif is_contiguous(x):
            if any(not is_contiguous(s) for s in per_element):
                raise UnsupportedCard("elementwise output or gate does not share the input's contiguous layout")
        elif not is_dense(x) or self.kind == "group_norm":
            raise UnsupportedCard("row input is not contiguous")
        elif self.gate is not None and self.inputs[self.gate].stride != x.stride:
            raise UnsupportedCard("gate does not share the input's strides")
        elif self.y is not None and self.y_inner is None and self.outputs[self.y].stride != x.stride:
            # A dense permuted input (see layout.dense_row_layout) is walked in storage order.
            raise UnsupportedCard("elementwise output does not share the input's strides")
        if self.row_order and (self.y is not None or self.storage_order):
            raise UnsupportedCard("rows in storage order are templated for row outputs alone")
        if self.y_inner is not None and (self.y is None or not is_contiguous(self.outputs[self.y])):
            raise UnsupportedCard("an output laid out apart from the input must be contiguous")
        if any(s.shape != x.shape for s in per_element):
            raise UnsupportedCard("elementwise output or gate does not have the input's shape")
        for name, index in self.row_outputs.items():
            out = self.outputs[index]
            if out.numel != self.rows or not is_contiguous(out):
                raise UnsupportedCard(f"row output {name} is not a contiguous tensor of {self.rows} values")
        for t in (self.weight, self.bias):
            if t is not None:
                spec = self.inputs[t]
                if not is_contiguous(spec) or spec.dtype not in cxx.FLOAT_DTYPES:
                    raise UnsupportedCard("weight/bias is not a contiguous float tensor")
        if self.gate is not None and self.inputs[self.gate].dtype not in cxx.FLOAT_DTYPES:
            raise UnsupportedCard("gate is not a float tensor")

    @property
    def y_apart(self) -> bool:
        """Whether y is laid out otherwise than x (then y is never moved in vectors or split rows)."""
        return self.y_inner is not None and self.y_inner != self.inner

    def _y_base_c(self, indent: str) -> str:
        """C declaration of ``ybase``, the start of ``row`` in y, where y is laid out apart."""
        if self.y_inner is None or not self.y_apart:
            return ""
        inner = self.y_inner
        return f"{indent}const int64_t ybase = (row / {inner}LL) * {self.length * inner}LL + row % {inner}LL;\n"

    def _y_index_c(self) -> str:
        """C expression of element ``j``'s index in y (``idx``, x's index, where y shares x's layout)."""
        return f"ybase + j * {self.y_inner}LL" if self.y_apart else "idx"

    # ---- knobs -------------------------------------------------------------------------------

    def _stats_choices(self) -> tuple[str, ...]:
        if self.kind in ("softmax", "log_softmax"):
            return ("two_pass", "online")
        if self.kind in ("layer_norm", "group_norm"):
            return ("two_pass", "one_pass")
        return ("one_pass",)

    def _rereads_row(self, stats: str | None = None) -> bool:
        """Whether the kernel walks the row more than once (so caching it in registers pays)."""
        two_pass = self.kind in ("softmax", "log_softmax", "layer_norm", "group_norm") and stats != "online" \
            and stats != "one_pass"
        return self.y is not None or two_pass

    def _stashes_exp(self) -> bool:
        """A softmax writing float32 in x's layout: its sum pass may keep each exp in y, and the
        write pass then rescales y rather than computing every exp again (as eager does)."""
        return (self.kind == "softmax" and self.y is not None and not self.y_apart and self.activation is None
                and self.outputs[self.y].dtype == "float32")

    def _max_vector(self) -> int:
        specs = [self.inputs[self.x]]
        if self.y is not None:
            specs.append(self.outputs[self.y])
        if self.gate is not None:
            specs.append(self.inputs[self.gate])
        if self.inner != 1 or self.y_apart or not all(s.aligned16 for s in specs):
            return 1
        vec = 16 // max(cxx.ELEMENT_BYTES[s.dtype] for s in specs)
        while vec > 1 and self.length % vec:
            vec //= 2
        return vec

    def knob_space(self, backend: str, device: DeviceDescription) -> KnobSpace:
        if backend == "cpu":
            return KnobSpace({
                "threads": cpu_thread_choices(device),
                "schedule": ("static", "dynamic"),
                "stats": self._stats_choices(),
                "simd": (True, False),
                "fast_math": (True, False),
                "stash_exp": (True, False) if self._stashes_exp() else (False,),
            })
        vec = self._max_vector()
        splits = self._split_choices(device, vec)
        resident_per_sm = self._resident_choices(device, vec)
        if self.inner != 1:
            modes: tuple[str, ...] = ("columns", "thread")
        elif self.length <= 1024:
            modes = ("warp", "block") + (("thread",) if self.length <= 64 else ())
            if self._tiles_rows():
                modes = ("tile", *modes)
        else:
            modes = (("split",) if splits else ()) + (("resident",) if resident_per_sm else ())
            if not (splits and self._outgrows_l2(device)):
                modes += ("block", "warp")
        choices: dict[str, tuple[Any, ...]] = {
            "mode": modes,
            "threads_per_block": (256, 128, 512, 1024) if modes[0] != "warp" else (256, 128, 512),
            "vector": (vec, 1) if vec > 1 else (1,),
            "stats": self._stats_choices(),
            "cache_row": (True, False) if self._rereads_row() else (False,),
            "reduce": ("shuffle", "smem_tree"),
        }
        if splits:
            choices["blocks_per_row"] = splits
            choices["unroll"] = (1, 4)  # split mode: vectors loaded ahead of use, per thread
            choices["order"] = ("reverse", "forward")  # split mode: the writing kernel's chunk order
        if resident_per_sm:
            choices["resident_blocks_per_sm"] = resident_per_sm
        return KnobSpace(choices, only_in=_CUDA_KNOB_MODES)

    def _outgrows_l2(self, device: DeviceDescription) -> bool:
        """Whether the input is larger than the last-level cache (then a row's second read is from memory).

        With fewer rows than SMs, one block per row (block and warp modes) leaves most SMs idle;
        that is bearable only while the row's re-reads come from L2. Past it, the H200 measured
        block mode 3.2 and 5.5 times slower than split mode (bf16 group norms of 128 and 256 MiB),
        so those modes are not offered.
        """
        size = cxx.ELEMENT_BYTES[self.inputs[self.x].dtype]
        return device.l2_bytes > 0 and self.rows * self.length * size > device.l2_bytes

    def _tiles_rows(self) -> bool:
        """Short rows reduced to one value each (global pooling): staged through shared memory.

        A row of 49 elements is too short for a warp and too unaligned for vectors; a block
        copies a run of whole rows to shared memory with 16-byte loads, then each thread
        reduces one row there.
        """
        return (self.inner == 1 and self.y is None and self.kind in ("sum", "mean", "amax")
                and self.length <= TILE_MAX_LENGTH and set(self.row_outputs) == {"value"})

    def _split_choices(self, device: DeviceDescription, vec: int) -> tuple[int, ...]:
        """Blocks per row for split mode, offered when fewer rows than SMs would idle the device.

        One block per row leaves most SMs idle when rows are few and long (group norm at batch 1
        has 32 rows of up to millions of elements); split mode gives each row several blocks,
        which reduce partial statistics that a second kernel merges before writing.
        """
        sms = device.sm_count if device.sm_count > 0 else 132
        if self.inner != 1 or self.y_apart or self.rows >= sms or self.length < SPLIT_MIN_LENGTH:
            return ()
        most = max(2, self.length // (vec * 256))
        # Two blocks per SM first; eight fill an SM with 256-thread blocks, four times the loads in flight.
        wanted = tuple(cxx.ceil_div(per_sm * sms, self.rows) for per_sm in (2, 4, 1, 8))
        return tuple(dict.fromkeys(min(max(2, n), most) for n in wanted))

    def resident_chunk(self, device: DeviceDescription, vec: int, per_sm: int) -> int:
        """Elements per block in resident mode: the rows spread over ``per_sm`` blocks of every SM."""
        sms = device.sm_count if device.sm_count > 0 else 132
        splits = max(1, sms * per_sm // self.rows)
        return cxx.ceil_div(cxx.ceil_div(self.length, splits), vec) * vec

    def _resident_choices(self, device: DeviceDescription, vec: int) -> tuple[int, ...]:
        """Blocks per SM for resident mode, offered where the whole input fits in shared memory.

        Split mode reads the input twice (statistics, then the write); with few rows the tensor
        is often small enough to stay on chip: each block keeps its chunk in shared memory across
        a grid-wide barrier (a cooperative launch) and the input is read from memory once.
        """
        if self.inner != 1 or self.y is None or self.y_apart or self.rows >= (device.sm_count or 132) \
                or self.length < SPLIT_MIN_LENGTH:
            return ()
        budget = RESIDENT_SMEM_BYTES.get(device.arch, RESIDENT_DEFAULT_SMEM_BYTES)
        size = cxx.ELEMENT_BYTES[self.inputs[self.x].dtype]
        return tuple(per_sm for per_sm in (2, 1)
                     if self.resident_chunk(device, vec, per_sm) * size <= budget // per_sm - RESIDENT_RESERVED_BYTES)

    def render(self, backend: str, knobs: Knobs, device: DeviceDescription) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        if backend != "cuda":
            return _render_cpu(self, knobs)
        if knobs["mode"] == "split":
            return _render_cuda_split(self, knobs)
        if knobs["mode"] == "resident":
            return _render_cuda_resident(self, knobs, device)
        if knobs["mode"] == "tile":
            return _render_cuda_tile(self, knobs, device)
        return _render_cuda(self, knobs, device)

    # ---- shared pieces -----------------------------------------------------------------------

    def _params(self, backend: str) -> tuple[str, str]:
        restrict = "__restrict__" if backend == "cuda" else "__restrict"
        params, args = [], []

        def add_in(name: str, index: int) -> None:
            t = cxx.element_type(self.inputs[index].dtype, backend)
            params.append(f"const {t} *{restrict} {name}")
            args.append(f"(const {t} *)inputs[{index}].data")

        def add_out(name: str, index: int) -> None:
            t = cxx.element_type(self.outputs[index].dtype, backend)
            params.append(f"{t} *{restrict} {name}")
            args.append(f"({t} *)outputs[{index}].data")

        add_in("x", self.x)
        for name, index in (("w", self.weight), ("b", self.bias), ("g", self.gate)):
            if index is not None:
                add_in(name, index)
        if self.y is not None:
            add_out("y", self.y)
        for name, index in self.row_outputs.items():
            add_out(f"r_{name}", index)
        return ", ".join(params), ", ".join(args)

    def _write_expr(self, backend: str) -> str:
        """The value written at element ``j`` (element index ``idx``) of row ``row`` from ``v``."""
        if self.kind == "softmax":
            return "KF_EXP(v - st_m) * st_inv"
        if self.kind == "log_softmax":
            return "v - st_m - st_log"
        if self.kind == "layer_norm":
            expr = "(v - st_mean) * st_rstd"
            if self.weight is not None:
                expr = f"{expr} * kf_to_f32(w[j])"
            if self.bias is not None:
                expr = f"{expr} + kf_to_f32(b[j])"
        elif self.kind == "group_norm":
            expr = "(v - st_mean) * st_rstd"
            if self.weight is not None:
                expr = f"{expr} * kf_to_f32(w[ch])"
            if self.bias is not None:
                expr = f"{expr} + kf_to_f32(b[ch])"
        elif self.kind == "rms_norm":
            expr = "v * st_rstd"
            if self.round_before_weight:
                xt = cxx.element_type(self.inputs[self.x].dtype, backend)
                expr = f"kf_to_f32(kf_from_f32<{xt}>({expr}))"
            if self.weight is not None:
                weight = "kf_to_f32(w[j])"
                if self.weight_offset:
                    weight = f"({cxx.cfloat(self.weight_offset)} + {weight})"
                expr = f"({expr}) * {weight}"
            if self.gate is not None:
                gate_value = "kf_to_f32(g[idx])"
                expr = f"({expr}) * {ACTIVATIONS[self.gate_activation].format(v=gate_value)}"
        else:
            raise AssertionError(self.kind)
        if self.activation:
            expr = ACTIVATIONS[self.activation].format(v=expr)
        return expr

    def _row_stats_c(self) -> str:
        """C statements turning reduced statistics into the named per-row values (st_*)."""
        n = cxx.cfloat(float(self.length))
        eps = cxx.cfloat(self.eps)
        if self.kind in ("sum", "mean", "amax"):
            return ""
        if self.kind in ("softmax", "log_softmax"):
            return "const float st_inv = 1.0f / st_sum; const float st_log = logf(st_sum); (void)st_inv; (void)st_log;"
        if self.kind == "rms_norm":
            return f"const float st_rstd = 1.0f / sqrtf(st_sumsq / {n} + {eps});"
        return f"const float st_rstd = 1.0f / sqrtf(fmaxf(st_var, 0.0f) + {eps});"

    def _row_output_values(self) -> dict[str, str]:
        if self.kind == "sum":
            return {"value": "st_sum"}
        if self.kind == "mean":
            return {"value": f"st_sum / {cxx.cfloat(float(self.length))}"}
        if self.kind == "amax":
            return {"value": "st_m"}
        return {"mean": "st_mean", "rstd": "st_rstd"} if self.kind != "rms_norm" else {"rstd": "st_rstd"}

    def _channel_c(self) -> str:
        if self.kind != "group_norm":
            return ""
        per_group = self.channels // self.groups
        return f"const int64_t ch = (row % {self.groups}LL) * {per_group}LL + j / {self.spatial}LL; (void)ch;"

    def _row_output_writes(self, backend: str, indent: str) -> str:
        """Statements storing each per-row output of ``row`` from the finished statistics."""
        writes = ""
        for name, value in self._row_output_values().items():
            if name in self.row_outputs:
                t = cxx.element_type(self.outputs[self.row_outputs[name]].dtype, backend)
                writes += f"{indent}r_{name}[{self.row_index_c('row')}] = kf_from_f32<{t}>({value});\n"
        return writes

    def row_index_c(self, row: str) -> str:
        """C expression of where row ``row``'s outputs go (see ``row_order``)."""
        if not self.row_order:
            return row
        return " + ".join(f"(({row}) / {d}LL % {n}LL) * {s}LL" for d, n, s in self.row_order)

    def _vector_pointers(self) -> list[str]:
        """The pointers a vectorised kernel moves 16 bytes at a time (which must be aligned)."""
        pointers = [f"inputs[{self.x}].data"] + ([f"outputs[{self.y}].data"] if self.y is not None else [])
        return pointers + ([f"inputs[{self.gate}].data"] if self.gate is not None else [])


def _math_macros(backend: str, fast: bool) -> str:
    if backend == "cuda":
        return "#define KF_EXP(v) __expf(v)\n" if fast else "#define KF_EXP(v) expf(v)\n"
    return "#define KF_EXP(v) kf_expf(v)\n" if fast else "#define KF_EXP(v) expf(v)\n"


# ---- cpu ---------------------------------------------------------------------------------------


def _render_cpu(plan: RowPlan, knobs: Knobs) -> str:
    L, inner = plan.length, plan.inner
    simd = "#pragma omp simd" if knobs["simd"] else ""
    xj = f"kf_to_f32(x[base + j * {inner}LL])"
    stash = bool(knobs.get("stash_exp")) and knobs["stats"] == "two_pass"  # y holds each exp after the sums

    def reduce_loop(init: str, var: str, op: str, term: str, before: str = "") -> str:
        """``var`` reduced with ``op`` over ``term`` of each element (after the statements ``before``)."""
        if knobs["simd"] and L >= 2 * CPU_LANES:
            return _cpu_lane_reduce(init, var, op, term, before, L, xj)
        # OpenMP's max combiner drops NaN; the NaN-keeping select is merged in order instead
        pragma = f"#pragma omp simd reduction({op}:{var})" if knobs["simd"] and op == "+" else ""
        return (f"    float {var} = {init};\n{pragma}\n    for (int64_t j = 0; j < {L}LL; ++j) {{ const float v = {xj};"
                f" {before}{_combine(op, var, term)} }}\n")

    stats = ""
    kind = plan.kind
    if kind in ("sum", "mean"):
        stats = reduce_loop("0.0f", "st_sum", "+", "v")
    elif kind == "amax":
        stats = reduce_loop("-INFINITY", "st_m", "max", "v")
    elif kind in ("softmax", "log_softmax"):
        if knobs["stats"] == "online":
            stats = (f"    float st_m = -INFINITY, st_sum = 0.0f;\n"
                     f"    for (int64_t j = 0; j < {L}LL; ++j) {{ const float v = {xj};\n"
                     "      if (v > st_m) { st_sum = st_sum * KF_EXP(st_m - v) + 1.0f; st_m = v; }"
                     " else st_sum += KF_EXP(v - st_m); }\n")
        else:
            stats = reduce_loop("-INFINITY", "st_m", "max", "v")
            if stash:
                keep = f"const float e = KF_EXP(v - st_m); y[base + j * {inner}LL] = e; "
                stats += reduce_loop("0.0f", "st_sum", "+", "e", keep)
            else:
                stats += reduce_loop("0.0f", "st_sum", "+", "KF_EXP(v - st_m)")
    elif kind in ("layer_norm", "group_norm"):
        if knobs["stats"] == "one_pass":
            pragma = "#pragma omp simd reduction(+:s1, s2)" if knobs["simd"] else ""
            stats = (f"    const float shift = kf_to_f32(x[base]);\n    float s1 = 0.0f, s2 = 0.0f;\n{pragma}\n"
                     f"    for (int64_t j = 0; j < {L}LL; ++j) {{\n"
                     f"      const float d = {xj} - shift; s1 += d; s2 += d * d; }}\n"
                     f"    const float m1 = s1 / {cxx.cfloat(float(L))};\n"
                     f"    const float st_mean = shift + m1, st_var = s2 / {cxx.cfloat(float(L))} - m1 * m1;\n")
        else:
            stats = reduce_loop("0.0f", "st_sum", "+", "v")
            stats += f"    const float st_mean = st_sum / {cxx.cfloat(float(L))};\n"
            stats += reduce_loop("0.0f", "st_sq", "+", "(v - st_mean) * (v - st_mean)")
            stats += f"    const float st_var = st_sq / {cxx.cfloat(float(L))};\n"
    elif kind == "rms_norm":
        stats = reduce_loop("0.0f", "st_sumsq", "+", "v * v")
    stats += "    " + plan._row_stats_c() + "\n"
    write = ""
    if plan.y is not None:
        yt = cxx.element_type(plan.outputs[plan.y].dtype, "cpu")
        value = "y[idx] * st_inv" if stash else plan._write_expr("cpu")
        body = (f"      const int64_t idx = base + j * {inner}LL; (void)idx;\n"
                "      const float v = kf_to_f32(x[idx]);\n"
                f"      y[{plan._y_index_c()}] = kf_from_f32<{yt}>({value});\n")
        if kind == "group_norm":
            # A loop per channel of the group: its weight and bias stay in registers (gathered per
            # element they made the kernel five times slower than eager).
            per_group = plan.channels // plan.groups
            write = (f"{plan._y_base_c('    ')}    for (int64_t c = 0; c < {per_group}LL; ++c) {{\n"
                     f"    const int64_t ch = (row % {plan.groups}LL) * {per_group}LL + c;\n{simd}\n"
                     f"    for (int64_t j = c * {plan.spatial}LL; j < (c + 1) * {plan.spatial}LL; ++j) {{\n"
                     f"{body}    }}\n    }}\n")
        else:
            write = (f"{plan._y_base_c('    ')}{simd}\n    for (int64_t j = 0; j < {L}LL; ++j) {{\n"
                     f"{body}    }}\n")
    write += plan._row_output_writes("cpu", "    ")
    params, args = plan._params("cpu")
    threads = f" num_threads({knobs['threads']})" if knobs["threads"] else ""
    return f"""{cxx.CPU_PRELUDE}
{_math_macros("cpu", bool(knobs["fast_math"]))}
/* {plan.summary} */
static void kf_rows({params}) {{
#pragma omp parallel for{threads} schedule({knobs["schedule"]})
  for (int64_t row = 0; row < {plan.rows}LL; ++row) {{
    const int64_t base = (row / {inner}LL) * {L * inner}LL + row % {inner}LL;
{stats}{write}  }}
}}

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
  (void)stream;
{cxx.guard(plan.inputs, plan.outputs)}
  kf_rows({args});
  return 0;
}}
"""


def _combine(op: str, acc: str, value: str) -> str:
    """The C statement folding ``value`` into ``acc`` (``op`` is ``+`` or ``max``)."""
    # max keeps NaN (as eager's amax does): once acc is NaN no comparison replaces it
    if op == "+":
        return f"{acc} += {value};"
    return f"{acc} = ({value} != {value} || {value} > {acc}) ? {value} : {acc};"


def _cpu_lane_reduce(init: str, var: str, op: str, term: str, before: str, length: int, xj: str) -> str:
    """A row reduction into :data:`CPU_LANES` partial values, merged after the row.

    One vector accumulator makes the loop wait on each add's latency; the lanes give the
    vectorised loop several independent ones (a sum of 1023 floats: 150 -> 65 ns on a Zen 3 core).
    """
    lane, whole = f"{var}_l[k]", length // CPU_LANES * CPU_LANES
    return (f"    float {var}_l[{CPU_LANES}];\n"
            f"    for (int k = 0; k < {CPU_LANES}; ++k) {var}_l[k] = {init};\n"
            f"    for (int64_t j0 = 0; j0 < {whole}LL; j0 += {CPU_LANES}) {{\n"
            "#pragma omp simd\n"
            f"      for (int k = 0; k < {CPU_LANES}; ++k) {{ const int64_t j = j0 + k; const float v = {xj};"
            f" {before}{_combine(op, lane, term)} }}\n    }}\n"
            f"    float {var} = {init};\n"
            f"    for (int64_t j = {whole}LL; j < {length}LL; ++j) {{ const float v = {xj};"
            f" {before}{_combine(op, var, term)} }}\n"
            + (f"#pragma omp simd reduction({op}:{var})\n" if op == "+" else "")  # max: see _combine
            + f"    for (int k = 0; k < {CPU_LANES}; ++k) {_combine(op, var, lane)}\n")


# ---- cuda --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CudaShape:
    nt: int
    block: int
    vec: int
    items: int
    cache: bool


def _cuda_shape(plan: RowPlan, knobs: Knobs) -> _CudaShape:
    block = int(knobs["threads_per_block"])
    nt = {"thread": 1, "warp": 32, "block": block, "columns": block // 32}[knobs["mode"]]
    vec = int(knobs["vector"]) if plan.inner == 1 else 1
    items = cxx.ceil_div(plan.length, nt * vec)
    cache = bool(knobs["cache_row"]) and items * vec <= MAX_CACHED_FLOATS and plan._rereads_row(knobs["stats"])
    return _CudaShape(nt, block, vec, items, cache)


def _cuda_foreach(plan: RowPlan, shape: _CudaShape, body: str, source: str, before: str = "", after: str = "") -> str:
    """Loop over this thread's elements of the row; ``source``: "global", "fill" (load and cache) or "cache"."""
    xt = cxx.element_type(plan.inputs[plan.x].dtype, "cuda")
    vec, inner = shape.vec, plan.inner
    unroll = _unroll_pragma(shape, source)
    if source == "cache":
        value = f"cache[it * {vec} + k]"
        load = ""
    elif vec > 1:
        load = f"        const kf_vec<{xt}, {vec}> lv = kf_load_vec<{xt}, {vec}>(x + base + j0);\n"
        value = "kf_to_f32(lv.v[k])"
    else:
        load = ""
        value = f"kf_to_f32(x[base + j0 * {inner}LL])"
    fill = f" cache[it * {vec} + k] = v;" if source == "fill" else ""
    return f"""{unroll}
    for (int it = 0; it < {shape.items}; ++it) {{
      const int64_t j0 = ((int64_t)it * {shape.nt} + t) * {vec};
      if (live && j0 < {plan.length}LL) {{
{load}{before}#pragma unroll
        for (int k = 0; k < {vec}; ++k) {{
          const int64_t j = j0 + k; (void)j;
          const float v = {value};{fill}
          {body}
        }}
{after}      }}
    }}
"""


def _unroll_pragma(shape: _CudaShape, source: str) -> str:
    """Loops over a cached row unroll fully: the cache is indexed by the iteration and stays in
    registers only if every index is a constant (partly unrolled, it moved to a local-memory stack)."""
    return "#pragma unroll" if shape.items <= 16 or source != "global" else "#pragma unroll 4"


def _stage_elements(nt: int) -> int:
    """Elements per row one stage of the staged write holds: a whole number of iterations of ``nt`` warps."""
    return max(1, STAGED_WRITE_ELEMENTS // nt) * nt


def _stages_write(plan: RowPlan, knobs: Knobs) -> bool:
    """Columns mode writing an output whose rows are contiguous while x's are strided.

    Lanes hold 32 adjacent rows, adjacent in x but a whole row apart in y: written directly, each
    lane's element lands in its own 32-byte sector (a transposed softmax ran at 5 % of its floor).
    The block stages a 32-row by :data:`STAGED_WRITE_ELEMENTS` tile in shared memory and writes it
    back along y's rows.
    """
    return knobs["mode"] == "columns" and plan.y is not None and plan.y_apart and plan.y_inner == 1


def _cuda_staged_write(plan: RowPlan, shape: _CudaShape, source: str) -> str:
    """The write pass of :func:`_stages_write`: stage ``STAGED_WRITE_ELEMENTS`` elements per row, then store."""
    assert plan.y is not None and shape.vec == 1
    yt = cxx.element_type(plan.outputs[plan.y].dtype, "cuda")
    nt, L = shape.nt, plan.length
    per_stage = _stage_elements(nt) // nt  # iterations whose elements one stage holds
    value = "cache[it]" if source == "cache" else f"kf_to_f32(x[base + j * {plan.inner}LL])"
    return f"""{_unroll_pragma(shape, source)}
    for (int it = 0; it < {shape.items}; ++it) {{
      const int64_t j = (int64_t)it * {nt} + t;
      if (live && j < {L}LL) {{
        const int64_t idx = base + j * {plan.inner}LL; (void)idx;
        const float v = {value};
        kf_stage[(it % {per_stage}) * {nt} + t][threadIdx.x % 32] = {plan._write_expr("cuda")};
      }}
      if ((it + 1) % {per_stage} == 0 || it == {shape.items - 1}) {{
        __syncthreads();
        const int64_t j_first = (int64_t)(it - it % {per_stage}) * {nt};
        for (int r = t; r < 32; r += {nt}) {{
          const int64_t wrow = row0 + r;
          if (wrow >= {plan.rows}LL) continue;
          for (int k = threadIdx.x % 32; k < {_stage_elements(nt)}; k += 32) {{
            if (j_first + k < {L}LL) y[wrow * {L}LL + j_first + k] = kf_from_f32<{yt}>(kf_stage[k][r]);
          }}
        }}
        __syncthreads();
      }}
    }}
"""


def _render_cuda(plan: RowPlan, knobs: Knobs, device: DeviceDescription) -> str:
    shape = _cuda_shape(plan, knobs)
    tree = "true" if knobs["reduce"] == "smem_tree" else "false"
    nt = shape.nt
    kind = plan.kind
    passes: list[str] = []
    first = "fill" if shape.cache else "global"
    later = "cache" if shape.cache else "global"

    columns = knobs["mode"] == "columns"
    reducer = f"kf_column_reduce<{nt}>" if columns else f"kf_group_reduce<{nt}, {tree}>"

    def reduce_pass(init: str, update: str, op: str, finish: str, source: str) -> str:
        loop = _cuda_foreach(plan, shape, update, source)
        return (f"    {{ kf_stat s = {init};\n{loop}"
                f"    s = {reducer}(s, {op}(), smem);\n    {finish} }}\n")

    zero = "{0.0f, 0.0f, 0.0f}"
    decl = _STAT_DECLS[kind]
    if kind in ("sum", "mean"):
        passes.append(reduce_pass(zero, "s.a += v;", "kf_sum_op", "st_sum = s.a;", first))
    elif kind == "amax":
        passes.append(reduce_pass("{-INFINITY, 0.0f, 0.0f}", _MAX_KEEPING_NAN, "kf_max_op", "st_m = s.a;", first))
    elif kind in ("softmax", "log_softmax"):
        if knobs["stats"] == "online":
            passes.append(reduce_pass(
                "{-INFINITY, 0.0f, 0.0f}",
                "if (v > s.a) { s.b = s.b * KF_EXP(s.a - v) + 1.0f; s.a = v; } else s.b += KF_EXP(v - s.a);",
                "kf_online_op", "st_m = s.a; st_sum = s.b;", first))
        else:
            # a NaN makes its row NaN through exp(v - max) whatever the max: fmaxf keeps registers free
            passes.append(reduce_pass("{-INFINITY, 0.0f, 0.0f}", "s.a = fmaxf(s.a, v);", "kf_max_op", "st_m = s.a;",
                                      first))
            passes.append(reduce_pass(zero, "s.a += KF_EXP(v - st_m);", "kf_sum_op", "st_sum = s.a;", later))
    elif kind in ("layer_norm", "group_norm"):
        n = cxx.cfloat(float(plan.length))
        if knobs["stats"] == "one_pass":
            passes.append(reduce_pass(
                zero, "s.a += 1.0f; { const float d = v - s.b; s.b += d / s.a; s.c += d * (v - s.b); }",
                "kf_welford_op", f"st_mean = s.b; st_var = s.c / {n};", first))
        else:
            passes.append(reduce_pass(zero, "s.a += v;", "kf_sum_op", f"st_mean = s.a / {n};", first))
            passes.append(reduce_pass(zero, "s.a += (v - st_mean) * (v - st_mean);", "kf_sum_op",
                                      f"st_var = s.a / {n};", later))
    elif kind == "rms_norm":
        passes.append(reduce_pass(zero, "s.a += v * v;", "kf_sum_op", "st_sumsq = s.a;", first))
    source_after = later
    stats = "".join(passes) + "    " + plan._row_stats_c() + "\n"
    write = ""
    staged = _stages_write(plan, knobs)
    if staged:
        write = _cuda_staged_write(plan, shape, source_after)
    elif plan.y is not None:
        yt = cxx.element_type(plan.outputs[plan.y].dtype, "cuda")
        expr = plan._write_expr("cuda")
        if shape.vec > 1:
            body = (f"const int64_t idx = base + j; (void)idx; {plan._channel_c()}\n"
                    f"          out.v[k] = kf_from_f32<{yt}>({expr});")
            write = _cuda_foreach(
                plan, shape, body, source_after,
                before=f"        kf_vec<{yt}, {shape.vec}> out;\n",
                after=f"        kf_store_vec<{yt}, {shape.vec}>(y + base + j0, out);\n",
            )
        else:
            unused = " (void)idx;" if plan.y_apart else ""
            body = (f"const int64_t idx = base + j * {plan.inner}LL;{unused} {plan._channel_c()}\n"
                    f"          y[{plan._y_index_c()}] = kf_from_f32<{yt}>({expr});")
            write = plan._y_base_c("    ") + _cuda_foreach(plan, shape, body, source_after)
    row_writes = plan._row_output_writes("cuda", "      ")
    if row_writes:
        row_writes = f"    if (t == 0 && live) {{\n{row_writes}    }}\n"
    params, args = plan._params("cuda")
    gpb = 32 if columns else shape.block // nt
    grid = max(1, min(cxx.ceil_div(plan.rows, gpb), cuda_grid_limit(device, shape.block)))
    smem = shape.block if (tree == "true" and nt > 32) or columns else 32
    if columns:
        # 32 adjacent rows per block (adjacent in memory when inner > 1), nt threads split each row;
        # every thread runs the same number of iterations because the block synchronises.
        row_loop = (f"  const int t = threadIdx.x / 32;\n"
                    f"  for (int64_t row0 = (int64_t)blockIdx.x * 32; row0 < {plan.rows}LL;\n"
                    "       row0 += (int64_t)gridDim.x * 32) {\n"
                    f"    const int64_t row = row0 + threadIdx.x % 32;\n    const bool live = row < {plan.rows}LL;\n")
    else:
        row_loop = (f"  const int t = threadIdx.x % {nt};\n"
                    f"  for (int64_t row = (int64_t)blockIdx.x * {gpb} + threadIdx.x / {nt}; row < {plan.rows}LL;\n"
                    f"       row += (int64_t)gridDim.x * {gpb}) {{\n    const bool live = true;\n")
    aligned = plan._vector_pointers() if shape.vec > 1 else []
    cache_decl = f"    float cache[{shape.items * shape.vec}]; (void)cache;\n" if shape.cache else ""
    stage_decl = f"  __shared__ float kf_stage[{_stage_elements(nt)}][33];" if staged else ""
    return f"""{cxx.CUDA_PRELUDE}
{CUDA_ROW_HELPERS}
{_math_macros("cuda", True)}
/* {plan.summary}; {knobs} */
__global__ void __launch_bounds__({shape.block}) kf_rows({params}) {{
  __shared__ kf_stat smem[{smem}];
{stage_decl}
{row_loop}    const int64_t base = (row / {plan.inner}LL) * {plan.length * plan.inner}LL + row % {plan.inner}LL;
{cache_decl}    {decl}
{stats}{write}{row_writes}  }}
}}

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, aligned)}
  kf_rows<<<{grid}, {shape.block}, 0, (cudaStream_t)stream>>>({args});
{cxx.cuda_launch_epilogue()}
}}
"""


# ---- cuda, split rows ----------------------------------------------------------------------------

# Per kind: (initial partial, per-element update, block reduction, merge across blocks, finish).
# Norm statistics are shifted sums (count, sum, sum of squares of v - shift) within a block,
# turned into (count, mean, M2) once per block and merged across blocks with Chan's formula.
_SPLIT_STATS: dict[str, tuple[str, str, str, str, str]] = {
    "sum": ("{0.0f, 0.0f, 0.0f}", "s.a += v;", "kf_sum_op", "kf_sum_op", "st_sum = s.a;"),
    "mean": ("{0.0f, 0.0f, 0.0f}", "s.a += v;", "kf_sum_op", "kf_sum_op", "st_sum = s.a;"),
    "amax": ("{-INFINITY, 0.0f, 0.0f}", _MAX_KEEPING_NAN, "kf_max_op", "kf_max_op", "st_m = s.a;"),
    "softmax": ("{-INFINITY, 0.0f, 0.0f}",
                "if (v > s.a) { s.b = s.b * KF_EXP(s.a - v) + 1.0f; s.a = v; } else s.b += KF_EXP(v - s.a);",
                "kf_online_op", "kf_online_op", "st_m = s.a; st_sum = s.b;"),
    "rms_norm": ("{0.0f, 0.0f, 0.0f}", "s.a += v * v;", "kf_sum_op", "kf_sum_op", "st_sumsq = s.a;"),
    "layer_norm": ("{0.0f, 0.0f, 0.0f}", "{ const float d = v - shift; s.a += 1.0f; s.b += d; s.c += d * d; }",
                   "kf_sum_op", "kf_welford_op", "st_mean = s.b; st_var = s.c / {n};"),
}
_SPLIT_STATS["log_softmax"] = _SPLIT_STATS["softmax"]
_SPLIT_STATS["group_norm"] = _SPLIT_STATS["layer_norm"]

@dataclass(frozen=True)
class _ChunkParts:
    """Pieces of a kernel whose blocks each own a chunk of one row (split and resident modes)."""

    init: str  # the empty partial statistic
    update: str  # folds element v into partial s
    merge_op: str  # merges the blocks' partials of a row
    finish: str  # sets the row statistics from the merged partial s
    smem: int  # kf_stat slots of the block reduction
    locate: str  # row, base, begin, end of this block's chunk
    shift_decl: str
    store_partial: str  # reduces s over the block and stores it as the block's partial
    row_writes: str  # per-row outputs, written once per row


def _chunk_parts(plan: RowPlan, knobs: Knobs, chunk: int, splits: int, block_index: str = "blockIdx.x"
                 ) -> _ChunkParts:
    """The pieces for blocks numbered by ``block_index`` (a C expression; the grid's own order by default)."""
    init, update, block_op, merge_op, finish = _SPLIT_STATS[plan.kind]
    block = int(knobs["threads_per_block"])
    tree = "true" if knobs["reduce"] == "smem_tree" else "false"
    # Shifted sums become (count, mean, M2) before they are stored, so blocks merge with Chan's formula.
    to_welford = ("    if (s.a > 0.0f) {\n      const float m = s.b / s.a;\n"
                  "      s.c = fmaxf(s.c - m * s.b, 0.0f);\n      s.b = shift + m;\n    }\n"
                  if plan.kind in ("layer_norm", "group_norm") else "")
    row_writes = plan._row_output_writes("cuda", "    ")
    if row_writes:
        row_writes = f"  if ({block_index} % {splits} == 0 && threadIdx.x == 0) {{\n{row_writes}  }}\n"
    return _ChunkParts(
        init=init, update=update, merge_op=merge_op, finish=finish.replace("{n}", cxx.cfloat(float(plan.length))),
        smem=block if tree == "true" else 32,
        locate=(f"  const int64_t row = {block_index} / {splits};\n"
                f"  const int64_t base = row * {plan.length}LL;\n"
                f"  const int64_t begin = (int64_t)({block_index} % {splits}) * {chunk}LL;\n"
                f"  const int64_t end = begin + {chunk}LL < {plan.length}LL ? begin + {chunk}LL : {plan.length}LL;\n"
                "  (void)base; (void)end;\n"),
        shift_decl="  const float shift = kf_to_f32(x[base]); (void)shift;\n",
        store_partial=(f"  s = kf_group_reduce<{block}, {tree}>(s, {block_op}(), smem);\n"
                       f"  if (threadIdx.x == 0) {{\n{to_welford}    partials[blockIdx.x] = s;\n  }}\n"),
        row_writes=row_writes,
    )


def _chunk_write(plan: RowPlan, vec: int, loop: Callable[..., str]) -> str:
    """The loop writing this block's chunk of the elementwise output, ``loop`` walking the values."""
    if plan.y is None:
        return ""
    yt = cxx.element_type(plan.outputs[plan.y].dtype, "cuda")
    expr = plan._write_expr("cuda")
    channel = plan._channel_c()
    per_vector = ""
    if channel and plan.spatial % vec == 0:  # a vector never crosses a channel: one division per vector
        per_vector, channel = "        " + channel.replace(" + j / ", " + j0 / ") + "\n", ""
    return loop(f"const int64_t idx = base + j; (void)idx; {channel}\n"
                f"          out.v[k] = kf_from_f32<{yt}>({expr});",
                before=f"        kf_vec<{yt}, {vec}> out;\n{per_vector}",
                after=f"        kf_store_vec<{yt}, {vec}>(y + base + j0, out);\n")


def _partials(grid: int) -> cxx.Workspace:
    """One kf_stat per block, in the workspace the caller passes (kf_abi.h)."""
    return cxx.cuda_scratch("partials", "kf_stat", grid)


def _merge_row_partials(parts: _ChunkParts, plan: RowPlan, splits: int) -> str:
    """Merges the row's partials into ``s`` and sets the row statistics."""
    return (f"  const kf_stat *mine = partials + row * {splits};\n"
            "  s = mine[0];\n"
            f"  for (int p = 1; p < {splits}; ++p) s = {parts.merge_op}()(s, mine[p]);\n"
            f"  {_STAT_DECLS[plan.kind]}\n  {parts.finish}\n  {plan._row_stats_c()}\n")


def _render_cuda_split(plan: RowPlan, knobs: Knobs) -> str:
    """Two kernels: per-block partial statistics of a row chunk, then merge and write the chunk.

    Doing rows a few at a time so that the second read comes from L2 was measured slower on the
    H200 (fewer blocks per launch): the whole tensor goes in one pair of launches. With ``order``
    ``reverse`` the second kernel takes the chunks in the opposite order: blocks start roughly in
    index order, so its first blocks re-read the chunks the first kernel read last, which are the
    ones still in L2.
    """
    block, vec, splits = int(knobs["threads_per_block"]), int(knobs["vector"]), int(knobs["blocks_per_row"])
    unroll = int(knobs["unroll"])
    chunk = cxx.ceil_div(cxx.ceil_div(plan.length, splits), vec) * vec
    parts = _chunk_parts(plan, knobs, chunk, splits)
    xt = cxx.element_type(plan.inputs[plan.x].dtype, "cuda")

    def chunk_loop(body: str, before: str = "", after: str = "") -> str:
        """This thread's vectors of the chunk, ``unroll`` loads issued before any is used."""
        step = block * vec
        return (f"    for (int64_t jb = begin + (int64_t)threadIdx.x * {vec}; jb < end; jb += {step * unroll}LL) {{\n"
                f"      kf_vec<{xt}, {vec}> loaded[{unroll}];\n"
                f"#pragma unroll\n      for (int u = 0; u < {unroll}; ++u) {{\n"
                f"        const int64_t j0 = jb + (int64_t)u * {step};\n"
                f"        if (j0 < end) loaded[u] = kf_load_vec<{xt}, {vec}>(x + base + j0);\n      }}\n"
                f"#pragma unroll\n      for (int u = 0; u < {unroll}; ++u) {{\n"
                f"        const int64_t j0 = jb + (int64_t)u * {step};\n        if (j0 >= end) break;\n"
                f"        const kf_vec<{xt}, {vec}> lv = loaded[u];\n"
                f"{before}#pragma unroll\n        for (int k = 0; k < {vec}; ++k) {{\n"
                f"          const int64_t j = j0 + k; (void)j;\n          const float v = kf_to_f32(lv.v[k]);\n"
                f"          {body}\n        }}\n{after}      }}\n    }}\n")

    params, args = plan._params("cuda")
    xparam = params.split(",")[0]
    aligned = plan._vector_pointers() if vec > 1 else []
    grid = plan.rows * splits
    scratch = _partials(grid)
    # The writing kernel's blocks, numbered in the order ``order`` asks for.
    apply = _chunk_parts(plan, knobs, chunk, splits, block_index="kf_block")
    first = "gridDim.x - 1 - " if knobs["order"] == "reverse" else ""
    return f"""{cxx.CUDA_PRELUDE}
{CUDA_ROW_HELPERS}
{_math_macros("cuda", True)}
/* {plan.summary}; {knobs} */
{scratch.export()}
__global__ void __launch_bounds__({block}) kf_partials({xparam}, kf_stat *__restrict__ partials) {{
  __shared__ kf_stat smem[{parts.smem}];
{parts.locate}{parts.shift_decl}  kf_stat s = {parts.init};
{chunk_loop(parts.update)}{parts.store_partial}}}

__global__ void __launch_bounds__({block}) kf_apply({params}, const kf_stat *__restrict__ partials) {{
  const int64_t kf_block = {first}(int64_t)blockIdx.x;
{apply.locate}  kf_stat s;
{_merge_row_partials(apply, plan, splits)}{_chunk_write(plan, vec, chunk_loop)}{apply.row_writes}}}

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, aligned, scratch)}
  cudaStream_t s = (cudaStream_t)stream;
{scratch.take(len(plan.outputs))}\
  kf_partials<<<{grid}, {block}, 0, s>>>((const {xt} *)inputs[{plan.x}].data, partials);
  kf_apply<<<{grid}, {block}, 0, s>>>({args}, partials);
{cxx.cuda_launch_epilogue()}
}}
"""


# ---- cuda, rows resident in shared memory -----------------------------------------------------------


def _render_cuda_resident(plan: RowPlan, knobs: Knobs, device: DeviceDescription) -> str:
    """One cooperative kernel: each block stages its chunk in shared memory while it reduces it,
    the grid synchronises, and every block writes its chunk from shared memory.

    The input is read from memory once (split mode reads it twice). The launch bounds ask the
    compiler to fit ``resident_blocks_per_sm`` blocks per SM, and the launch is refused with a
    status, not run, where the device still cannot hold every block at once (a grid barrier
    would otherwise wait forever).
    """
    block, vec, per_sm = int(knobs["threads_per_block"]), int(knobs["vector"]), int(knobs["resident_blocks_per_sm"])
    chunk = plan.resident_chunk(device, vec, per_sm)
    splits = cxx.ceil_div(plan.length, chunk)
    parts = _chunk_parts(plan, knobs, chunk, splits)
    xt = cxx.element_type(plan.inputs[plan.x].dtype, "cuda")
    stage_bytes = chunk * cxx.ELEMENT_BYTES[plan.inputs[plan.x].dtype]

    def staged_loop(body: str, before: str = "", after: str = "") -> str:
        """This thread's vectors of the chunk, read back from shared memory."""
        return (f"  for (int64_t j0 = begin + (int64_t)threadIdx.x * {vec}; j0 < end; j0 += {block * vec}LL) {{\n"
                f"        const kf_vec<{xt}, {vec}> lv = kf_load_vec<{xt}, {vec}>(stage + (j0 - begin));\n"
                f"{before}#pragma unroll\n        for (int k = 0; k < {vec}; ++k) {{\n"
                f"          const int64_t j = j0 + k; (void)j;\n          const float v = kf_to_f32(lv.v[k]);\n"
                f"          {body}\n        }}\n{after}  }}\n")

    params, args = plan._params("cuda")
    aligned = plan._vector_pointers() if vec > 1 else []
    grid = plan.rows * splits
    scratch = _partials(grid)
    return f"""{cxx.CUDA_PRELUDE}
#include <cooperative_groups.h>
{CUDA_ROW_HELPERS}
{_math_macros("cuda", True)}
/* {plan.summary}; {knobs}; {splits} blocks per row of {chunk} elements */
{scratch.export()}
__global__ void __launch_bounds__({block}, {per_sm}) kf_resident({params}, kf_stat *__restrict__ partials) {{
  extern __shared__ __align__(16) unsigned char kf_stage_bytes[];
  {xt} *stage = reinterpret_cast<{xt} *>(kf_stage_bytes);
  __shared__ kf_stat smem[{parts.smem}];
{parts.locate}{parts.shift_decl}  kf_stat s = {parts.init};
  for (int64_t j0 = begin + (int64_t)threadIdx.x * {vec}; j0 < end; j0 += {block * vec}LL) {{
    const kf_vec<{xt}, {vec}> lv = kf_load_vec<{xt}, {vec}>(x + base + j0);
    kf_store_vec<{xt}, {vec}>(stage + (j0 - begin), lv);
#pragma unroll
    for (int k = 0; k < {vec}; ++k) {{
      const float v = kf_to_f32(lv.v[k]);
      {parts.update}
    }}
  }}
{parts.store_partial}  cooperative_groups::this_grid().sync();
{_merge_row_partials(parts, plan, splits)}{_chunk_write(plan, vec, staged_loop)}{parts.row_writes}}}

/* Per device: 1 when every block of the grid fits on it at once, -1 when not, 0 before asking. */
static int kf_resident_fits[64];

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, aligned, scratch)}
  cudaStream_t s = (cudaStream_t)stream;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return {cxx.STATUS_LAUNCH_FAILED};
  if (kf_resident_fits[device] == 0) {{
    int sms = 0, per_sm = 0;
    const bool asked =
        cudaFuncSetAttribute(kf_resident, cudaFuncAttributeMaxDynamicSharedMemorySize, {stage_bytes}) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kf_resident, {block}, {stage_bytes}) == cudaSuccess;
    kf_resident_fits[device] = asked && (int64_t)per_sm * sms >= {grid} ? 1 : -1;
  }}
  if (kf_resident_fits[device] < 0) return {cxx.STATUS_LAUNCH_FAILED};
{scratch.take(len(plan.outputs))}  cudaLaunchAttribute cooperative;
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config = {{}};
  config.gridDim = dim3({grid});
  config.blockDim = dim3({block});
  config.dynamicSmemBytes = {stage_bytes};
  config.stream = s;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  const cudaError_t launched = cudaLaunchKernelEx(&config, kf_resident, {args}, partials);
  if (launched != cudaSuccess) return {cxx.STATUS_LAUNCH_FAILED};
{cxx.cuda_launch_epilogue()}
}}
"""


# ---- cuda, short rows tiled through shared memory ---------------------------------------------------

_TILE_STATS = {"sum": ("0.0f", "acc += v;", "acc"), "mean": ("0.0f", "acc += v;", "acc / {n}"),
               "amax": ("-INFINITY", "acc = (v != v || v > acc) ? v : acc;", "acc")}


def _render_cuda_tile(plan: RowPlan, knobs: Knobs, device: DeviceDescription) -> str:
    """A block stages whole rows in shared memory (16-byte loads when aligned); a thread reduces each."""
    block, length = int(knobs["threads_per_block"]), plan.length
    x_spec = plan.inputs[plan.x]
    xt = cxx.element_type(x_spec.dtype, "cuda")
    vec = 16 // cxx.ELEMENT_BYTES[x_spec.dtype] if x_spec.aligned16 else 1
    pitch = length | 1  # an odd row pitch: threads reading rows side by side hit distinct banks
    rows_per_block = min(block, TILE_FLOATS // pitch) // vec * vec
    if rows_per_block == 0:
        raise UnsupportedCard("rows too long to tile")
    init, update, value = _TILE_STATS[plan.kind]
    value = value.replace("{n}", cxx.cfloat(float(length)))
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
