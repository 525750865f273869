"""2-d pooling over NCHW planes: adaptive average pooling to any size, average and max pooling.

Each output is computed from its window of the input plane by one thread (cuda) or loop
iteration (cpu). Adaptive bins follow PyTorch: rows ``floor(o * in / out)`` to
``ceil((o + 1) * in / out)``; pooling windows start at ``o * stride - padding`` (with dilation
for max pooling, where NaN propagates as in PyTorch); average pooling divides as PyTorch does:
by the window clipped to the padded plane with ``count_include_pad``, to the plane without, or by
the override. Global average pooling (output 1) goes to the row engine instead, which reduces a
plane with all threads of a warp or block.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_service.models import DeviceDescription
from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import is_contiguous
from agent_service.offline.plan import cpu_thread_choices, cuda_grid_limit
from kforge_domain.card import TensorSpec


@dataclass(frozen=True)
class AdaptivePoolPlan:
    family: str
    summary: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    x: int
    planes: int
    in_h: int
    in_w: int
    out_h: int
    out_w: int
    kind: str = "adaptive_avg"  # or "max", "avg"
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    count_include_pad: bool = True  # avg: padded positions count in the divisor
    divisor: int | None = None  # avg: divisor_override

    def __post_init__(self) -> None:
        x, y = self.inputs[self.x], self.outputs[0]
        if not is_contiguous(x) or not is_contiguous(y):
            raise UnsupportedCard("adaptive pooling is templated for contiguous (NCHW) input and output only")
        if x.dtype not in cxx.FLOAT_DTYPES or y.dtype not in cxx.FLOAT_DTYPES:
            raise UnsupportedCard("only float32, float16 and bfloat16 pooling is templated")

    def knob_space(self, backend: str, device: DeviceDescription) -> KnobSpace:
        if backend == "cuda":
            return KnobSpace({"threads_per_block": (256, 128, 512)})
        return KnobSpace({"threads": cpu_thread_choices(device), "schedule": ("static", "dynamic")})

    def _avg_loop(self) -> str:
        """PyTorch's windows: clipped to the padded plane for the divisor, to the plane for the sum;
        a window wholly in the padding (possible with ceil_mode) writes 0."""
        ih, iw = self.in_h, self.in_w
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        if self.divisor is not None:
            divisor = f"{self.divisor}.0f"
        elif self.count_include_pad:
            divisor = "(float)((h1p - h0) * (w1p - w0))"
        else:
            divisor = "(float)((h1 - h0c) * (w1 - w0c))"
        return (f"    const int64_t h0 = oh * {sh}LL - {ph}LL, w0 = ow * {sw}LL - {pw}LL;\n"
                f"    const int64_t h1p = h0 + {kh}LL < {ih + ph}LL ? h0 + {kh}LL : {ih + ph}LL;\n"
                f"    const int64_t w1p = w0 + {kw}LL < {iw + pw}LL ? w0 + {kw}LL : {iw + pw}LL;\n"
                "    const int64_t h0c = h0 > 0 ? h0 : 0, w0c = w0 > 0 ? w0 : 0;\n"
                f"    const int64_t h1 = h1p < {ih}LL ? h1p : {ih}LL, w1 = w1p < {iw}LL ? w1p : {iw}LL;\n"
                f"    const TX *plane = x + p * {ih * iw}LL;\n    float s = 0.0f;\n"
                f"    for (int64_t h = h0c; h < h1; ++h)\n      for (int64_t w = w0c; w < w1; ++w) "
                f"s += kf_to_f32(plane[h * {iw}LL + w]);\n"
                f"    y[i] = kf_from_f32<TY>(h0c >= h1 || w0c >= w1 ? 0.0f : s / {divisor});\n")

    def _bin_loop(self) -> str:
        ih, iw, oh, ow = self.in_h, self.in_w, self.out_h, self.out_w
        if self.kind == "avg":
            return self._avg_loop()
        if self.kind == "max":
            (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel, self.stride, self.padding, self.dilation
            return (f"    const TX *plane = x + p * {ih * iw}LL;\n    float m = -INFINITY;\n"
                    f"    for (int64_t a = 0; a < {kh}LL; ++a) {{\n"
                    f"      const int64_t h = oh * {sh}LL - {ph}LL + a * {dh}LL;\n"
                    f"      if (h < 0 || h >= {ih}LL) continue;\n"
                    f"      for (int64_t b = 0; b < {kw}LL; ++b) {{\n"
                    f"        const int64_t w = ow * {sw}LL - {pw}LL + b * {dw}LL;\n"
                    f"        if (w < 0 || w >= {iw}LL) continue;\n"
                    f"        const float v = kf_to_f32(plane[h * {iw}LL + w]);\n"
                    "        m = (v > m || v != v) ? v : m;\n      }\n    }\n"
                    "    y[i] = kf_from_f32<TY>(m);\n")
        return (f"    const int64_t h0 = (oh * {ih}LL) / {oh}LL, h1 = ((oh + 1) * {ih}LL + {oh - 1}LL) / {oh}LL;\n"
                f"    const int64_t w0 = (ow * {iw}LL) / {ow}LL, w1 = ((ow + 1) * {iw}LL + {ow - 1}LL) / {ow}LL;\n"
                f"    const TX *plane = x + p * {ih * iw}LL;\n    float s = 0.0f;\n"
                f"    for (int64_t h = h0; h < h1; ++h)\n      for (int64_t w = w0; w < w1; ++w) "
                f"s += kf_to_f32(plane[h * {iw}LL + w]);\n"
                f"    y[i] = kf_from_f32<TY>(s / (float)((h1 - h0) * (w1 - w0)));\n")

    def render(self, backend: str, knobs: Knobs, device: DeviceDescription) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        tx = cxx.element_type(self.inputs[self.x].dtype, backend)
        ty = cxx.element_type(self.outputs[0].dtype, backend)
        total = self.planes * self.out_h * self.out_w
        index = (f"    const int64_t p = i / {self.out_h * self.out_w}LL, oh = (i / {self.out_w}LL) % {self.out_h}LL,"
                 f" ow = i % {self.out_w}LL;\n")
        if backend == "cuda":
            block = int(knobs["threads_per_block"])
            grid = max(1, min(cxx.ceil_div(total, block), cuda_grid_limit(device, block)))
            return f"""{cxx.CUDA_PRELUDE}
typedef {tx} TX;
typedef {ty} TY;
/* {self.summary} */
__global__ void __launch_bounds__({block}) kf_pool(const TX *__restrict__ x, TY *__restrict__ y) {{
  for (int64_t i = (int64_t)blockIdx.x * {block} + threadIdx.x; i < {total}LL; i += (int64_t)gridDim.x * {block}) {{
{index}{self._bin_loop()}  }}
}}

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {{
{cxx.guard(self.inputs, self.outputs)}
  kf_pool<<<{grid}, {block}, 0, (cudaStream_t)stream>>>((const TX *)inputs[{self.x}].data, (TY *)outputs[0].data);
{cxx.cuda_launch_epilogue()}
}}
"""
        threads = f" num_threads({knobs['threads']})" if knobs["threads"] else ""
        launch = cxx.cpu_kf_launch(self.inputs, self.outputs,
                                   f"  kf_pool((const TX *)inputs[{self.x}].data, (TY *)outputs[0].data);\n")
        return f"""{cxx.CPU_PRELUDE}
typedef {tx} TX;
typedef {ty} TY;
/* {self.summary} */
static void kf_pool(const TX *__restrict x, TY *__restrict y) {{
#pragma omp parallel for{threads} schedule({knobs["schedule"]})
  for (int64_t i = 0; i < {total}LL; ++i) {{
{index}{self._bin_loop()}  }}
}}

{launch}"""
