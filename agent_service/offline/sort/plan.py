"""The sort plan: a card's rows along the dim, the order eager gives them, checks and knobs."""

from __future__ import annotations

from dataclasses import dataclass

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import is_dense
from agent_service.offline.plan import cpu_thread_choices, multiprocessors
from agent_service.offline.sort import cpu, cuda, keys
from agent_service.offline.sort.cuda import BITONIC_SIZE
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo
from kforge_domain.dtypes import DTYPE_BYTES

CUDA_SHARED_BYTES = 48 * 1024  # a block's static shared memory: the (key, index) pairs of one row
CUDA_THREADS = (256, 128, 512, 1024)
ORDERS = ("stable", "cpu_topk", "cuda_bitonic", "cuda_topk")


@dataclass(frozen=True)
class SortPlan:
    """Input ``x`` sorted along ``dim``; the first ``k`` of each row's order written to the outputs.

    ``outputs`` are (values, indices) or, for argsort, (indices,). ``order`` is one of
    :data:`ORDERS`: ``"stable"`` (ties by ascending index: sort, argsort, and cuda's topk of
    integers beyond 32), ``"cpu_topk"`` (eager's cpu selection, see :mod:`.cpu`),
    ``"cuda_bitonic"`` (cuda's unstable sort of rows up to 32) or ``"cuda_topk"`` (cuda's radix
    select, gather and sort of the k results; see :mod:`.cuda`). ``nan_order`` is a
    :data:`~.keys.NAN_ORDERS` entry. Which cards eager orders each way, found in PyTorch's sorting
    sources, is set out in :mod:`agent_service.offline.ops_sort`; the others never reach a plan.
    """

    summary: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    x: int
    dim: int  # normalised; 0 for a 0-dim input
    k: int
    descending: bool
    order: str = "stable"
    nan_order: str = "comparator"
    sorted_topk: bool = True

    def __post_init__(self) -> None:
        keys.check_dtype(self.source.dtype)
        if self.order not in ORDERS:
            raise ValueError(f"unknown sort order {self.order}")
        if self.order == "cuda_bitonic" and self.length > BITONIC_SIZE:
            raise UnsupportedCard(f"eager's bitonic sort takes rows of up to {BITONIC_SIZE}, not {self.length}")
        if self.indices.dtype != "int64":
            raise UnsupportedCard(f"the indices output is {self.indices.dtype}, eager's is int64")
        if self.values is not None and self.values.dtype != self.source.dtype:
            raise UnsupportedCard(f"the values output is {self.values.dtype}, the input {self.source.dtype}")
        want = list(self.source.shape)
        if want:
            want[self.dim] = self.k
        for out in self.outputs:
            if list(out.shape) != want:
                raise UnsupportedCard(f"output shape {out.shape} is not {want}")
            if not is_dense(out) or min(out.stride, default=0) < 0:
                raise UnsupportedCard(f"output layout stride={out.stride} overlaps itself or has gaps")
        if min(self.source.stride, default=0) < 0:
            raise UnsupportedCard("a negative input stride is not templated")

    @property
    def family(self) -> str:
        return "sort"

    @property
    def source(self) -> TensorSpec:
        return self.inputs[self.x]

    @property
    def values(self) -> TensorSpec | None:
        return self.outputs[0] if len(self.outputs) == 2 else None

    @property
    def indices(self) -> TensorSpec:
        return self.outputs[-1]

    @property
    def selects_only(self) -> bool:
        """A cuda topk whose k results eager leaves in the gathered order: no value key to sort them by."""
        return self.order == "cuda_topk" and (self.k == 1 or not self.sorted_topk)

    @property
    def length(self) -> int:
        return self.source.shape[self.dim] if self.source.shape else 1

    @property
    def rows(self) -> int:
        return self.source.numel // self.length if self.length else 0

    def step(self, spec: TensorSpec) -> int:
        """The stride of ``spec`` along the sorted dim (0 for a 0-dim tensor)."""
        return spec.stride[self.dim] if spec.shape else 0

    def row_offset_c(self, spec: TensorSpec) -> str:
        """C expression of where row ``r`` starts in ``spec``: the dims other than ``dim``, last fastest."""
        others = [d for d in range(len(spec.shape)) if d != self.dim]
        return cxx.linear_offset("r", [self.source.shape[d] for d in others], [spec.stride[d] for d in others])

    def header(self, qualifier: str, descending_keys: bool) -> str:
        """Typedef TB (an element's bits); kf_key; kf_xrow, kf_vrow, kf_irow (where row r starts)."""
        out = [f"typedef {keys.bits_type(self.source.dtype)} TB;\n"]
        if not self.selects_only:
            out.append(keys.key_function(self.source.dtype, self.nan_order, descending_keys, qualifier))
        if self.order == "cuda_topk":
            out.append(keys.radix_select_key_function(self.source.dtype, self.descending, qualifier))
        rows = {"kf_xrow": self.source, "kf_irow": self.indices}
        if self.values is not None:
            rows["kf_vrow"] = self.values
        for name, spec in rows.items():
            out.append(f"{qualifier} int64_t {name}(int64_t r) {{ (void)r; return {self.row_offset_c(spec)}; }}\n")
        return "".join(out)

    # ---- cuda sizes ------------------------------------------------------------------------------

    @property
    def padded(self) -> int:
        """The row length padded to a power of two: the bitonic network's size."""
        return _power_of_two(self.length)

    @property
    def padded_k(self) -> int:
        """``k`` padded to a power of two: the network that orders the k selected."""
        return _power_of_two(self.k)

    def shared_bytes(self) -> int:
        """Shared memory a block of the cuda kernel takes: none for the thread-per-row bitonic sort."""
        if self.order == "cuda_bitonic":
            return 0
        picks = 4 * self.padded_k if self.order == "cuda_topk" and self.k > BITONIC_SIZE else 0
        return self.padded * (self.key_bytes + 4) + picks

    @property
    def key_bytes(self) -> int:
        return DTYPE_BYTES[self.source.dtype]

    def check_cuda_fits(self) -> None:
        need = self.shared_bytes()
        if need > CUDA_SHARED_BYTES:
            raise UnsupportedCard(f"a row of {self.length} ({self.padded} padded) takes {need} bytes of shared "
                                  f"memory; one block sorts rows of up to {CUDA_SHARED_BYTES} bytes")

    # ---- knobs -----------------------------------------------------------------------------------

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cpu":
            return KnobSpace({"threads": cpu_thread_choices(device, (self.source,))})
        self.check_cuda_fits()
        most = 1024 if self.order == "cuda_bitonic" else max(32, self.padded // 2)
        threads = tuple(t for t in CUDA_THREADS if t <= most) or (32,)
        if self.order != "cuda_bitonic" and self.rows < multiprocessors(device):
            # a block per row and rows fewer than the SMs: the widest block sorts the row soonest (one
            # row of 4096 int64 on the H100, run 73: topk 64 at 1024 threads 1.10x eager, at 256 0.73x)
            threads = tuple(sorted(threads, reverse=True))
        return KnobSpace({"threads_per_block": threads})

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        if backend == "cuda":
            return cuda.render(self, knobs, device)
        return cpu.render(self, knobs)


def _power_of_two(n: int) -> int:
    """The least power of two that is at least ``n`` (1 for 0 or 1)."""
    p = 1
    while p < n:
        p *= 2
    return p
