"""col2im (``F.fold``): sliding blocks summed back into an image, one output element per thread.

Each block column of ``[N,] C*kh*kw, L`` belongs at one place of ``[N,] C, H, W``; where blocks
overlap their values add up. Rather than scatter each column (eager's cpu loop), the kernel gathers:
every output element walks the kernel offsets ``(ki, kj)`` in order, finds the one block whose
offset lands on it, and adds that column's value, so no two threads write one element and the
result does not depend on scheduling. The adds come in eager's cpu order (its columns run ``c``,
then ``ki``, then ``kj``), each rounded to the dtype as eager's are, so a cpu result is eager's bit
for bit; on cuda eager's own kernel gathers too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard, tensor_argument
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.ops_gather import int_pair
from agent_service.offline.ops_scatter import cuda_grid_loop
from agent_service.offline.plan import cpu_thread_choices, cuda_grid
from kforge_domain.card import OperatorCard, TensorSpec
from kforge_domain.device import DeviceInfo


@dataclass(frozen=True)
class FoldPlan:
    """col2im of input ``x`` into the card's output, with the kernel geometry fixed."""

    summary: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    x: int
    kernel: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int]
    stride: tuple[int, int]
    blocks: tuple[int, int]  # how many block positions fit along the height and the width

    @property
    def family(self) -> str:
        return "col2im"

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cpu":
            return KnobSpace({"threads": cpu_thread_choices(device, self.outputs)})
        return KnobSpace({"threads_per_block": (256, 128, 512), "waves": (4, 0, 1)})

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        out = self.outputs[0]
        body = _element(self, backend)
        if backend == "cpu":
            threads = int(knobs["threads"])
            width = f" num_threads({threads})" if threads else ""
            pragma = f"#pragma omp parallel for schedule(static){width}\n" if threads != 1 else ""
            launch = cxx.cpu_kf_launch(self.inputs, self.outputs,
                                       f"  kf_fold((const T *)inputs[{self.x}].data, (T *)outputs[0].data);\n")
            return f"""{cxx.CPU_PRELUDE}
/* {self.summary}; {knobs} */
{_types(self, backend)}
static void kf_fold(const T *__restrict x, T *__restrict y) {{
{pragma}  for (int64_t e = 0; e < {out.numel}LL; ++e) {{
{body}
  }}
}}
{launch}"""
        block, waves = int(knobs["threads_per_block"]), int(knobs["waves"])
        grid = cuda_grid(device, block, waves, cxx.ceil_div(out.numel, block))
        return f"""{cxx.CUDA_PRELUDE}
/* {self.summary}; {knobs} */
{_types(self, backend)}
__global__ void __launch_bounds__({block}) kf_fold(const T *__restrict__ x, T *__restrict__ y) {{
  {cuda_grid_loop(block, "e", out.numel)} {{
{body}
  }}
}}
extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(self.inputs, self.outputs)}
  kf_fold<<<{grid}, {block}, 0, (cudaStream_t)stream>>>((const T *)inputs[{self.x}].data, (T *)outputs[0].data);
{cxx.cuda_launch_epilogue()}
}}
"""


def _types(plan: FoldPlan, backend: str) -> str:
    dtype = plan.outputs[0].dtype
    accumulator = "double" if dtype == "float64" else "float"
    return f"typedef {cxx.storage_type(dtype, backend)} T;\ntypedef {accumulator} A;\n"


def _element(plan: FoldPlan, backend: str) -> str:
    """Statements computing output element ``e``: its coordinates, then the adds of its blocks."""
    out, x = plan.outputs[0], plan.inputs[plan.x]
    (kh, kw), (dh, dw), (ph, pw), (sh, sw), (bh, bw) = (plan.kernel, plan.dilation, plan.padding, plan.stride,
                                                         plan.blocks)
    batched = len(out.shape) == 4
    channels, height, width = out.shape[-3:]
    half = out.dtype in ("float16", "bfloat16")
    load = "kf_to_f32(v)" if half else "(A)v"
    rounded = "kf_to_f32(kf_from_f32<T>(acc + w))" if half else "acc + w"
    store = "kf_from_f32<T>(acc)" if half else "(T)acc"
    n_term = f"n * {x.stride[0]}LL + " if batched else ""
    row, col = x.stride[-2], x.stride[-1]
    out_at = cxx.linear_offset("e", out.shape, out.stride)
    return f"""    const int64_t px = e % {width}LL, py = (e / {width}LL) % {height}LL;
    const int64_t c = (e / {width * height}LL) % {channels}LL, n = e / {width * height * channels}LL; (void)n;
    A acc = 0;
    for (int64_t ki = 0; ki < {kh}LL; ++ki) {{
      const int64_t ty = py + {ph}LL - ki * {dh}LL;
      if (ty < 0 || ty % {sh}LL != 0 || ty / {sh}LL >= {bh}LL) continue;
      for (int64_t kj = 0; kj < {kw}LL; ++kj) {{
        const int64_t tx = px + {pw}LL - kj * {dw}LL;
        if (tx < 0 || tx % {sw}LL != 0 || tx / {sw}LL >= {bw}LL) continue;
        const int64_t block = (ty / {sh}LL) * {bw}LL + tx / {sw}LL;
        const T v = x[{n_term}(c * {kh * kw}LL + ki * {kw}LL + kj) * {row}LL + block * {col}LL];
        const A w = {load};
        acc = {rounded};  /* rounded to the dtype after each add, as eager's += */
      }}
    }}
    y[{out_at}] = {store};"""


def col2im_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> FoldPlan:
    """col2im.default of a ``[N,] C*kh*kw, L`` float input into ``[N,] C, H, W``."""
    x = tensor_argument(call, "self")
    out = card.outputs[0]
    params = [call.get(name) for name in ("output_size", "kernel_size", "dilation", "padding", "stride")]
    pairs: list[list[int]] = [p for p in params if int_pair(p)]
    if len(pairs) != len(params) or len(x.spec.shape) not in (2, 3) or x.spec.dtype != out.dtype or \
            out.dtype not in ("float32", "float64", "float16", "bfloat16"):
        raise UnsupportedCard(f"col2im of {x.spec.dtype} {x.spec.shape} with {params} into {out.dtype} is not "
                              "templated")
    (height, width), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = pairs
    bh = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1 if sh > 0 else 0
    bw = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1 if sw > 0 else 0
    batch = x.spec.shape[:-2]
    channels = x.spec.shape[-2] // (kh * kw) if kh > 0 and kw > 0 else 0
    if min(kh, kw, dh, dw, sh, sw) < 1 or min(ph, pw) < 0 or bh < 1 or bw < 1 or x.spec.shape[-1] != bh * bw or \
            x.spec.shape[-2] != channels * kh * kw or out.shape != [*batch, channels, height, width] or not out.numel:
        raise UnsupportedCard(f"col2im of {x.spec.shape} with {params} into {out.shape}: eager raises or it is empty")
    return FoldPlan(summary=f"{card.op} of {x.spec.shape} {out.dtype} into {out.shape}", inputs=tuple(card.inputs),
                    outputs=tuple(card.outputs), x=x.index, kernel=(kh, kw), dilation=(dh, dw), padding=(ph, pw),
                    stride=(sh, sw), blocks=(bh, bw))
