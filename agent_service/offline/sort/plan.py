"""The sort plan: a card's rows along the dim, the order eager gives them, checks and knobs."""

from __future__ import annotations

from dataclasses import dataclass

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import is_dense
from agent_service.offline.plan import cpu_thread_choices
from agent_service.offline.sort import cpu, cuda, keys
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo
from kforge_domain.dtypes import DTYPE_BYTES

CUDA_SHARED_BYTES = 48 * 1024  # a block's static shared memory: the (key, index) pairs of one row
CUDA_THREADS = (256, 128, 512, 1024)


@dataclass(frozen=True)
class SortPlan:
    """Input ``x`` sorted along ``dim``; the first ``k`` of each row's order written to the outputs.

    ``outputs`` are (values, indices) or, for argsort, (indices,). ``order`` is ``"stable"``
    (ties by ascending index: sort, argsort, and cuda's topk) or ``"cpu_topk"`` (eager's cpu
    selection, see :mod:`.cpu`). ``nan_order`` is a :data:`~.keys.NAN_ORDERS` entry. Which cards
    eager orders this way, found in PyTorch's sorting sources, is set out in
    :mod:`agent_service.offline.ops_sort`; the others never reach a plan.
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
        out = [f"typedef {keys.bits_type(self.source.dtype)} TB;\n",
               keys.key_function(self.source.dtype, self.nan_order, descending_keys, qualifier)]
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
        n = 1
        while n < self.length:
            n *= 2
        return n

    @property
    def key_bytes(self) -> int:
        return DTYPE_BYTES[self.source.dtype]

    def check_cuda_fits(self) -> None:
        need = self.padded * (self.key_bytes + 4)
        if need > CUDA_SHARED_BYTES:
            raise UnsupportedCard(f"a row of {self.length} ({self.padded} padded) takes {need} bytes of shared "
                                  f"memory; one block sorts rows of up to {CUDA_SHARED_BYTES} bytes")

    # ---- knobs -----------------------------------------------------------------------------------

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cpu":
            return KnobSpace({"threads": cpu_thread_choices(device, (self.source,))})
        self.check_cuda_fits()
        most = max(32, self.padded // 2)
        return KnobSpace({"threads_per_block": tuple(t for t in CUDA_THREADS if t <= most) or (32,)})

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        if backend == "cuda":
            return cuda.render(self, knobs, device)
        return cpu.render(self, knobs)
