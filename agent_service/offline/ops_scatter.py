"""index_add and index_add_: rows of ``source`` added into ``self`` at the rows ``index`` names.

Message passing in graph networks and the expert loop of mixture-of-experts layers add with it.
Each output element is ``self`` plus ``alpha`` times every source element whose index names its
row.

On the cpu the sources are added in index order, eager's own order, float32 and float64 in their
own dtype and half dtypes in float, rounded once at the end, as eager's cpu kernel does, so the
result is eager's bit for bit; the threads split the elements of a row, never the index. Every
index is checked before anything is written: one out of range makes the kernel return an error and leaves the
output as it was (its caller then runs eager, which raises), so an in-place call is never half
applied. On cuda one thread per element of a row walks the index in order too, so the result is
the same on every call (eager's atomic adds of floats land in an order that changes between calls,
which the sandbox's determinism check would reject); each add rounds to the dtype, as eager's
atomics do. An index out of range traps, as eager's device assertion does. Integer sums wrap as
eager's do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agent_service.offline import cxx
from agent_service.offline.call import TensorArg, UnsupportedCard, split_op_name, tensor_argument
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import row_major_strides
from agent_service.offline.plan import cpu_thread_choices, cuda_grid
from kforge_domain.card import OperatorCard, TensorSpec
from kforge_domain.device import DeviceInfo
from packager.inplace import overlaps_itself

#: The in-place op the family writes over ``self``; catalog lets its mutation through.
IN_PLACE = ("index_add_",)
INTEGERS = ("int64", "int32", "int8", "uint8")
FLOATS = ("float32", "float64", "float16", "bfloat16")


@dataclass(frozen=True)
class ScatterCall:
    """What every scatter-like plan knows: its tensors (``self``, the index and the source, by input
    position), the one output and the dim the index runs along."""

    summary: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    self_index: int
    index: int
    source: int
    dim: int
    in_place: bool

    @property
    def out(self) -> TensorSpec:
        return self.outputs[0]


@dataclass(frozen=True)
class IndexAddPlan(ScatterCall):
    """``out = self`` (unless in place), then ``out[.., index[j], ..] += alpha * source[.., j, ..]`` along ``dim``."""

    alpha: int | float

    @property
    def family(self) -> str:
        return "index_add"

    @property
    def count(self) -> int:
        """How many indices (rows of the source) there are."""
        return self.inputs[self.index].numel

    def _split(self, spec: TensorSpec) -> tuple[list[int], list[int], list[int], list[int], int]:
        """``spec``'s dims before ``dim`` (sizes, strides), after it, and ``dim``'s stride (0-dim: none)."""
        if not spec.shape:
            return [], [], [], [], 0
        d = self.dim
        return spec.shape[:d], spec.stride[:d], spec.shape[d + 1:], spec.stride[d + 1:], spec.stride[d]

    def offsets(self, spec: TensorSpec, outer: str, inner: str) -> tuple[str, str, int]:
        """C offsets of element (``outer``, ``inner``) of ``spec``'s dims before and after ``dim``, and its stride."""
        outer_sizes, outer_strides, inner_sizes, inner_strides, step = self._split(spec)
        return (cxx.linear_offset(outer, outer_sizes, outer_strides),
                cxx.linear_offset(inner, inner_sizes, inner_strides), step)

    @property
    def index_stride(self) -> int:
        """The index's stride (0 for a 0-d index)."""
        index = self.inputs[self.index]
        return index.stride[0] if index.shape else 0

    @property
    def size(self) -> int:
        """How many rows ``dim`` has: an index must be below it."""
        return self.out.shape[self.dim] if self.out.shape else 1

    @property
    def outer(self) -> int:
        return math.prod(self._split(self.out)[0])

    @property
    def inner(self) -> int:
        return math.prod(self._split(self.out)[2])

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cpu":
            return KnobSpace({"threads": cpu_thread_choices(device, self.outputs), "chunk": (1024, 256, 4096)})
        return KnobSpace({"threads_per_block": (256, 512, 128), "waves": (4, 0, 1)})

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        return _render_cuda(self, knobs, device) if backend == "cuda" else _render_cpu(self, knobs)


def index_add_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> IndexAddPlan:
    """index_add.default and index_add_.default of any layout, a 1-d or 0-d int64 or int32 index."""
    if split_op_name(card.op)[1] != "default":
        raise UnsupportedCard(f"{card.op}: only the default overload is templated")
    x, index, source = (tensor_argument(call, n) for n in ("self", "index", "source"))
    in_place = base in IN_PLACE
    if in_place and card.mutated_inputs != [x.index]:
        raise UnsupportedCard(f"{card.op} mutates inputs {card.mutated_inputs}; the template writes self alone")
    if not in_place and card.mutated_inputs:
        raise UnsupportedCard(f"{card.op} mutates inputs {card.mutated_inputs}")
    out = card.outputs[0]
    _check_layouts(card, x, index, source, in_place)
    ndim = len(out.shape)
    dim = call.get("dim")
    if isinstance(dim, bool) or not isinstance(dim, int) or not -max(ndim, 1) <= dim < max(ndim, 1):
        raise UnsupportedCard(f"index_add along dim {dim!r} of a {ndim}-dim tensor")
    dim %= max(ndim, 1)
    expected = [*out.shape[:dim], index.spec.numel, *out.shape[dim + 1:]] if ndim else []
    if source.spec.shape != expected:
        raise UnsupportedCard(f"index_add source {source.spec.shape} is not {expected}")
    alpha = _alpha(call.get("alpha", 1), out.dtype)
    summary = (f"{card.op} of {source.spec.shape} rows into {out.shape} {out.dtype} along dim {dim}"
               f"{' in place' if in_place else ''}")
    return IndexAddPlan(summary=summary, inputs=tuple(card.inputs), outputs=tuple(card.outputs), self_index=x.index,
                        index=index.index, source=source.index, dim=dim, alpha=alpha, in_place=in_place)


def _check_layouts(card: OperatorCard, x: TensorArg, index: TensorArg, source: TensorArg, in_place: bool) -> None:
    out = card.outputs[0]
    if len(card.outputs) != 1 or out.dtype not in (*FLOATS, *INTEGERS):
        raise UnsupportedCard(f"index_add into {[o.dtype for o in card.outputs]} is not templated")
    if x.spec.dtype != out.dtype or source.spec.dtype != out.dtype:
        raise UnsupportedCard(f"index_add of {source.spec.dtype} into {x.spec.dtype}: eager takes one dtype")
    if index.spec.dtype not in ("int64", "int32") or len(index.spec.shape) > 1:
        raise UnsupportedCard(f"index_add by a {index.spec.dtype} index of shape {index.spec.shape}: a 1-d int "
                              "index is templated")
    if x.spec.shape != out.shape or overlaps_itself(out.shape, out.stride):
        raise UnsupportedCard(f"index_add into {out.shape} stride {out.stride}: elements would share an address")
    if in_place and x.spec.stride != out.stride:
        raise UnsupportedCard(f"{card.op}: self is laid out unlike the output it is")
    if not out.numel or not index.spec.numel:
        raise UnsupportedCard("index_add with nothing to add")


def _alpha(alpha: Any, dtype: str) -> int | float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise UnsupportedCard(f"index_add with alpha {alpha!r}: a number is templated")
    if dtype in INTEGERS:
        if not isinstance(alpha, int):
            raise UnsupportedCard(f"index_add of {dtype} with alpha {alpha!r}: eager takes an int alpha")
        return alpha
    return float(alpha)


def element_types(dtype: str, index_dtype: str, backend: str) -> str:
    """Typedefs T (the elements) and I (the index) of a scatter kernel."""
    return (f"typedef {cxx.storage_type(dtype, backend)} T;\n"
            f"typedef {cxx.storage_type(index_dtype, backend)} I;\n")


def _add_expression(plan: IndexAddPlan) -> str:
    """C expression of ``a + alpha * b`` in the type the cpu accumulates in (``a``: that type, ``b``: a T):
    float for half dtypes, rounded once at the end, else the dtype itself."""
    if plan.out.dtype in ("float16", "bfloat16"):
        return "a + kf_to_f32(b)" if plan.alpha == 1 else f"a + kf_to_f32(b) * {cxx.cfloat(plan.alpha)}"
    return add_rounded(plan.out.dtype, "a", "b", plan.alpha)


def _render_cpu(plan: IndexAddPlan, knobs: Knobs) -> str:
    """Half dtypes accumulate in float, each element rounded once at the end, as eager's cpu kernel
    does (its opmath): the sums live in the workspace, the output's elements in row-major order."""
    threads, chunk = int(knobs["threads"]), int(knobs["chunk"])
    width = f" num_threads({threads})" if threads else ""
    pragma = f"#pragma omp parallel for collapse(2) schedule(static){width}\n" if threads != 1 else ""
    half = plan.out.dtype in ("float16", "bfloat16")
    out_outer, out_inner, out_step = plan.offsets(_sums_spec(plan) if half else plan.out, "a", "b")
    src_outer, src_inner, src_step = plan.offsets(plan.inputs[plan.source], "a", "b")
    index_stride, size = plan.index_stride, plan.size
    workspace = cxx.Workspace("kf_sums", "float", plan.out.numel) if half else None
    target = "kf_sums" if half else "(T *)outputs[0].data"
    body = f"""  const I *index = (const I *)inputs[{plan.index}].data;
  for (int64_t j = 0; j < {plan.count}LL; ++j) {{  /* every index checked before anything is written */
    const int64_t n = (int64_t)index[j * {index_stride}LL];
    if (n < 0 || n >= {size}LL) return {cxx.STATUS_BAD_INPUT};
  }}
{workspace.take(len(plan.outputs)) if workspace else ""}{_cpu_copy(plan, threads, "in")}\
  kf_index_add(index, (const T *)inputs[{plan.source}].data, {target});
{_cpu_copy(plan, threads, "out") if half else ""}"""
    launch = cxx.cpu_kf_launch(plan.inputs, plan.outputs, body, workspace)
    accumulator = "float" if half else "T"
    return f"""{cxx.CPU_PRELUDE}
/* {plan.summary}; {knobs} */
{element_types(plan.out.dtype, plan.inputs[plan.index].dtype, "cpu")}typedef {accumulator} A;
static inline A kf_add(A a, T b) {{ return {_add_expression(plan)}; }}
static void kf_index_add(const I *__restrict index, const T *__restrict src, A *__restrict out) {{
{pragma}  for (int64_t a = 0; a < {plan.outer}LL; ++a)
    for (int64_t b0 = 0; b0 < {plan.inner}LL; b0 += {chunk}LL) {{
      const int64_t b1 = b0 + {chunk}LL < {plan.inner}LL ? b0 + {chunk}LL : {plan.inner}LL;
      for (int64_t j = 0; j < {plan.count}LL; ++j) {{  /* in index order: eager's order of adds */
        A *o = out + ({out_outer}) + (int64_t)index[j * {index_stride}LL] * {out_step}LL;
        const T *s = src + ({src_outer}) + j * {src_step}LL;
        for (int64_t b = b0; b < b1; ++b) o[{out_inner}] = kf_add(o[{out_inner}], s[{src_inner}]);
      }}
    }}
}}
{launch}"""


def _sums_spec(plan: IndexAddPlan) -> TensorSpec:
    """The float sums of a half-dtype output: its shape, row-major, in the workspace."""
    return TensorSpec(shape=plan.out.shape, stride=row_major_strides(plan.out.shape), dtype="float32")


def _cpu_copy(plan: IndexAddPlan, threads: int, step: str) -> str:
    """Statements copying ``self`` into the output (``in``; from the output itself in place), or, with
    float sums, into the sums (``in``) and the rounded sums into the output (``out``)."""
    x = plan.out if plan.in_place else plan.inputs[plan.self_index]
    source = "outputs[0]" if plan.in_place else f"inputs[{plan.self_index}]"
    numel, half = plan.out.numel, plan.out.dtype in ("float16", "bfloat16")
    width = f" num_threads({threads})" if threads else ""
    pragma = f"#pragma omp parallel for schedule(static){width}\n" if threads != 1 else ""
    at_out = cxx.linear_offset("e", plan.out.shape, plan.out.stride)
    if half and step == "in":
        line = f"kf_sums[e] = kf_to_f32(x[{cxx.linear_offset('e', x.shape, x.stride)}]);"
    elif half:
        line = f"y[{at_out}] = kf_from_f32<T>(kf_sums[e]);"
    elif plan.in_place:
        return ""
    else:
        line = f"y[{at_out}] = x[{cxx.linear_offset('e', x.shape, x.stride)}];"
    return (f"  {{ const T *x = (const T *){source}.data; T *y = (T *)outputs[0].data; (void)x; (void)y;\n"
            f"{pragma}  for (int64_t e = 0; e < {numel}LL; ++e) {line} }}\n")


def _render_cuda(plan: IndexAddPlan, knobs: Knobs, device: DeviceInfo) -> str:
    """One thread per element of a row walks the index in order: deterministic, where atomic adds of
    floats land in an order that changes from call to call."""
    block, waves = int(knobs["threads_per_block"]), int(knobs["waves"])
    source = plan.inputs[plan.source]
    x = plan.inputs[plan.self_index]
    out_outer, out_inner, out_step = plan.offsets(plan.out, "a", "b")
    src_outer, src_inner, src_step = plan.offsets(source, "a", "b")
    index_stride, size = plan.index_stride, plan.size
    columns, inner = plan.outer * plan.inner, plan.inner
    add_grid = cuda_grid(device, block, waves, cxx.ceil_div(columns, block))
    copy_grid = cuda_grid(device, block, waves, cxx.ceil_div(plan.out.numel, block))
    copy_kernel = "" if plan.in_place else cuda_copy_kernel(plan.out, x, block)
    copy_launch = "" if plan.in_place else (
        f"  kf_copy<<<{copy_grid}, {block}, 0, (cudaStream_t)stream>>>((const T *)inputs[{plan.self_index}].data, "
        "(T *)outputs[0].data);\n")
    return f"""{cxx.CUDA_PRELUDE}
/* {plan.summary}; {knobs} */
{element_types(plan.out.dtype, plan.inputs[plan.index].dtype, "cuda")}
{copy_kernel}__global__ void __launch_bounds__({block})
kf_index_add(const I *__restrict__ index, const T *__restrict__ src, T *__restrict__ out) {{
  {cuda_grid_loop(block, "e", columns)} {{
    const int64_t b = e % {inner}LL, a = e / {inner}LL;
    T *o = out + ({out_outer}) + ({out_inner});
    const T *s = src + ({src_outer}) + ({src_inner});
    for (int64_t j = 0; j < {plan.count}LL; ++j) {{  /* in index order, as eager's cpu loop */
      const int64_t n = (int64_t)index[j * {index_stride}LL];
      if (n < 0 || n >= {size}LL) __trap();  /* eager's device assertion */
      o[n * {out_step}LL] = {add_rounded(plan.out.dtype, f"o[n * {out_step}LL]", f"s[j * {src_step}LL]", plan.alpha)};
    }}
  }}
}}
extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs)}
{copy_launch}  kf_index_add<<<{add_grid}, {block}, 0, (cudaStream_t)stream>>>((const I *)inputs[{plan.index}].data,
      (const T *)inputs[{plan.source}].data, (T *)outputs[0].data);
{cxx.cuda_launch_epilogue()}
}}
"""


def add_rounded(dtype: str, a: str, b: str, alpha: int | float = 1) -> str:
    """C expression (either backend) of ``a + alpha * b`` for T values, rounded to T, ``alpha * b``
    rounded first, as eager's cuda kernels add ``val * alpha``; integers wrap."""
    if dtype in INTEGERS:
        scaled = f"(uint64_t)(int64_t){b}" if alpha == 1 else f"(uint64_t)(int64_t){b} * (uint64_t)({int(alpha)}LL)"
        return f"(T)((uint64_t)(int64_t){a} + {scaled})"
    if dtype in ("float32", "float64"):
        factor = repr(float(alpha)) if dtype == "float64" else cxx.cfloat(alpha)  # a double alpha stays double
        return f"{a} + {b}" if alpha == 1 else f"{a} + (T)({b} * {factor})"
    scaled = f"kf_to_f32({b})" if alpha == 1 else f"kf_to_f32(kf_from_f32<T>(kf_to_f32({b}) * {cxx.cfloat(alpha)}))"
    return f"kf_from_f32<T>(kf_to_f32({a}) + {scaled})"


def cuda_grid_loop(block: int, variable: str, count: int) -> str:
    """The head of a grid-stride loop of ``variable`` over ``count`` elements (``for (...)``)."""
    return (f"for (int64_t {variable} = (int64_t)blockIdx.x * {block} + threadIdx.x; {variable} < {count}LL; "
            f"{variable} += (int64_t)gridDim.x * {block})")


def cuda_copy_kernel(out: TensorSpec, x: TensorSpec, block: int) -> str:
    """``kf_copy(x, y)``: ``x`` copied into the output ``y`` of the same shape, element by element."""
    return f"""__global__ void __launch_bounds__({block}) kf_copy(const T *__restrict__ x, T *__restrict__ y) {{
  {cuda_grid_loop(block, "e", out.numel)}
    y[{cxx.linear_offset('e', out.shape, out.stride)}] = x[{cxx.linear_offset('e', x.shape, x.stride)}];
}}
"""
