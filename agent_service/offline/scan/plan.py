"""The scan plan: a card's runs (where each starts, its step, its length), checks and knobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import coalesce, is_dense
from agent_service.offline.plan import cpu_thread_choices, multiprocessors
from agent_service.offline.scan import cpu, cuda, elements
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo

#: kind -> (the C combination of running value ``a`` and element ``b``, the identity)
KINDS = {"sum": ("a + b", "0"), "prod": ("a * b", "1")}
SPLIT_MIN_LENGTH = 16384  # cuda: runs shorter than this are never split into chunks
SPLIT_MIN_CHUNK = 2048
SHORT_RUN = 32  # cuda: runs up to this long are a thread's each first (a warp's lanes would idle)
WARP_RUN = 2048  # cuda: runs up to this long are a warp's each first, when there are runs for every SM
COLUMN_THREAD_ROWS = 32  # runs side by side: a thread each first when there are this many per SM
_CUDA_KNOB_MODES = {"items_per_thread": ("warp", "block", "split"), "blocks_per_row": ("split",)}


@dataclass(frozen=True)
class Run:
    """One dim of the rows (the dims other than the scanned one): its size and its strides in x and y."""

    size: int
    x_stride: int
    y_stride: int


@dataclass(frozen=True)
class ScanPlan:
    """An inclusive scan (``kind`` of :data:`KINDS`) of input ``x`` along ``dim`` into output 0."""

    summary: str
    kind: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    x: int
    dim: int  # normalised; 0 for a 0-dim input

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown scan kind {self.kind}")
        x, y = self.inputs[self.x], self.outputs
        if len(y) != 1:
            raise UnsupportedCard(f"a scan writes one output, the card has {len(y)}")
        if y[0].shape != x.shape:
            raise UnsupportedCard(f"output shape {y[0].shape} is not the input's {x.shape}")
        if not is_dense(y[0]) or min(y[0].stride, default=0) < 0 or min(x.stride, default=0) < 0:
            raise UnsupportedCard(f"output layout stride={y[0].stride} overlaps or has gaps")
        elements.check_conversion(x.dtype, y[0].dtype)

    @property
    def family(self) -> str:
        return "scan"

    # ---- the runs --------------------------------------------------------------------------------

    @property
    def source(self) -> TensorSpec:
        return self.inputs[self.x]

    @property
    def target(self) -> TensorSpec:
        return self.outputs[0]

    @property
    def length(self) -> int:
        return self.source.shape[self.dim] if self.source.shape else 1

    @property
    def x_step(self) -> int:
        return self.source.stride[self.dim] if self.source.shape else 0

    @property
    def y_step(self) -> int:
        return self.target.stride[self.dim] if self.target.shape else 0

    @property
    def runs(self) -> tuple[Run, ...]:
        """The other dims, outermost first by x's strides, merged where x and y both walk them jointly;
        empty for a single run. Row ``r``'s last coordinate is the dim whose x stride is least."""
        others = [d for d in range(len(self.source.shape)) if d != self.dim and self.source.shape[d] != 1]
        if not others:
            return ()
        shape, x_strides, (y_strides,) = coalesce([self.source.shape[d] for d in others],
                                                  [self.source.stride[d] for d in others],
                                                  [[self.target.stride[d] for d in others]])
        return tuple(Run(n, sx, sy) for n, sx, sy in zip(shape, x_strides, y_strides, strict=True))

    @property
    def rows(self) -> int:
        rows = 1
        for run in self.runs:
            rows *= run.size
        return rows

    @property
    def columnar(self) -> bool:
        """Whether neighbouring runs lie closer in x than a run's own elements (a scan over a middle or
        outer dim): then walking adjacent runs together reads memory in order."""
        runs = self.runs
        return bool(runs) and runs[-1].x_stride < self.x_step

    def row_offset_c(self, row: str, side: str) -> str:
        """C expression of where run ``row`` starts in x (``side`` ``"x"``) or y."""
        runs = self.runs
        return cxx.linear_offset(row, [run.size for run in runs],
                                 [run.x_stride if side == "x" else run.y_stride for run in runs])

    # ---- shared C pieces -------------------------------------------------------------------------

    def header(self, backend: str, precision: str) -> str:
        """Typedefs TI (input), TO (output), TA (running value); kf_load, kf_store, kf_op, kf_xrow, kf_yrow."""
        fn = "static __device__ __forceinline__" if backend == "cuda" else "static inline"
        source, target = self.source.dtype, self.target.dtype
        acc = elements.accumulator(target, precision)
        op, _ = KINDS[self.kind]
        return (f"typedef {elements.storage_type(source, backend)} TI;\n"
                f"typedef {elements.storage_type(target, backend)} TO;\n"
                f"typedef {acc} TA;\n"
                f"{fn} TA kf_load(TI v) {{ return {elements.load('v', source, target, backend, 'TA')}; }}\n"
                f"{fn} TO kf_store(TA v) {{ return {elements.store('v', target, backend)}; }}\n"
                f"{fn} TA kf_op(TA a, TA b) {{ return {elements.combine(op, target, precision, backend)}; }}\n"
                f"{fn} int64_t kf_xrow(int64_t r) {{ (void)r; return {self.row_offset_c('r', 'x')}; }}\n"
                f"{fn} int64_t kf_yrow(int64_t r) {{ (void)r; return {self.row_offset_c('r', 'y')}; }}\n")

    def walk_run_c(self) -> str:
        """C statements (in a loop over ``r``) scanning run ``r`` in order, one element after another."""
        return (f"    const TI *xr = x + kf_xrow(r);\n    TO *yr = y + kf_yrow(r);\n    TA acc = {self.identity};\n"
                f"    for (int64_t j = 0; j < {self.length}LL; ++j) {{\n"
                f"      acc = kf_op(acc, kf_load(xr[j * {self.x_step}LL]));\n"
                f"      yr[j * {self.y_step}LL] = kf_store(acc);\n    }}\n")

    @property
    def identity(self) -> str:
        return f"(TA){KINDS[self.kind][1]}"

    # ---- knobs -----------------------------------------------------------------------------------

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cpu":
            return KnobSpace({"mode": ("columns", "rows") if self.columnar else ("rows",),
                              "threads": cpu_thread_choices(device, (*self.inputs, *self.outputs)),
                              "column_block": (64, 16, 256)},
                             only_in={"column_block": ("columns",)})
        splits = self.split_choices(device)
        if self.target.dtype in elements.HALVES:
            precisions: tuple[str, ...] = (elements.NATIVE, "double", "float")  # eager's own rounding first
        else:
            precisions = ("double", "float") if self.target.dtype == "float32" else ("double",)
        choices: dict[str, tuple[Any, ...]] = {
            "mode": (("split",) if splits else ()) + self._cuda_modes(device),
            "threads_per_block": self._threads_choices(device),
            "items_per_thread": (4, 1, 2, 8),
            "accumulate": precisions,
            "blocks_per_row": splits or (1,),
        }
        return KnobSpace(choices, only_in=_CUDA_KNOB_MODES)

    def _threads_choices(self, device: DeviceInfo) -> tuple[int, ...]:
        """Threads per block, the root's first: 256, unless the runs are fewer than the SMs and too
        short to split (a block's tiles would follow each other on one run); then the fewest threads
        whose tile (4 items each) covers the run. One row of 4096 int64 in four tiles of 256 x 4 ran
        0.67x eager (H100 run 65): each tile waits for its loads and a barrier before the next starts."""
        choices = (256, 128, 512, 1024)
        if self.rows >= multiprocessors(device) or not 256 * 4 < self.length < SPLIT_MIN_LENGTH:
            return choices
        first = next((t for t in (512, 1024) if t * 4 >= self.length), 1024)
        return (first, *(t for t in choices if t != first))

    def _cuda_modes(self, device: DeviceInfo) -> tuple[str, ...]:
        """Thread, warp or block per run, the likeliest first.

        Runs side by side in memory are a thread's each (adjacent threads read adjacent memory)
        when there are enough of them; short runs are a thread's each, runs of up to a few
        thousand a warp's when every SM gets runs, longer ones (or fewer runs) a block's.
        """
        sms = multiprocessors(device)
        if self.columnar:
            return ("thread", "block", "warp") if self.rows >= COLUMN_THREAD_ROWS * sms else ("block", "thread", "warp")
        if self.length <= SHORT_RUN:
            return ("thread", "warp", "block")
        if self.length <= WARP_RUN and self.rows >= sms:
            return ("warp", "block")
        return ("block", "warp")

    def split_choices(self, device: DeviceInfo) -> tuple[int, ...]:
        """Chunks per run for split mode: offered where fewer runs than SMs are long enough to share.

        Two blocks per SM first, then four, one and eight, each chunk at least SPLIT_MIN_CHUNK long.
        """
        sms = multiprocessors(device)
        if self.rows >= sms or self.length < SPLIT_MIN_LENGTH:
            return ()
        most = self.length // SPLIT_MIN_CHUNK
        wanted = (cxx.ceil_div(per_sm * sms, self.rows) for per_sm in (2, 4, 1, 8))
        return tuple(dict.fromkeys(min(max(2, n), most) for n in wanted))

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        if backend == "cuda":
            return cuda.render(self, knobs, device)
        return cpu.render(self, knobs)
