"""The gather engine: each output element copied from one place of one input, or a fill constant.

Pure data movement (nearest upsampling, concatenation, indexing by a tensor, constant padding,
masked fill, select by a boolean condition) is one kernel shape: for output coordinates ``o0``,
``o1``, ... the first :class:`Branch` whose condition holds gives the element. Elements move as
raw bits of their width (no float conversion), so every dtype of the ABI is exact and a fill
constant is the bit pattern eager's own fill gives.

The output is walked in storage order, so writes are sequential on cpu and coalesced on cuda
(an in-place op's output may be a view with gaps, a KV cache's slot, as long as no two elements
share an address), and every input element read is read once per output element that holds it:
the floor is the bytes of the output plus those of the inputs read. On cuda, ``rows`` mode gives
each block whole rows of the innermost storage dim (the outer coordinates decomposed once per
row); ``flat`` mode gives each thread single elements, for short rows. In rows mode over a dense,
aligned output, knob ``store_bytes`` gives each thread a run of adjacent outputs written as one
4, 8 or 16-byte store (8 first; one element per store is the last choice): a comparison's bool
outputs otherwise leave each warp's store 32 bytes wide. Where every branch reads its input along
the row (:class:`RunRead`: an embedding's table row, a cat along an outer dim, a nearest upsampling
by a whole factor), each run is one load as well, and the preamble (the row's index) runs once
per row; where only data picks the branch (a mask, a comparison's operand, an in-place op's own
old values), each read along the row is loaded for the whole run before the run is computed
(:class:`StagedRead`). Rows fewer than a wave of blocks are cut into pieces (:func:`row_piece`).
argmax and argmin, whose
elements each reduce a row of the input, also have a warp, a block or several blocks per element
(:mod:`.arg_reduce`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from agent_service.offline import arg_reduce, cxx
from agent_service.offline.arg_reduce import ArgReduction
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import is_dense
from agent_service.offline.plan import cpu_thread_choices, cuda_grid, cuda_grid_limit
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo
from kforge_domain.dtypes import ABI_DTYPE_CODES, DTYPE_BYTES
from packager.inplace import overlaps_itself

#: The C type an element is moved (or, for indices and masks, read) as.
C_TYPES = {"float32": "uint32_t", "float16": "uint16_t", "bfloat16": "uint16_t", "float64": "uint64_t",
           "int64": "int64_t", "int32": "int32_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "uint8_t"}
ROWS_MODE_MIN_LENGTH = 64  # rows shorter than this leave most of a block idle in rows mode (tried first from 256)
STORE_TYPES = {4: "uint32_t", 8: "uint2", 16: "uint4"}  # one store of this many bytes: a thread's run of outputs
LOAD_TYPES = {1: "uint8_t", 2: "uint16_t", **STORE_TYPES}  # one load of a run's repeated inputs
# The default store: the fastest width on five of six gather cards on the H100, 7% behind 16 bytes
# on the sixth (bench/results/gpu_gather_stores_2026-12-05_h100_run68.md); one element per store ran
# a comparison into bool at 0.84x eager, 8 bytes at 1.00x.
FIRST_STORE = 8
FOUND = "kf_chosen"  # a row reduction's winning index, where the gather also writes it (max.dim)


def c_type(dtype: str) -> str:
    """The C type of one element of ``dtype``; :class:`UnsupportedCard` for a dtype the ABI lacks."""
    if dtype not in C_TYPES or dtype not in ABI_DTYPE_CODES:
        raise UnsupportedCard(f"dtype {dtype} is not one the kernel ABI passes")
    return C_TYPES[dtype]


def fill_bits(value: object, dtype: str) -> str:
    """A C literal of ``value`` as eager stores it in a ``dtype`` tensor (its bits, for floats)."""
    import torch

    if not isinstance(value, (bool, int, float)):
        raise UnsupportedCard(f"fill value {value!r} is not a real number")
    try:
        element = torch.full((), value, dtype=getattr(torch, dtype))
    except (RuntimeError, TypeError) as exc:
        raise UnsupportedCard(f"fill value {value!r} does not convert to {dtype}: {exc}") from None
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[element.element_size()]
    raw = int(element.view(bits).item()) & ((1 << (8 * element.element_size())) - 1)
    return f"({c_type(dtype)}){raw:#x}ULL"


def offset(coords: list[str], strides: list[int]) -> str:
    """``c0 * s0 + c1 * s1 + ...`` over the non-zero strides (``0`` if none)."""
    terms = [f"({c}) * {s}LL" if s != 1 else f"({c})" for c, s in zip(coords, strides, strict=True) if s]
    return " + ".join(terms) or "0"


def _all_coords(ndim: int) -> list[str]:
    return [f"o{d}" for d in range(ndim)]


@dataclass(frozen=True)
class RunRead:
    """A branch's value read as ``in<input>[base + o<dim> / repeat]``: adjacent outputs along ``dim``
    read adjacent elements (each ``repeat`` times: a nearest upsampling, a repeat_interleave), so a
    run of them is one load. ``base`` reads no ``o<dim>``; ``strides`` are the strides it multiplies
    coordinates by (a packed load must stay aligned on every row)."""

    input: int
    dim: int
    base: str
    strides: tuple[int, ...]
    repeat: int = 1


@dataclass(frozen=True)
class Branch:
    """The element when ``condition`` (C, over ``o<d>``) holds; ``""`` for the last, unconditional one."""

    condition: str
    value: str
    run: RunRead | None = None

    @classmethod
    def reading(cls, condition: str, tensor: int, coords: list[str], strides: Sequence[int]) -> Branch:
        """``in<tensor>`` at ``coords`` (C expressions) by ``strides``, noting the :class:`RunRead` where
        one coordinate of stride 1 is ``o<d>`` or ``o<d> / <r>LL`` and no other coordinate reads ``o<d>``."""
        value = f"in{tensor}[{offset(coords, list(strides))}]"
        for p, (coord, stride) in enumerate(zip(coords, strides, strict=True)):
            along = re.fullmatch(r"o(\d+)(?: / (\d+)LL)?", coord)
            others = [c for q, c in enumerate(coords) if q != p]
            if along and stride == 1 and not any(_reads(c, int(along[1])) for c in others):
                rest = [stride_ for q, stride_ in enumerate(strides) if q != p]
                run = RunRead(tensor, int(along[1]), offset(others, rest), tuple(rest), int(along[2] or 1))
                return cls(condition, value, run)
        return cls(condition, value)


#: A read of an input (``in<k>``) or of the output's own value (``out``, in place) at a C index.
_READ = re.compile(r"\b(in\d+|out)\[([^\[\]]*)\]")
_STRIDED_COORD = re.compile(r"\(o(\d+)\)(?: \* (\d+)LL)?")


@dataclass(frozen=True)
class StagedRead:
    """A read ``<pointer>[base + (o<dim>)]`` written in a branch: along the row, adjacent outputs
    read adjacent elements, so a rows-mode run loads them at once and each lane takes its own.
    ``base`` is strided outer coordinates alone (``strides``, for alignment)."""

    text: str
    pointer: str
    base: str
    strides: tuple[int, ...]

    @classmethod
    def parse(cls, text: str, pointer: str, index: str, dim: int) -> StagedRead | None:
        """The read ``text`` (``pointer[index]``) as a staged read along ``dim``, or None where its
        index is anything but strided output coordinates, ``(o<dim>)`` among them with stride 1."""
        terms, along = index.split(" + "), f"(o{dim})"
        if terms.count(along) != 1:
            return None
        rest, strides = [t for t in terms if t != along], []
        for term in rest:
            coord = _STRIDED_COORD.fullmatch(term)
            if coord is None or int(coord[1]) == dim:
                return None
            strides.append(int(coord[2] or 1))
        return cls(text, pointer, " + ".join(rest) or "0", tuple(strides))


def _run_load(read: RunRead, width: int, run: int) -> str:
    """Statements filling ``kf_run`` (a run of ``run`` outputs, ``width`` bytes) from one load of ``read``."""
    if read.repeat == 1:
        word = STORE_TYPES[width]
        return f"kf_run.whole = *reinterpret_cast<const {word} *>(in{read.input} + ({read.base}) + kf_c0);"
    word, r = LOAD_TYPES[width // read.repeat], read.repeat
    return (f"union {{ {word} whole; T lane[{run // r}]; }} kf_in; "
            f"kf_in.whole = *reinterpret_cast<const {word} *>(in{read.input} + ({read.base}) + kf_c0 / {r}LL); "
            f"for (int kf_j = 0; kf_j < {run}; ++kf_j) kf_run.lane[kf_j] = kf_in.lane[kf_j / {r}];")


def _span(length: int, pieces: int) -> tuple[str, str]:
    """Where a rows-mode block's walk starts (a prefix of the thread's offset) and ends: the whole
    row, or ``kf_from`` to ``kf_to`` where the row is cut in ``pieces``."""
    return ("kf_from + ", "kf_to") if pieces > 1 else ("", f"{length}LL")


def _run_walk(run: int, block: int, length: int, pieces: int) -> str:
    """The loop header of a rows-mode thread's runs of ``run`` adjacent outputs, ``kf_c0`` the first."""
    start, end = _span(length, pieces)
    return f"int64_t kf_c0 = {start}(int64_t)threadIdx.x * {run}; kf_c0 < {end}; kf_c0 += {block * run}LL"


def row_piece(rows: int, length: int, stride: int, wave: int) -> int:
    """Outputs of a row one rows-mode block walks: the whole row, or where the rows are fewer than
    ``wave`` (the blocks of one full wave of the device) a piece of it, a whole number of the block's
    ``stride`` (its threads' outputs per step, so every run stays aligned), so that the pieces of
    all rows fill the wave. A row of 4096 int64 in one block walked it in eight dependent steps
    while eager spread it over eight blocks (H100 run 69: 5.5 against 3.97 µs)."""
    steps = cxx.ceil_div(length, stride)
    if rows >= wave or steps <= 1:
        return length
    pieces = min(steps, cxx.ceil_div(wave, rows))
    return min(length, cxx.ceil_div(steps, pieces) * stride)


def _row_units(rows: int, length: int, piece: int, pieces: int) -> str:
    """A rows-mode block's loop over its rows, or over its pieces of rows (``kf_from``, ``kf_to``)."""
    if pieces == 1:
        return f"  for (int64_t row = blockIdx.x; row < {rows}LL; row += gridDim.x) {{"
    return f"""  for (int64_t kf_u = blockIdx.x; kf_u < {rows * pieces}LL; kf_u += gridDim.x) {{
    const int64_t row = kf_u / {pieces}LL, kf_from = kf_u % {pieces}LL * {piece}LL;
    const int64_t kf_to = kf_from + {piece}LL < {length}LL ? kf_from + {piece}LL : {length}LL;"""


def _reads(expression: str, dim: int) -> bool:
    """Whether a C expression reads output coordinate ``o<dim>``."""
    return re.search(rf"\bo{dim}\b", expression) is not None


@dataclass(frozen=True)
class Table:
    """Constant int64 values a gather looks coordinates up in (a nearest-upsampling source map)."""

    name: str
    values: tuple[int, ...]


@dataclass(frozen=True)
class GatherPlan:
    """``out[o] = first branch whose condition holds``; inputs are ``in<i>`` of :func:`c_type` of their dtype.

    ``preamble`` runs per element before the branches; it may call ``KF_BAD()`` for an element
    eager refuses (an index out of range): the cpu kernel then returns a non-zero status (eager
    serves the call and raises), the cuda kernel traps as eager's device assert does.
    """

    family: str
    summary: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    branches: tuple[Branch, ...]
    preamble: str = ""
    tables: tuple[Table, ...] = ()
    helpers: str = ""  # C/C++ defined before the kernel, for both backends (``__CUDACC__`` tells them apart)
    reduction: ArgReduction | None = None  # each element reduces a row (argmax, argmin): cuda's group modes
    # max.dim, min.dim: the C expression of the row's element at index FOUND (coordinates ``o<d>``), written
    # to the first output while the second takes FOUND; the preamble defines FOUND where a thread walks its row.
    found_value: str = ""

    def __post_init__(self) -> None:
        wanted = 2 if self.found_value else 1
        if len(self.outputs) != wanted:
            raise UnsupportedCard(f"the gather template writes {wanted} output(s), the card has {len(self.outputs)}")
        for out in self.outputs:
            if min(out.stride, default=0) < 0 or overlaps_itself(out.shape, out.stride):
                raise UnsupportedCard(f"output layout stride={out.stride} overlaps itself")
        if self.found_value and (self.reduction is None or self.outputs[1].dtype != "int64"
                                 or self.outputs[1].shape != self.outputs[0].shape):
            raise ValueError("a gather writing a row's value and index needs a reduction and an int64 index output")
        for spec in (*self.inputs, *self.outputs):
            c_type(spec.dtype)
        if not self.branches or self.branches[-1].condition:
            raise ValueError("a gather needs an unconditional last branch")

    @property
    def _walk(self) -> list[int]:
        """Output dims of size > 1 from outermost to innermost in storage."""
        out = self.outputs[0]
        return sorted((d for d in range(len(out.shape)) if out.shape[d] != 1), key=lambda d: -out.stride[d])

    @property
    def _row_length(self) -> int:
        walk = self._walk
        return self.outputs[0].shape[walk[-1]] if walk else 1

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cuda" and self.reduction is not None:
            outputs = math.prod(self.outputs[0].shape)
            modes = arg_reduce.modes(self.reduction, outputs, device)
            return KnobSpace({"mode": modes, "threads_per_block": (256, 128, 512), "waves": (4, 1, 0),
                              "per_thread": arg_reduce.per_thread_choices(self.reduction, outputs, device)},
                             only_in={"waves": tuple(m for m in modes if m != "split"), "per_thread": ("split",)})
        if backend == "cuda":
            length = self._row_length
            modes = (("rows", "flat") if length >= 256 else
                     ("flat", "rows") if length >= ROWS_MODE_MIN_LENGTH else ("flat",))
            return KnobSpace({"mode": modes, "threads_per_block": (256, 128, 512), "waves": (4, 1, 0),
                              "store_bytes": self._store_widths()}, only_in={"store_bytes": ("rows",)})
        return KnobSpace({"threads": cpu_thread_choices(device, (*self.inputs, *self.outputs)),
                          "schedule": ("static", "dynamic")})

    def _store_widths(self) -> tuple[int, ...]:
        """Bytes a rows-mode thread writes at once; wider than one element only where the output is
        dense along its rows, 16-byte aligned, and each row splits into whole stores. :data:`FIRST_STORE`
        bytes come first where allowed, then the other widths, widest first, then one element: a run
        trades store instructions for loads that each touch more sectors, and no width won on every
        card measured, so the search keeps them all."""
        out = self.outputs[0]
        size, walk = DTYPE_BYTES[out.dtype], self._walk
        if not walk or not is_dense(out) or out.stride[walk[-1]] != 1 or not out.aligned16:
            return (size,)
        widths = [w for w in sorted(STORE_TYPES, reverse=True) if w > size and self._row_length * size % w == 0]
        widths.sort(key=lambda w: w != FIRST_STORE)
        return (*widths, size)

    def _coords(self, dims: list[int], linear: str, indent: str, outer: bool = True) -> str:
        """``const int64_t o<d> = ...`` for ``dims`` (outermost first) of output linear index ``linear``;
        the ``outer`` call also defines the size-1 dims' coordinates (0)."""
        shape = self.outputs[0].shape
        lines = [f"{indent}const int64_t o{d} = 0; (void)o{d};" for d in range(len(shape))
                 if outer and d not in self._walk]
        divisor = 1
        for d in reversed(dims):
            quotient = f"{linear} / {divisor}LL" if divisor != 1 else linear
            value = quotient if d == dims[0] else f"({quotient}) % {shape[d]}LL"
            lines.append(f"{indent}const int64_t o{d} = {value}; (void)o{d};")  # a fill reads no coordinate
            divisor *= shape[d]
        return "\n".join(lines)

    def _store(self, dense_index: str) -> str:
        """Where the element of coordinates ``o<d>`` goes: ``dense_index``, its rank in storage order,
        where the output is dense; its offset by the output's strides where it has gaps."""
        out = self.outputs[0]
        return dense_index if is_dense(out) else offset(_all_coords(len(out.shape)), out.stride)

    def _index_store(self, indent: str) -> str:
        """With :attr:`found_value`: the statement writing FOUND to the index output, at the element's coordinates."""
        if not self.found_value:
            return ""
        index = self.outputs[1]
        return f"\n{indent}out1[{offset(_all_coords(len(index.shape)), index.stride)}] = {FOUND};"

    def _reduction_write(self) -> str:
        """What a group-mode reduction's first lane writes for its element, its winner in ``found``."""
        if not self.found_value:
            return f"out[{self._store('i')}] = (T)found;"
        return (f"{{ const int64_t {FOUND} = found; out[{self._store('i')}] = {self.found_value};"
                f"{self._index_store(' ')} }}")

    def _element(self, indent: str) -> str:
        lines = [f"{indent}{line}" for line in self.preamble.splitlines()]
        lines.append(f"{indent}T v;")
        for i, branch in enumerate(self.branches):
            if branch.condition:
                lines.append(f"{indent}{'if' if i == 0 else 'else if'} ({branch.condition}) v = {branch.value};")
            else:
                lines.append(f"{indent}{'else ' if i else ''}v = {branch.value};")
        return "\n".join(lines)

    def _params(self, backend: str) -> tuple[str, str]:
        restrict = "__restrict__" if backend == "cuda" else "__restrict"
        params = [f"const {c_type(s.dtype)} *{restrict} in{i}" for i, s in enumerate(self.inputs)]
        args = [f"(const {c_type(s.dtype)} *)inputs[{i}].data" for i, s in enumerate(self.inputs)]
        params.append(f"T *{restrict} out")
        args.append("(T *)outputs[0].data")
        if self.found_value:
            params.append(f"int64_t *{restrict} out1")
            args.append("(int64_t *)outputs[1].data")
        return ", ".join(params), ", ".join(args)

    def _tables(self, backend: str) -> str:
        qualifier = "__device__ " if backend == "cuda" else ""
        return "".join(f"static {qualifier}const int64_t {t.name}[{len(t.values)}] = "
                       f"{{{', '.join(str(v) for v in t.values)}}};\n" for t in self.tables)

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        head = (f"typedef {c_type(self.outputs[0].dtype)} T;\n/* {self.summary} */\n{self._tables(backend)}"
                f"{self.helpers}")
        params, args = self._params(backend)
        total = math.prod(self.outputs[0].shape)
        walk, length = self._walk, self._row_length
        if backend == "cuda":
            return f"{cxx.CUDA_PRELUDE}\n{head}{self._cuda(knobs, device, params, args, total, walk, length)}"
        threads = f" num_threads({knobs['threads']})" if knobs["threads"] else ""
        launch = cxx.cpu_kf_launch(self.inputs, self.outputs,
                                   f"  if (kf_gather({args})) return {cxx.STATUS_LAUNCH_FAILED};\n")
        return f"""{cxx.CPU_PRELUDE}
{head}
static int kf_gather({params}) {{
  int kf_bad = 0;
#define KF_BAD() __atomic_store_n(&kf_bad, 1, __ATOMIC_RELAXED)
#pragma omp parallel for{threads} schedule({knobs["schedule"]})
  for (int64_t row = 0; row < {total // length}LL; ++row) {{
{self._coords(walk[:-1], "row", "    ")}
    for (int64_t c = 0; c < {length}LL; ++c) {{
{self._coords(walk[-1:], "c", "      ", outer=False)}
{self._element("      ")}
      out[{self._store(f'row * {length}LL + c')}] = v;{self._index_store("      ")}
    }}
  }}
  return kf_bad;
}}

{launch}"""

    def _loads_runs(self, width: int) -> bool:
        """Whether a rows-mode run of ``width`` bytes can be read with one load per branch: every
        branch reads its input along the output's innermost dim (:class:`RunRead`), in the output's
        element size, a whole number of elements per run, aligned on every row, and nothing but that
        read depends on the position in the row."""
        walk, size = self._walk, DTYPE_BYTES[self.outputs[0].dtype]
        if not walk or _reads(self.preamble, walk[-1]):
            return False
        for branch in self.branches:
            run = branch.run
            if run is None or run.dim != walk[-1] or _reads(branch.condition, walk[-1]) or _reads(run.base, run.dim):
                return False
            source, load = self.inputs[run.input], width // run.repeat
            if (DTYPE_BYTES[source.dtype] != size or not source.aligned16 or width % (run.repeat * size)
                    or load not in LOAD_TYPES or any(s * size % load for s in run.strides)):
                return False
        return True

    def _run(self, width: int) -> int:
        """Outputs in a rows-mode thread's run of ``width`` bytes."""
        return width // DTYPE_BYTES[self.outputs[0].dtype]

    def _pointee(self, pointer: str) -> TensorSpec:
        return self.outputs[0] if pointer == "out" else self.inputs[int(pointer.removeprefix("in"))]

    def _staged_reads(self, run: int) -> list[StagedRead]:
        """The reads a rows-mode thread loads for its whole run of ``run`` outputs before computing
        them (:class:`StagedRead`): each aligned on every row and ``run`` elements a load width. Only
        where nothing but data decides the branch (no preamble, no condition reading a coordinate,
        as a pad's bounds or a cat's parts do), so that every read, loaded whether or not its branch
        is taken, stays inside its tensor."""
        walk = self._walk
        if not walk or self.preamble or any(re.search(r"\bo\d+\b", _READ.sub("", b.condition))
                                            for b in self.branches):
            return []
        staged: dict[str, StagedRead] = {}
        for branch in self.branches:
            for match in _READ.finditer(f"{branch.condition} {branch.value}"):
                read = StagedRead.parse(match[0], match[1], match[2], walk[-1])
                if read is None or read.text in staged:
                    continue
                spec = self._pointee(read.pointer)
                size = DTYPE_BYTES[spec.dtype]
                if spec.aligned16 and run * size in LOAD_TYPES and all(s * size % (run * size) == 0
                                                                        for s in read.strides):
                    staged[read.text] = read
        return list(staged.values())

    def _row_loads(self, width: int, block: int, length: int, pieces: int) -> str:
        """A rows-mode block's walk along row ``row`` where runs are loaded whole (:meth:`_loads_runs`):
        the preamble once per row, then per run the branch that holds and one load, its elements
        spread over the run where each is repeated."""
        run = self._run(width)
        lines = [f"    {line}" for line in self.preamble.splitlines()]
        lines.append(f"    for ({_run_walk(run, block, length, pieces)}) {{")
        lines.append(f"      union {{ {STORE_TYPES[width]} whole; T lane[{run}]; }} kf_run;")
        for i, branch in enumerate(self.branches):
            assert branch.run is not None
            if branch.condition:
                prefix = f"{'else if' if i else 'if'} ({branch.condition}) "
            else:
                prefix = "else " if i else ""
            lines.append(f"      {prefix}{{ {_run_load(branch.run, width, run)} }}")
        lines.append(f"      *reinterpret_cast<{STORE_TYPES[width]} *>(out + row * {length}LL + kf_c0) = kf_run.whole;")
        lines.append("    }")
        return "\n".join(lines) + "\n"

    def _row_stores(self, width: int, block: int, length: int, pieces: int) -> str:
        """A rows-mode block's walk along its row ``row`` (or its piece of it, where the row is cut in
        ``pieces``): one element per store, or a thread's run of adjacent outputs packed into one
        ``width``-byte store (loaded as one too where it can be)."""
        run = self._run(width)
        if run > 1 and self._loads_runs(width):
            return self._row_loads(width, block, length, pieces)
        if run == 1:
            start, end = _span(length, pieces)
            return f"""    for (int64_t c = {start}threadIdx.x; c < {end}; c += {block}) {{
{self._coords(self._walk[-1:], "c", "      ", outer=False)}
{self._element("      ")}
      out[{self._store(f'row * {length}LL + c')}] = v;{self._index_store("      ")}
    }}
"""
        element, loads = self._element("        "), []
        for n, read in enumerate(self._staged_reads(run)):
            spec = self._pointee(read.pointer)
            word = LOAD_TYPES[run * DTYPE_BYTES[spec.dtype]]
            element_type = "T" if read.pointer == "out" else c_type(spec.dtype)
            loads.append(f"      union {{ {word} whole; {element_type} lane[{run}]; }} kf_s{n}; kf_s{n}.whole = "
                         f"*reinterpret_cast<const {word} *>({read.pointer} + ({read.base}) + kf_c0);\n")
            element = re.sub(rf"\b{re.escape(read.text)}", f"kf_s{n}.lane[kf_j]", element)
        return f"""    for ({_run_walk(run, block, length, pieces)}) {{
      union {{ {STORE_TYPES[width]} whole; T lane[{run}]; }} kf_pack;
{"".join(loads)}#pragma unroll
      for (int kf_j = 0; kf_j < {run}; ++kf_j) {{
        const int64_t c = kf_c0 + kf_j;
{self._coords(self._walk[-1:], "c", "        ", outer=False)}
{element}
        kf_pack.lane[kf_j] = v;
      }}
      *reinterpret_cast<{STORE_TYPES[width]} *>(out + row * {length}LL + kf_c0) = kf_pack.whole;
    }}
"""

    def _cuda(self, knobs: Knobs, device: DeviceInfo, params: str, args: str, total: int, walk: list[int],
              length: int) -> str:
        block = int(knobs["threads_per_block"])
        define = "#define KF_BAD() __trap()\n"
        if self.reduction is not None and knobs["mode"] in arg_reduce.GROUP_MODES:
            reduction = arg_reduce.kernel(self.reduction, knobs, device, params, args, total,
                                          self._coords(walk, "i", "    "), self._reduction_write())
            return self._cuda_launch(define + reduction.source, reduction.launch, reduction.workspace)
        if knobs["mode"] == "rows":
            rows, width = total // length, int(knobs["store_bytes"])
            piece = row_piece(rows, length, block * self._run(width), cuda_grid_limit(device, block))
            pieces = cxx.ceil_div(length, piece)
            grid = cuda_grid(device, block, int(knobs["waves"]), rows * pieces)
            kernel = f"""{define}__global__ void __launch_bounds__({block}) kf_gather({params}) {{
{_row_units(rows, length, piece, pieces)}
{self._coords(walk[:-1], "row", "    ")}
{self._row_stores(width, block, length, pieces)}  }}
}}
"""
        else:
            grid = cuda_grid(device, block, int(knobs["waves"]), cxx.ceil_div(total, block))
            kernel = f"""{define}__global__ void __launch_bounds__({block}) kf_gather({params}) {{
  for (int64_t i = (int64_t)blockIdx.x * {block} + threadIdx.x; i < {total}LL; i += (int64_t)gridDim.x * {block}) {{
{self._coords(walk, "i", "    ")}
{self._element("    ")}
    out[{self._store('i')}] = v;{self._index_store("    ")}
  }}
}}
"""
        return self._cuda_launch(kernel, f"  kf_gather<<<{grid}, {block}, 0, s>>>({args});\n")

    def _cuda_launch(self, kernels: str, launch: str, workspace: cxx.Workspace | None = None) -> str:
        """``kernels``, then ``kf_launch``: the guard, then ``launch`` on stream ``s``."""
        take = workspace.take(len(self.outputs)) if workspace is not None else ""
        return f"""{kernels}
extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(self.inputs, self.outputs, workspace=workspace)}
  cudaStream_t s = (cudaStream_t)stream;
{take}{launch}{cxx.cuda_launch_epilogue()}
}}
"""
