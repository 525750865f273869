"""The histc plan: the card's input walk, eager's range and bin arithmetic in C, checks and knobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.histc import cpu, cuda
from agent_service.offline.histc.eager_range import EXACT_COUNTS, EagerRange
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import coalesce
from agent_service.offline.plan import cpu_thread_choices
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo

MAX_BINS = 8192  # the counts of one block fit in 32 KiB of shared memory (one cpu thread's on its stack)
SHARED_WORDS = 12288  # 48 KiB of static shared memory: the counts of every copy together
BLOCK_MODE_MAX = 65536  # cuda: inputs up to this many elements are one block's first
ATOMIC_OUTPUTS = ("float32", "float64", "int32", "int64")  # output dtypes cuda adds to atomically
_CUDA_KNOB_MODES = {"blocks_per_sm": ("grid",)}


@dataclass(frozen=True)
class HistcPlan:
    """``bins`` counts of input ``x``'s elements in eager's ``range`` on ``backend``, into output 0."""

    summary: str
    backend: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    x: int
    bins: int
    range: EagerRange

    def __post_init__(self) -> None:
        x = self.inputs[self.x]
        if len(self.outputs) != 1 or self.outputs[0].shape != [self.bins] or self.outputs[0].dtype != x.dtype:
            raise UnsupportedCard(f"histc writes {self.bins} counts of {x.dtype}; the card's outputs differ")
        if not 1 <= self.bins <= MAX_BINS:
            raise UnsupportedCard(f"{self.bins} bins: the template keeps 1 to {MAX_BINS} counts")
        exact = EXACT_COUNTS.get(x.dtype, (1 << 31) - 1)
        if x.numel > exact:
            raise UnsupportedCard(f"{x.numel} elements: a {x.dtype} count past {exact} is not exact, so eager's "
                                  "result would depend on the order it adds counts in")

    @property
    def family(self) -> str:
        return "histc"

    @property
    def source(self) -> TensorSpec:
        return self.inputs[self.x]

    @property
    def numel(self) -> int:
        return self.source.numel

    def offset_c(self, index: str) -> str:
        """C expression of where element ``index`` (in some fixed order of all elements) lies in x."""
        shape, strides, _ = coalesce(self.source.shape, self.source.stride, [])
        return cxx.linear_offset(index, shape, strides)

    # ---- eager's arithmetic in C -----------------------------------------------------------------

    def header(self) -> str:
        """Typedefs TI, TO; kf_at (element i), kf_in_range, kf_bin (eager's bin, last one for ``max``), kf_count."""
        if self.backend == "cuda":
            return self._cuda_header()
        dtype = self.source.dtype
        wide = "double" if dtype == "float64" else "float"
        literal = repr if dtype == "float64" else cxx.cfloat
        lo, hi = literal(float(self.range.low)), literal(float(self.range.high))
        half = dtype in ("float16", "bfloat16")
        rounded = "kf_to_f32(kf_from_f32<TI>(v))" if half else "v"
        load = "kf_to_f32(v)" if half else "v"
        count = "kf_from_f32<TO>((float)c)" if half else "(TO)c"
        return (f"typedef {cxx.storage_type(dtype, 'cpu')} TI;\ntypedef TI TO;\ntypedef {wide} TA;\n"
                f"static inline TA kf_round(TA v) {{ return {rounded}; }}  /* to the input dtype, as c10 rounds */\n"
                f"static inline TA kf_at(const TI *x, int64_t i) {{ const TI v = x[{self.offset_c('i')}]; "
                f"return {load}; }}\n"
                f"static inline bool kf_in_range(TA v) {{ return v >= {lo} && v <= {hi}; }}\n"
                f"static inline int64_t kf_bin(TA v) {{\n"
                f"  const int64_t b = (int64_t)kf_round(kf_round(kf_round(v - {lo}) * kf_round((TA){self.bins}LL))"
                f" / kf_round({hi} - {lo}));\n"
                f"  return b < {self.bins}LL ? b : {self.bins - 1}LL;\n}}\n"
                f"static inline TO kf_count(uint32_t c) {{ return {count}; }}\n")

    def _cuda_header(self) -> str:
        dtype = self.source.dtype
        fn = "static __device__ __forceinline__"
        if dtype in ("float32", "float64"):
            literal, op = (repr, "d") if dtype == "float64" else (cxx.cfloat, "f")
            lo, hi = literal(float(self.range.low)), literal(float(self.range.high))
            value, wide = "v", cxx.storage_type(dtype, "cuda")
            # rounded intrinsics: eager's IEEE arithmetic whatever the compiler flags
            bin_c = (f"(int)__{op}div_rn(__{op}mul_rn(__{op}sub_rn(v, {lo}), ({wide}){self.bins}LL), "
                     f"__{op}sub_rn({hi}, {lo}))")
        else:
            lo, hi = f"{int(self.range.low)}LL", f"{int(self.range.high)}LL"
            value, wide = "(long long)v", "long long"
            bin_c = f"(int)(((long long)v - {lo}) * {self.bins}LL / ({hi} - {lo}))"
        return (f"typedef {cxx.storage_type(dtype, 'cuda')} TI;\ntypedef TI TO;\n"
                f"{fn} TI kf_at(const TI *__restrict__ x, int64_t i) {{ return x[{self.offset_c('i')}]; }}\n"
                f"{fn} bool kf_in_range(TI v) {{ const {wide} w = {value}; return w >= {lo} && w <= {hi}; }}\n"
                f"{fn} int kf_bin(TI v) {{ const int b = {bin_c}; return b < {self.bins} ? b : {self.bins - 1}; }}\n"
                f"{fn} TO kf_count(unsigned int c) {{ return (TO)c; }}\n")

    # ---- knobs -----------------------------------------------------------------------------------

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend != self.backend:
            raise UnsupportedCard(f"the histc plan follows eager's {self.backend} arithmetic, not {backend}'s")
        if backend == "cpu":
            return KnobSpace({"threads": cpu_thread_choices(device, (self.source, *self.outputs))})
        modes: tuple[str, ...] = ("block", "grid") if self.numel <= BLOCK_MODE_MAX else ("grid", "block")
        if self.source.dtype not in ATOMIC_OUTPUTS:
            modes = ("block",)
        copies = tuple(c for c in (4, 1, 16) if c * self.bins <= SHARED_WORDS)
        choices: dict[str, tuple[Any, ...]] = {"mode": modes, "threads_per_block": (1024, 512, 256),
                                               "copies": copies, "blocks_per_sm": (2, 1, 4)}
        return KnobSpace(choices, only_in=_CUDA_KNOB_MODES)

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        if backend == "cuda":
            return cuda.render(self, knobs, device)
        return cpu.render(self, knobs)
