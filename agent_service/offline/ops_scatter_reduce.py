"""scatter (by sources or one value), scatter_add and scatter_reduce (sum, mean, amax, amin), out
of place and in place; a write (``scatter``) also of booleans: a top-p mask sent back to vocabulary
order.

Graph networks pool messages into nodes with them (``torch_geometric``'s ``scatter``): each source
element goes to the output element at its own coordinates with ``dim``'s replaced by the index
element there. Sources at different coordinates outside ``dim`` never meet, so the cpu kernel gives
each thread whole columns along ``dim`` and walks each column in order, eager's own order. It
follows eager's cpu arithmetic: sums of half dtypes accumulate in float and round once (their mean
divides the rounded sum), a max or min propagates a NaN source and keeps a NaN already there, an
integer mean divides by flooring, and ``include_self=False`` starts each reached element from its
first source; an element no source reaches keeps ``self``. Every index is checked before anything
is written (an index out of range makes eager raise; the kernel returns an error and writes
nothing). On cuda one thread per column walks it in order, so the result is the same on every
call (eager's atomics land in an order that changes between calls); it follows eager's cuda
arithmetic: each add rounded to the dtype as the atomics round it, a max or min that keeps a NaN
already there and takes a NaN source (``safe_max``), a mean dividing by counts added up in the
dtype itself (a bfloat16 count stops at 256, as eager's does), and ``include_self=False`` starting
the reached elements from the reduction's identity, written by a pass before the walk. Where the
result does not depend on the order (a max or min, an integer sum or mean, a write of one value),
a ``sources`` walk gives each source element its own thread and combines with atomics, as eager
does: message passing pools a million edges into few columns, each far too long for one thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard, split_op_name, tensor_argument
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import row_major_strides
from agent_service.offline.ops_compare import wrap_int
from agent_service.offline.ops_scatter import (
    FLOATS,
    INTEGERS,
    ScatterCall,
    add_rounded,
    cuda_copy_kernel,
    cuda_grid_loop,
    element_types,
)
from agent_service.offline.plan import cpu_thread_choices, cuda_grid, multiprocessors
from kforge_domain.card import OperatorCard, TensorSpec
from kforge_domain.device import DeviceInfo
from packager.inplace import overlaps_itself

#: The in-place ops the family writes over ``self``; catalog lets their mutation through.
IN_PLACE = ("scatter_add_", "scatter_reduce_", "scatter_")
REDUCTIONS = ("sum", "mean", "amax", "amin", "assign")
_HALF = ("float16", "bfloat16")
#: C statement combining source value ``v`` into accumulator ``*p`` (both the accumulator type A).
_COMBINE = {"sum": "*p = (A)(*p + v);", "mean": "*p = (A)(*p + v);",
            "amax": "*p = v != v ? v : (*p < v ? v : *p);", "amin": "*p = v != v ? v : (v < *p ? v : *p);",
            "assign": "*p = v;"}  # in order: the last source wins, as in eager's cpu loop
_INTEGER_SUM = "*p = (A)((uint64_t)(int64_t)*p + (uint64_t)(int64_t)v);"  # wraps as eager's
#: float dtype -> (unsigned type of its size, T to bits, bits to T): a compare-and-swap's view of it
_ATOMIC_BITS = {"float32": ("unsigned int", "__float_as_uint", "__uint_as_float"),
                "float64": ("unsigned long long", "(unsigned long long)__double_as_longlong",
                            "__longlong_as_double"),
                "float16": ("unsigned short", "__half_as_ushort", "__ushort_as_half"),
                "bfloat16": ("unsigned short", "__bfloat16_as_ushort", "__ushort_as_bfloat16")}


@dataclass(frozen=True)
class ScatterReducePlan(ScatterCall):
    """``out = self`` (unless in place), then each source element reduced into ``out`` at its
    coordinates with ``dim``'s replaced by ``index`` there."""

    reduce: str
    include_self: bool
    value: str  # scatter by one value: its C literal (the source is then -1); "" otherwise

    @property
    def family(self) -> str:
        return "scatter_reduce"

    @property
    def walk(self) -> TensorSpec:
        """The index tensor, whose coordinates every source element and its target are found at."""
        return self.inputs[self.index]

    @property
    def half(self) -> bool:
        return self.out.dtype in _HALF

    @property
    def counted(self) -> bool:
        """Whether the kernel counts the sources reaching each element (a mean, or include_self=False)."""
        return self.reduce == "mean" or not self.include_self

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cpu":
            return KnobSpace({"threads": cpu_thread_choices(device, self.outputs)})
        walks = ("columns", "sources") if self.order_free else ("columns",)
        if self.order_free and self.few_long_columns(device):
            walks = walks[::-1]
        return KnobSpace({"walk": walks, "threads_per_block": (256, 512, 128), "waves": (4, 0, 1)})

    @property
    def order_free(self) -> bool:
        """Whether the result is the same whatever order the sources land in, so that one thread per
        source with atomics (cuda's ``sources`` walk) gives the same bits on every call: a max or min
        (bit patterns aside: +0 against -0, NaN payloads), an integer sum or mean (adds that wrap
        associate), or a write of one value."""
        dtype = self.out.dtype
        if self.reduce in ("amax", "amin"):
            return dtype in _ATOMIC_BITS or dtype in ("int32", "int64")
        if self.reduce in ("sum", "mean"):
            return dtype in ("int32", "int64")
        return self.reduce == "assign" and bool(self.value)

    def few_long_columns(self, device: DeviceInfo) -> bool:
        """Whether walking columns leaves the GPU mostly idle: fewer columns than a few per core,
        or each long enough that one thread's walk dominates."""
        length = self.walk.shape[self.dim]
        return length > 16 or self.walk.numel // length < multiprocessors(device) * 128

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        return _render_cuda(self, knobs, device) if backend == "cuda" else _render_cpu(self, knobs)


#: op base name -> its one templated overload (``scatter``: by a tensor of sources, or by one value)
_OVERLOADS = {"scatter_add": ("default",), "scatter_add_": ("default",), "scatter_reduce": ("two",),
              "scatter_reduce_": ("two",), "scatter": ("src", "value"), "scatter_": ("src", "value")}


def scatter_reduce_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ScatterReducePlan:
    """scatter (by sources or a value), scatter_add and scatter_reduce, and their in-place forms."""
    overload = split_op_name(card.op)[1]
    if overload not in _OVERLOADS.get(base, ()):
        raise UnsupportedCard(f"{card.op}: the templated overloads are {_OVERLOADS}")
    x, index = tensor_argument(call, "self"), tensor_argument(call, "index")
    source = None if overload == "value" else tensor_argument(call, "src")
    in_place = base in IN_PLACE
    if card.mutated_inputs != ([x.index] if in_place else []):
        raise UnsupportedCard(f"{card.op} mutates inputs {card.mutated_inputs}; the template writes self alone")
    reduce = {"scatter_add": "sum", "scatter": "assign"}.get(base.rstrip("_"), call.get("reduce"))
    if reduce not in REDUCTIONS:
        raise UnsupportedCard(f"scatter_reduce {reduce!r}: {', '.join(REDUCTIONS)} are templated")
    include_self = call.get("include_self", True)
    out = card.outputs[0]
    dtypes = {x.spec.dtype, source.spec.dtype if source else out.dtype}
    writable = (*FLOATS, *INTEGERS, "bool") if reduce == "assign" else (*FLOATS, *INTEGERS)
    if len(card.outputs) != 1 or out.dtype not in writable or dtypes != {out.dtype}:
        raise UnsupportedCard(f"scatter {reduce} of {sorted(dtypes)} into {out.dtype}: one float or integer dtype "
                              "(or bool, written) is templated")
    if x.spec.shape != out.shape or (in_place and x.spec.stride != out.stride) or overlaps_itself(out.shape,
                                                                                                  out.stride):
        raise UnsupportedCard(f"scatter into {out.shape} stride {out.stride}: self is laid out unlike its output, "
                              "or elements share an address")
    ndim, walk = len(out.shape), index.spec
    dim = call.get("dim")
    if index.spec.dtype != "int64" or len(walk.shape) != ndim or ndim == 0 or isinstance(dim, bool) or \
            not isinstance(dim, int) or not -ndim <= dim < ndim:
        raise UnsupportedCard(f"scatter by a {walk.dtype} index of {walk.shape} along dim {dim!r} of {out.shape}")
    if not walk.numel:
        raise UnsupportedCard("scatter with nothing to reduce")
    summary = (f"{card.op} ({reduce}{'' if include_self else ', include_self=False'}) of {walk.shape} sources into "
               f"{out.shape} {out.dtype} along dim {dim % ndim}{' in place' if in_place else ''}")
    return ScatterReducePlan(summary=summary, inputs=tuple(card.inputs), outputs=tuple(card.outputs),
                             self_index=x.index, index=index.index, source=source.index if source else -1,
                             dim=dim % ndim, in_place=in_place, reduce=str(reduce), include_self=bool(include_self),
                             value=_value(call.get("value"), out.dtype) if source is None else "")


def _value(value: Any, dtype: str) -> str:
    """The C literal of scatter's one value as a ``dtype`` element holds it (eager converts it so)."""
    if dtype == "bool" and isinstance(value, (bool, int, float)):
        return "(T)1" if value else "(T)0"  # eager's value != 0: NaN is true
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnsupportedCard(f"scatter by the value {value!r}: a real number is templated")
    if dtype in INTEGERS:
        if not isinstance(value, int):
            raise UnsupportedCard(f"scatter of {dtype} by the float {value!r}: eager truncates it; not templated")
        return f"(T)(int64_t)({wrap_int(value, dtype)}LL)"
    return repr(float(value)) if dtype == "float64" else cxx.cfloat(float(value))


def _columns(plan: ScatterReducePlan) -> tuple[list[int], list[int]]:
    """The index's shape without ``dim`` (the columns), and its row-major strides."""
    shape = [n for d, n in enumerate(plan.walk.shape) if d != plan.dim]
    return shape, row_major_strides(shape)


def _offset_at(spec: TensorSpec, plan: ScatterReducePlan, along: str) -> str:
    """C offset in ``spec`` of column ``c``'s element with ``dim``'s coordinate ``along``."""
    coords = _column_coords(plan)
    terms = [f"({along}) * {spec.stride[plan.dim]}LL"]
    terms += [f"({coord}) * {stride}LL" for coord, stride in
              zip(coords, [s for d, s in enumerate(spec.stride) if d != plan.dim], strict=True) if stride]
    return " + ".join(terms)


def _column_coords(plan: ScatterReducePlan) -> list[str]:
    """C expressions of column ``c``'s coordinates (every dim but ``dim``), from ``c``."""
    shape, strides = _columns(plan)
    return [f"((c / {stride}LL) % {size}LL)" for size, stride in zip(shape, strides, strict=True)]


def _identity(plan: ScatterReducePlan) -> str:
    """The value a reached element starts from where ``include_self=False``, in the accumulator type."""
    if plan.reduce in ("sum", "mean"):
        return "(A)0"
    if plan.out.dtype in FLOATS:
        return "(A)(-INFINITY)" if plan.reduce == "amax" else "(A)INFINITY"
    bound = {"int64": ("INT64_MIN", "INT64_MAX"), "int32": ("INT32_MIN", "INT32_MAX"), "int8": ("-128", "127"),
             "uint8": ("0", "255")}[plan.out.dtype]
    return f"(A)({bound[0] if plan.reduce == 'amax' else bound[1]})"


def _finish(plan: ScatterReducePlan) -> str:
    """C statement writing output element ``e`` (at offset ``at``) from its accumulator: the float sum
    (half dtypes) or the output itself, divided by its count for a mean."""
    value = "acc[e]" if plan.half else "y[at]"
    if plan.reduce == "mean":
        count = "(cnt[e] > 0 ? cnt[e] : 1)"  # reached by no source (include_self=False): self, divided by 1
        if plan.half:
            value = f"kf_to_f32(kf_from_f32<T>(acc[e])) / (float){count}"  # eager divides the rounded sum
        elif plan.out.dtype in INTEGERS:
            value = f"kf_floor_div((int64_t)y[at], (int64_t){count})"
        else:
            value = f"y[at] / (T){count}"
    return f"y[at] = {'kf_from_f32<T>(' + value + ')' if plan.half else '(T)(' + value + ')'};"


def _render_cpu(plan: ScatterReducePlan, knobs: Knobs) -> str:
    threads = int(knobs["threads"])
    width = f" num_threads({threads})" if threads else ""
    pragma = f"#pragma omp parallel for schedule(static){width}\n" if threads != 1 else ""
    size, numel = plan.out.shape[plan.dim], plan.out.numel
    columns = math.prod(_columns(plan)[0])
    rows = row_major_strides(plan.out.shape)
    sums = TensorSpec(shape=plan.out.shape, stride=rows, dtype="float32")
    accumulate_in_sums = plan.half
    acc_spec = sums if accumulate_in_sums else plan.out
    slots = numel * (int(accumulate_in_sums) + int(plan.counted))
    workspace = cxx.Workspace("kf_scratch", "float", slots) if slots else None
    x = plan.out if plan.in_place else plan.inputs[plan.self_index]
    at_out = cxx.linear_offset("e", plan.out.shape, plan.out.stride)
    accumulator = "float" if plan.half else "T"
    combine = _INTEGER_SUM if plan.out.dtype in INTEGERS and plan.reduce in ("sum", "mean") else _COMBINE[plan.reduce]
    to_acc = "kf_to_f32" if plan.half else "(A)"
    first = f"if (cnt[t] == 0) *p = {_identity(plan)}; " if not plan.include_self else ""
    count = "++cnt[t]; " if plan.counted else ""
    scratch = workspace.take(len(plan.outputs)) if workspace else ""
    acc_pointer = "(A *)kf_scratch" if accumulate_in_sums else "(A *)outputs[0].data"
    cnt_pointer = f"(int32_t *)(kf_scratch + {numel * int(accumulate_in_sums)}LL)" if plan.counted else "0"
    constant = f"kf_from_f32<T>({plan.value})" if plan.half else f"(T)({plan.value})"
    read = (f"{to_acc}({constant})" if plan.value else
            f"{to_acc}(((const T *)inputs[{plan.source}].data)[{_offset_at(plan.inputs[plan.source], plan, 'i')}])")
    body = f"""  const int64_t *index = (const int64_t *)inputs[{plan.index}].data;
  for (int64_t c = 0; c < {columns}LL; ++c)  /* every index checked before anything is written */
    for (int64_t i = 0; i < {plan.walk.shape[plan.dim]}LL; ++i) {{
      const int64_t n = index[{_offset_at(plan.walk, plan, 'i')}];
      if (n < 0 || n >= {size}LL) return {cxx.STATUS_BAD_INPUT};
    }}
{scratch}  const T *x = (const T *)inputs[{plan.self_index}].data; T *y = (T *)outputs[0].data; (void)x;
  A *acc = {acc_pointer}; int32_t *cnt = {cnt_pointer}; (void)cnt;
{pragma}  for (int64_t e = 0; e < {numel}LL; ++e) {{  /* start from self */
    const int64_t at = {at_out}; (void)at;
    {_start(plan, accumulate_in_sums, x)}
  }}
{pragma}  for (int64_t c = 0; c < {columns}LL; ++c)  /* each column in order: eager's order */
    for (int64_t i = 0; i < {plan.walk.shape[plan.dim]}LL; ++i) {{
      const int64_t n = index[{_offset_at(plan.walk, plan, 'i')}];
      const int64_t t = {_offset_at(sums, plan, 'n')};  /* the target's row-major number */
      A *p = acc + ({_offset_at(acc_spec, plan, 'n')}); (void)t;
      const A v = {read};
      {first}{count}{combine}
    }}
{_finish_loop(plan, pragma)}"""
    launch = cxx.cpu_kf_launch(plan.inputs, plan.outputs, body, workspace)
    return f"""{cxx.CPU_PRELUDE}
/* {plan.summary}; {knobs} */
{element_types(plan.out.dtype, "int64", "cpu")}typedef {accumulator} A;
static inline int64_t kf_floor_div(int64_t a, int64_t b) {{
  int64_t q = a / b; if ((a % b != 0) && ((a % b < 0) != (b < 0))) --q; return q;
}}
{launch}"""


def _start(plan: ScatterReducePlan, in_sums: bool, x: TensorSpec) -> str:
    """Statements setting element ``e``'s accumulator (and count) from self before any source."""
    read = f"x[{cxx.linear_offset('e', x.shape, x.stride)}]" if not plan.in_place else "y[at]"
    count = f"cnt[e] = {1 if plan.include_self else 0};" if plan.counted else ""
    if in_sums:
        value = f"kf_to_f32({read})" if plan.half else f"(A){read}"
        return f"acc[e] = {value}; {count}"
    return f"{'' if plan.in_place else f'y[at] = {read};'} {count}"


def _finish_loop(plan: ScatterReducePlan, pragma: str) -> str:
    """The pass writing the output from the float sums, or dividing it into means (none for the rest)."""
    if not plan.half and plan.reduce != "mean":
        return ""
    return (f"{pragma}  for (int64_t e = 0; e < {plan.out.numel}LL; ++e) {{\n"
            f"    const int64_t at = {cxx.linear_offset('e', plan.out.shape, plan.out.stride)};\n"
            f"    {_finish(plan)}\n  }}\n")


def _cuda_number(plan: ScatterReducePlan, expr: str) -> str:
    """C expression comparing and dividing a T value as eager's cuda kernels do (halves in float)."""
    return f"kf_to_f32({expr})" if plan.half else expr


def _cuda_constant(plan: ScatterReducePlan, literal: str) -> str:
    """C expression of a number held as a T."""
    return f"kf_from_f32<T>({literal})" if plan.half else f"(T)({literal})"


def _cuda_small(plan: ScatterReducePlan, k: int) -> str:
    """C expression of the small integer ``k`` held as a T."""
    return _cuda_constant(plan, f"{k}.0f" if plan.half else str(k))


def _cuda_identity(plan: ScatterReducePlan) -> str:
    """What eager's cuda ``scatter_reduce`` writes at the reached elements where ``include_self=False``."""
    if plan.reduce in ("sum", "mean"):
        return _cuda_small(plan, 0)
    if plan.half:
        return _cuda_constant(plan, "-INFINITY" if plan.reduce == "amax" else "INFINITY")
    return "(T)" + _identity(plan).removeprefix("(A)")


def _takes_source(plan: ScatterReducePlan, current: str) -> str:
    """C condition under which a max or min replaces the T value ``current`` by source ``v``: eager's
    ``safe_max`` / ``safe_min`` (a NaN already there stays, a NaN source wins, a tie takes the source)."""
    now, source = _cuda_number(plan, current), _cuda_number(plan, "v")
    beaten = f"{now} < {source}" if plan.reduce == "amin" else f"{source} < {now}"
    return f"!({now} != {now}) && !({beaten})"


def _cuda_combine(plan: ScatterReducePlan) -> str:
    """C statement reducing source ``v`` into ``*p``: an add rounded to T, a max or min as eager's, or a write."""
    if plan.reduce in ("sum", "mean"):
        return f"*p = {add_rounded(plan.out.dtype, '*p', 'v')};"
    if plan.reduce in ("amax", "amin"):
        return f"if ({_takes_source(plan, '*p')}) *p = v;"
    return "*p = v;"  # assign: the last source of the column wins


def _cuda_atomics(plan: ScatterReducePlan) -> str:
    """Device code of the ``sources`` walk: ``kf_combine(p, v)`` reducing ``v`` into ``*p`` whatever
    the order, with eager's NaN rules for a max or min (a compare-and-swap loop on floats)."""
    dtype, reduce = plan.out.dtype, plan.reduce
    head = "__device__ __forceinline__ void kf_combine(T *p, T v) {\n"
    if reduce == "assign":
        return head + "  *p = v;  /* every source writes the same value */\n}\n"
    if dtype in ("int32", "int64"):
        word = "int" if dtype == "int32" else "long long"
        op = {"sum": "atomicAdd", "mean": "atomicAdd", "amax": "atomicMax", "amin": "atomicMin"}[reduce]
        if op == "atomicAdd":  # unsigned: wraps as eager's two's complement adds do
            word = "unsigned int" if dtype == "int32" else "unsigned long long"
        return head + f"  {op}(({word} *)p, ({word})v);\n}}\n"
    bits, to_bits, from_bits = _ATOMIC_BITS[dtype]
    return head + f"""  {bits} *word = ({bits} *)p;
  {bits} old = *word, assumed;
  do {{
    assumed = old;
    const T cur = {from_bits}(assumed);
    if (!({_takes_source(plan, "cur")})) return;  /* what is there stays */
    old = atomicCAS(word, assumed, ({bits}){to_bits}(v));
  }} while (assumed != old);
}}
"""


def _cuda_mean(plan: ScatterReducePlan) -> str:
    """C statement dividing output element ``y[at]`` by its count ``c`` (0 counts as 1), as ``div_``."""
    count = _cuda_number(plan, "c")
    if plan.out.dtype in INTEGERS:
        return "y[at] = (T)kf_floor_div((int64_t)y[at], c == 0 ? (int64_t)1 : (int64_t)c);"
    one = "1.0f" if plan.half else "(T)1"
    quotient = f"{_cuda_number(plan, 'y[at]')} / ({count} == 0 ? {one} : {count})"
    return f"y[at] = {_cuda_constant(plan, quotient) if plan.half else quotient};"


def _cuda_walk(plan: ScatterReducePlan, block: int, by_sources: bool) -> str:
    """The head of a kernel's walk over the sources, to the pointer ``p`` at source ``(c, i)``'s
    target (two braces left open): a thread per column walking it, or a thread per source."""
    total, length = plan.walk.numel, plan.walk.shape[plan.dim]
    columns = total // length
    target = (f"      const int64_t n = index[{_offset_at(plan.walk, plan, 'i')}];\n"
              f"      if (n < 0 || n >= {plan.out.shape[plan.dim]}LL) __trap();  /* eager's device assertion */\n"
              f"      T *p = out + ({_offset_at(plan.out, plan, 'n')});\n")
    if by_sources:  # neighbouring threads take neighbouring columns: the same row of sources
        return (f"{cuda_grid_loop(block, 'w', total)} {{\n    {{\n"
                f"      const int64_t c = w % {columns}LL, i = w / {columns}LL;\n{target}")
    return f"{cuda_grid_loop(block, 'c', columns)} {{\n    for (int64_t i = 0; i < {length}LL; ++i) {{\n{target}"


def _cuda_kernels(plan: ScatterReducePlan, block: int, by_sources: bool) -> str:
    """The kernels, in launch order: the copy of self, the counts' start, the identity at the
    reached elements, the walk, the division into means (each only where the call needs it)."""
    mean = plan.reduce == "mean"
    rows = TensorSpec(shape=plan.out.shape, stride=row_major_strides(plan.out.shape), dtype=plan.out.dtype)
    read = (_cuda_constant(plan, plan.value) if plan.value else
            f"src[{_offset_at(plan.inputs[plan.source], plan, 'i')}]")
    counted = f"cnt[{_offset_at(rows, plan, 'n')}]"
    if by_sources:
        tally = f"\n      kf_combine(&{counted}, (T)1);" if mean else ""
        combine, order = "kf_combine(p, v);", "each source by its own thread: an order-free reduction"
    else:
        tally = f"\n      {counted} = {add_rounded(plan.out.dtype, counted, _cuda_small(plan, 1))};" if mean else ""
        combine, order = _cuda_combine(plan), "the column in order: the same result on every call"
    kernels = "" if plan.in_place else cuda_copy_kernel(plan.out, plan.inputs[plan.self_index], block)
    if by_sources:
        kernels += _cuda_atomics(plan)
    at = cxx.linear_offset("e", plan.out.shape, plan.out.stride)
    every = f"{cuda_grid_loop(block, 'e', plan.out.numel)} {{\n    const int64_t at = {at}; (void)at;\n"
    walk = _cuda_walk(plan, block, by_sources)
    if mean:
        kernels += f"""__global__ void __launch_bounds__({block}) kf_count_start(T *__restrict__ cnt) {{
  {every}    cnt[e] = {_cuda_small(plan, int(plan.include_self))};
  }}
}}
"""
    if not plan.include_self:
        kernels += f"""__global__ void __launch_bounds__({block})
kf_start(const int64_t *__restrict__ index, T *__restrict__ out) {{
  {walk}      *p = {_cuda_identity(plan)};  /* every write to one element is the same value */
    }}
  }}
}}
"""
    kernels += f"""__global__ void __launch_bounds__({block})
kf_scatter(const int64_t *__restrict__ index, const T *__restrict__ src, T *__restrict__ out, T *__restrict__ cnt) {{
  (void)src; (void)cnt;
  {walk}      const T v = {read};  /* {order} */
      {combine}{tally}
    }}
  }}
}}
"""
    if mean:
        kernels += f"""__global__ void __launch_bounds__({block})
kf_mean(const T *__restrict__ cnt, T *__restrict__ y) {{
  {every}    const T c = cnt[e];
    {_cuda_mean(plan)}
  }}
}}
"""
    return kernels


def _cuda_launches(plan: ScatterReducePlan, block: int, waves: int, device: DeviceInfo, by_sources: bool) -> str:
    """The launches of :func:`_cuda_kernels`' kernels on stream ``s``."""
    mean, numel = plan.reduce == "mean", plan.out.numel
    walkers = plan.walk.numel if by_sources else plan.walk.numel // plan.walk.shape[plan.dim]
    grid = cuda_grid(device, block, waves, cxx.ceil_div(numel, block))
    walk_grid = cuda_grid(device, block, waves, cxx.ceil_div(walkers, block))
    source = "(const T *)0" if plan.value else f"(const T *)inputs[{plan.source}].data"
    launches = "" if plan.in_place else (
        f"  kf_copy<<<{grid}, {block}, 0, s>>>((const T *)inputs[{plan.self_index}].data, out);\n")
    if mean:
        launches += f"  kf_count_start<<<{grid}, {block}, 0, s>>>(kf_counts);\n"
    if not plan.include_self:
        launches += f"  kf_start<<<{walk_grid}, {block}, 0, s>>>(index, out);\n"
    counts = "kf_counts" if mean else "(T *)0"
    launches += f"  kf_scatter<<<{walk_grid}, {block}, 0, s>>>(index, {source}, out, {counts});\n"
    if mean:
        launches += f"  kf_mean<<<{grid}, {block}, 0, s>>>(kf_counts, out);\n"
    return launches


def _render_cuda(plan: ScatterReducePlan, knobs: Knobs, device: DeviceInfo) -> str:
    block, waves = int(knobs["threads_per_block"]), int(knobs["waves"])
    by_sources = knobs.get("walk") == "sources"
    counts = cxx.cuda_scratch("kf_counts", "T", plan.out.numel) if plan.reduce == "mean" else None
    kernels, launches = _cuda_kernels(plan, block, by_sources), _cuda_launches(plan, block, waves, device, by_sources)
    return f"""{cxx.CUDA_PRELUDE}
/* {plan.summary}; {knobs} */
{element_types(plan.out.dtype, "int64", "cuda")}{counts.export() if counts else ""}
__device__ __forceinline__ int64_t kf_floor_div(int64_t a, int64_t b) {{
  int64_t q = a / b; if ((a % b != 0) && ((a % b < 0) != (b < 0))) --q; return q;
}}
{kernels}extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(plan.inputs, plan.outputs, workspace=counts)}
{counts.take(len(plan.outputs)) if counts else ""}  cudaStream_t s = (cudaStream_t)stream;
  const int64_t *index = (const int64_t *)inputs[{plan.index}].data;
  T *out = (T *)outputs[0].data;
{launches}{cxx.cuda_launch_epilogue()}
}}
"""
