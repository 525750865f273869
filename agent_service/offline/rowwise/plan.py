"""The row plan: a card's row computation, the checks it must pass and the knobs it exposes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import is_contiguous, is_dense, storage_order_rows
from agent_service.offline.plan import cpu_thread_choices, multiprocessors
from agent_service.offline.rowwise import cpu, cuda_resident, cuda_rows, cuda_split, cuda_tile
from agent_service.offline.rowwise.kinds import ACTIVATIONS, ROW_KINDS, RowKind, fill
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo

SPLIT_MIN_LENGTH = 8192
#: The knobs only some cuda modes read (threads_per_block is read by all): split and resident
#: modes reduce with their own statistics and stage no cached row, columns mode reduces across
#: warps its own way, and tile mode reads its rows one way.
_ROW_MODES = ("lanes", "warp", "block", "thread", "columns")
_CUDA_KNOB_MODES: dict[str, tuple[str, ...]] = {
    "stats": _ROW_MODES,
    "cache_row": _ROW_MODES,
    "reduce": ("lanes", "warp", "block", "thread", "split", "resident"),
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


@dataclass(frozen=True)
class RowPlan:
    """A row computation over input ``x``: ``rows`` rows of ``length`` elements reduced to the
    statistics of ``kind`` (a key of :data:`~.kinds.ROW_KINDS`), then written per element (``y``)
    and/or per row (``row_outputs``)."""

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
    correction: float = 0.0  # var and std: the divisor is length - correction
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
    # Rows of an input whose leading dims step through storage at their own strides (a slice such as
    # x[:, 1:], layout.strided_outer_layout): row r starts at the sum of (((r / inner) / divisor) % size)
    # * stride over these terms, plus r % inner. Empty: the dense layouts above.
    x_outer: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ROW_KINDS:
            raise ValueError(f"unknown row kind {self.kind}")
        kind = ROW_KINDS[self.kind]
        if self.y is not None and kind.write is None:
            raise ValueError(f"a {self.kind} row writes per-row outputs only")
        unknown = sorted(set(self.row_outputs) - set(kind.row_values))
        if unknown:
            raise ValueError(f"a {self.kind} row has no per-row outputs {unknown}")
        specs = [self.inputs[self.x]] + [self.outputs[i] for i in ([self.y] if self.y is not None else [])]
        specs += [self.outputs[i] for i in self.row_outputs.values()]
        if any(s.dtype not in cxx.FLOAT_DTYPES for s in specs):
            raise UnsupportedCard("only float32, float16 and bfloat16 rows are templated")
        x = self.inputs[self.x]
        per_element = [self.outputs[self.y]] if self.y is not None else []
        per_element += [self.inputs[self.gate]] if self.gate is not None else []
        if self.x_outer:
            if self.gate is not None or self.storage_order or self.row_order or kind.grouped:
                raise UnsupportedCard("an input strided over its leading dims is templated for row outputs and "
                                      "one contiguous elementwise output")
            if self.y is not None and self.y_inner is None:
                raise UnsupportedCard("the elementwise output of an input strided over its leading dims is "
                                      "laid out apart from it")
        elif self.storage_order:
            if self.row_outputs or kind.grouped or storage_order_rows(x, per_element) is None:
                raise UnsupportedCard("rows cannot be walked in storage order")
        elif is_contiguous(x):
            if any(not is_contiguous(s) for s in per_element):
                raise UnsupportedCard("elementwise output or gate does not share the input's contiguous layout")
        elif not is_dense(x) or kind.grouped:
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
    def row_kind(self) -> RowKind:
        """The record of everything that differs between kinds."""
        return ROW_KINDS[self.kind]

    @property
    def y_apart(self) -> bool:
        """Whether y is laid out otherwise than x (then y is never moved in vectors or split rows)."""
        return self.y_inner is not None and (self.y_inner != self.inner or bool(self.x_outer))

    def x_base_c(self, row: str = "row") -> str:
        """C expression of where row ``row`` starts in x."""
        inner = self.inner
        if not self.x_outer:
            return f"({row} / {inner}LL) * {self.length * inner}LL + {row} % {inner}LL"
        return f"{_strided_sum(f'({row} / {inner}LL)', self.x_outer)} + {row} % {inner}LL"

    def y_base_c(self, indent: str) -> str:
        """C declaration of ``ybase``, the start of ``row`` in y, where y is laid out apart."""
        if self.y_inner is None or not self.y_apart:
            return ""
        inner = self.y_inner
        return f"{indent}const int64_t ybase = (row / {inner}LL) * {self.length * inner}LL + row % {inner}LL;\n"

    def y_index_c(self) -> str:
        """C expression of element ``j``'s index in y (``idx``, x's index, where y shares x's layout)."""
        return f"ybase + j * {self.y_inner}LL" if self.y_apart else "idx"

    # ---- knobs -------------------------------------------------------------------------------

    def _stats_choices(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.row_kind.stats)

    def rereads_row(self, stats: str | None = None) -> bool:
        """Whether the kernel walks the row more than once (so caching it in registers pays)."""
        passes = self.row_kind.statistics(stats if stats is not None else self.row_kind.stats[0].name).cuda
        return self.y is not None or len(passes) > 1

    def _stashes_exp(self) -> bool:
        """A kind that may stash (softmax) writing float32 in x's layout: its sum pass may keep each
        exp in y, and the write pass then rescales y rather than computing every exp again (as eager does)."""
        return (self.row_kind.stash is not None and self.y is not None and not self.y_apart and self.activation is None
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
        while vec > 1 and (self.length % vec or any(stride % vec for _, _, stride in self.x_outer)):
            vec //= 2
        return vec

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cpu":
            return KnobSpace({
                "threads": cpu_thread_choices(device, (*self.inputs, *self.outputs)),
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
            if self.length < 32 * vec:  # a warp per row would idle: several rows per warp first
                modes = ("lanes", *modes)
            if self._tiles_rows():
                modes = ("tile", *modes)
        else:
            # Resident mode, where the input fits on chip, reads it once; split mode reads it twice.
            # On the H100 (bench/gpu/row_norms.py, 2026-12-06) the VAE decoder's group norm,
            # 1x512x128x128 bf16 in 32 groups, took 19.5-19.6 us resident in all nine knob sets
            # and 25.0-25.6 us split.
            modes = (("resident",) if resident_per_sm else ()) + (("split",) if splits else ())
            if not (splits and self._outgrows_l2(device)):
                modes += ("block", "warp")
        threads: tuple[int, ...] = (256, 128, 512, 1024) if modes[0] not in ("warp", "lanes") else (256, 128, 512)
        stats = self._stats_choices()
        if modes[0] == "block":
            threads, stats = self._long_row_choices(threads, stats, vec)
        choices: dict[str, tuple[Any, ...]] = {
            "mode": modes,
            "threads_per_block": threads,
            "vector": (vec, 1) if vec > 1 else (1,),
            "stats": stats,
            "cache_row": (True, False) if self.rereads_row() else (False,),
            "reduce": ("shuffle", "smem_tree"),
        }
        if splits:
            choices["blocks_per_row"] = splits
            choices["unroll"] = (1, 4)  # split mode: vectors loaded ahead of use, per thread
            choices["order"] = ("reverse", "forward")  # split mode: the writing kernel's chunk order
        if resident_per_sm:
            choices["resident_blocks_per_sm"] = resident_per_sm
        return KnobSpace(choices, only_in=_CUDA_KNOB_MODES)

    def _long_row_choices(self, threads: tuple[int, ...], stats: tuple[str, ...],
                          vec: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """Block mode's first block size and statistics pass, from whether a block can hold its row.

        A block that keeps its row in registers reads it from memory once, however many passes
        its statistics take; so the first block size is the smallest that holds the row. Where
        none does, the largest block keeps the most loads in flight, and the statistics pass
        that walks the row the fewest times comes first. On the H100 (``bench/gpu/row_norms.py``,
        2026-12-06) a group norm over rows of 32768 fp32 took 189 µs with 512 threads and 404 µs
        with 256; a softmax over rows of 393216 took 292 µs with 1024 threads and the online
        statistics, 381 µs with 256 and two passes.
        """
        holding = [t for t in sorted(threads) if t >= 256 and cuda_rows.row_fits_registers(self.length, t, vec)]
        first = holding[0] if holding else max(threads)
        threads = (first, *(t for t in threads if t != first))
        if not holding:
            stats = tuple(sorted(stats, key=lambda name: len(self.row_kind.statistics(name).cuda)))
        return threads, stats

    def _outgrows_l2(self, device: DeviceInfo) -> bool:
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
        return (self.inner == 1 and self.y is None and self.row_kind.tile is not None and not self.x_outer
                and self.length <= TILE_MAX_LENGTH and set(self.row_outputs) == {"value"})

    def _split_choices(self, device: DeviceInfo, vec: int) -> tuple[int, ...]:
        """Blocks per row for split mode, offered when fewer rows than SMs would idle the device.

        One block per row leaves most SMs idle when rows are few and long (group norm at batch 1
        has 32 rows of up to millions of elements); split mode gives each row several blocks,
        which reduce partial statistics that a second kernel merges before writing.
        """
        sms = multiprocessors(device)
        if self.inner != 1 or self.y_apart or self.x_outer or self.rows >= sms or self.length < SPLIT_MIN_LENGTH:
            return ()
        most = max(2, self.length // (vec * 256))
        # Two blocks per SM first; eight fill an SM with 256-thread blocks, four times the loads in flight.
        wanted = tuple(cxx.ceil_div(per_sm * sms, self.rows) for per_sm in (2, 4, 1, 8))
        return tuple(dict.fromkeys(min(max(2, n), most) for n in wanted))

    def resident_chunk(self, device: DeviceInfo, vec: int, per_sm: int) -> int:
        """Elements per block in resident mode: the rows spread over ``per_sm`` blocks of every SM."""
        sms = multiprocessors(device)
        splits = max(1, sms * per_sm // self.rows)
        return cxx.ceil_div(cxx.ceil_div(self.length, splits), vec) * vec

    def _resident_choices(self, device: DeviceInfo, vec: int) -> tuple[int, ...]:
        """Blocks per SM for resident mode, offered where the whole input fits in shared memory.

        Split mode reads the input twice (statistics, then the write); with few rows the tensor
        is often small enough to stay on chip: each block keeps its chunk in shared memory across
        a grid-wide barrier (a cooperative launch) and the input is read from memory once.

        Inputs larger than the chip were tried a wave of rows at a time, one grid barrier per wave:
        on the H100 (bench/results/gpu_runs_2026-12-06_h100_run90_91.md) the VAE decoder's group
        norms of 64, 128 and 256 MiB took 93-469 µs at best that way against 84-290 µs split, so
        resident mode stays for inputs that fit at once.
        """
        if self.inner != 1 or self.y is None or self.y_apart or self.rows >= (device.sm_count or 132) \
                or self.length < SPLIT_MIN_LENGTH:
            return ()
        budget = RESIDENT_SMEM_BYTES.get(device.arch, RESIDENT_DEFAULT_SMEM_BYTES)
        size = cxx.ELEMENT_BYTES[self.inputs[self.x].dtype]
        return tuple(per_sm for per_sm in (2, 1)
                     if self.resident_chunk(device, vec, per_sm) * size <= budget // per_sm - RESIDENT_RESERVED_BYTES)

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        if backend != "cuda":
            return cpu.render(self, knobs)
        if knobs["mode"] == "split":
            return cuda_split.render(self, knobs)
        if knobs["mode"] == "resident":
            return cuda_resident.render(self, knobs, device)
        if knobs["mode"] == "tile":
            return cuda_tile.render(self, knobs, device)
        return cuda_rows.render(self, knobs, device)

    # ---- shared pieces -----------------------------------------------------------------------

    def params(self, backend: str) -> tuple[str, str]:
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

    def write_expr(self, backend: str) -> str:
        """The value written at element ``j`` (element index ``idx``) of row ``row`` from ``v``."""
        write = self.row_kind.write
        if write is None:
            raise AssertionError(f"a {self.kind} row writes no elements")
        expr = write(self, backend)
        if self.activation:
            expr = ACTIVATIONS[self.activation].format(v=expr)
        return expr

    def row_stats_c(self) -> str:
        """C statements turning reduced statistics into the named per-row values (st_*)."""
        return fill(self.row_kind.finish, n=cxx.cfloat(float(self.length)), eps=cxx.cfloat(self.eps))

    def channel_c(self) -> str:
        """C declaration of ``ch``, the channel of element ``j`` of a group norm row (empty otherwise)."""
        if not self.row_kind.grouped:
            return ""
        per_group = self.channels // self.groups
        return f"const int64_t ch = (row % {self.groups}LL) * {per_group}LL + j / {self.spatial}LL; (void)ch;"

    def row_output_writes(self, backend: str, indent: str) -> str:
        """Statements storing each per-row output of ``row`` from the finished statistics."""
        writes = ""
        n, d = cxx.cfloat(float(self.length)), cxx.cfloat(float(self.length) - self.correction)
        for name, value in self.row_kind.row_values.items():
            value = fill(value, n=n, d=d)
            if name in self.row_outputs:
                t = cxx.element_type(self.outputs[self.row_outputs[name]].dtype, backend)
                writes += f"{indent}r_{name}[{self.row_index_c('row')}] = kf_from_f32<{t}>({value});\n"
        return writes

    def row_index_c(self, row: str) -> str:
        """C expression of where row ``row``'s outputs go (see ``row_order``)."""
        if not self.row_order:
            return row
        return _strided_sum(f"({row})", self.row_order)

    def vector_pointers(self) -> list[str]:
        """The pointers a vectorised kernel moves 16 bytes at a time (which must be aligned)."""
        pointers = [f"inputs[{self.x}].data"] + ([f"outputs[{self.y}].data"] if self.y is not None else [])
        return pointers + ([f"inputs[{self.gate}].data"] if self.gate is not None else [])


def _strided_sum(index: str, terms: tuple[tuple[int, int, int], ...]) -> str:
    """C expression of ``sum((index / divisor) % size * stride)`` over ``terms``: where a row's
    ``index`` falls in a tensor laid out by those (divisor, size, stride) dims."""
    return " + ".join(f"({index} / {d}LL % {n}LL) * {s}LL" for d, n, s in terms)
