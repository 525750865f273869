"""2-d pooling over planes: adaptive average pooling to any size, average and max pooling, and
bilinear resizing (each output from four inputs, eager's formula), bicubic resizing (sixteen inputs,
eager's cubic convolution weights).

Each output is computed from its window of the input plane by one thread (cuda) or loop
iteration (cpu), in the output's memory order: plane by plane for an NCHW output, channel by
channel within each pixel for a channels-last one (as eager writes a channels-last input's
result), so neighbouring threads write, and for a channels-last input read, neighbouring
addresses. The input is read at its own strides (a channels-last or sliced tensor as it is).

On cuda, average and max windows of fixed size may be unrolled, so a thread issues all of its
window's loads before it adds any (the clipped loop adds in the same order),
and indices may be 32-bit where the tensors allow it. On the H200, for a 3x3 stride-2 average
pool over 256 MiB, unrolling took the kernel from 211 to 94 µs; 64-bit indices beat 32-bit ones
(94–97 against 112 µs), so they are tried first.

Bilinear resizing follows PyTorch's cuda kernel: the source coordinate ``scale * (o + 0.5) - 0.5``
clamped at 0 (``scale * o`` with ``align_corners``), truncated to the first tap, the second one
row or column further unless at the edge, weights from the fraction, all in float; the scale is
eager's own (``1 / scale_factor`` where the call gives one, else ``in / out``).

Adaptive bins follow PyTorch: rows ``floor(o * in / out)`` to ``ceil((o + 1) * in / out)``;
pooling windows start at ``o * stride - padding`` (with dilation for max pooling, where NaN
propagates as in PyTorch); average pooling divides as PyTorch does: by the window clipped to the
padded plane with ``count_include_pad``, to the plane without, or by the override. Global average
pooling (output 1) goes to the row engine instead, which reduces a plane with all threads of a
warp or block.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.group_norm_nhwc import is_channels_last
from agent_service.offline.knobs import Knobs, KnobSpace
from agent_service.offline.layout import is_contiguous
from agent_service.offline.plan import cpu_thread_choices, cuda_grid_limit
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo

MAX_UNROLLED_WINDOW = 64  # window elements a cuda thread unrolls; larger windows keep the loop


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
    # or "max", "avg", "bilinear", "bicubic", "linear" (1-D resizing: in_h and out_h are 1)
    kind: str = "adaptive_avg"
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    count_include_pad: bool = True  # avg: padded positions count in the divisor
    divisor: int | None = None  # avg: divisor_override
    # bilinear: C float expressions of the source scale per dim (eager's area_pixel_compute_scale)
    scales: tuple[str, str] = ("1.0f", "1.0f")
    align_corners: bool = False

    def __post_init__(self) -> None:
        x, y = self.inputs[self.x], self.outputs[0]
        if x.dtype not in cxx.FLOAT_DTYPES or y.dtype not in cxx.FLOAT_DTYPES:
            raise UnsupportedCard("only float32, float16 and bfloat16 pooling is templated")
        if is_contiguous(x) and is_contiguous(y):
            return
        if self.kind == "linear" or len(x.shape) != 4 or len(y.shape) != 4:
            raise UnsupportedCard(f"pooling of a {x.stride} input into a {y.stride} output: other layouts than "
                                  "contiguous are templated for 4-d (N, C, H, W) planes")
        if not (is_contiguous(y) or is_channels_last(y)):
            raise UnsupportedCard(f"pooling into an output of stride={y.stride}: only NCHW and channels-last are "
                                  "templated")

    @property
    def _strided(self) -> bool:
        """The input read at its own strides, the output in its memory order (else both NCHW planes)."""
        return not (is_contiguous(self.inputs[self.x]) and is_contiguous(self.outputs[0]))

    @property
    def _pixels_first(self) -> bool:
        """A channels-last output, walked channel by channel within each pixel."""
        return self._strided and not is_contiguous(self.outputs[0])

    def _plane(self, n: str) -> str:
        """The C expression of the first element of output ``i``'s input plane."""
        if not self._strided:
            return f"x + p * {self.in_h * self.in_w}{n}"
        stride = self.inputs[self.x].stride
        return f"x + nb * {stride[0]}{n} + ch * {stride[1]}{n}"

    def _row(self, h: str, n: str) -> str:
        """The C expression of row ``h``'s offset within a plane."""
        return f"{h} * {self.inputs[self.x].stride[2] if self._strided else self.in_w}{n}"

    def _col(self, w: str, n: str) -> str:
        """The C expression of column ``w``'s offset within a row."""
        return f"{w} * {self.inputs[self.x].stride[3]}{n}" if self._strided else w

    def _at(self, h: str, w: str, n: str) -> str:
        return f"{self._row(h, n)} + {self._col(w, n)}"

    @property
    def _fits_32_bits(self) -> bool:
        # a grid-stride index passes the last output by at most the grid's size: twice the outputs
        x = self.inputs[self.x]
        reach = 1 + sum((size - 1) * abs(stride) for size, stride in zip(x.shape, x.stride, strict=True))
        return max(self.planes * self.in_h * self.in_w, reach, self.planes * self.out_h * self.out_w) < 2**30

    @property
    def _unrollable(self) -> bool:
        return self.kind in ("avg", "max") and self.kernel[0] * self.kernel[1] <= MAX_UNROLLED_WINDOW

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        if backend == "cuda":
            return KnobSpace({"threads_per_block": (256, 128, 512),
                              "unroll_window": (True, False) if self._unrollable else (False,),
                              "index_bits": (64, 32) if self._fits_32_bits else (64,)})
        return KnobSpace({"threads": cpu_thread_choices(device, (*self.inputs, *self.outputs)),
                          "schedule": ("static", "dynamic")})

    def _avg_window(self, n: str) -> tuple[str, str]:
        """PyTorch's average window of output (oh, ow): C lines placing it (``h0``, ``w0`` its start,
        ``h1p``, ``w1p`` its end in the padded plane, ``h0c``..``h1`` and ``w0c``..``w1`` clipped to
        the plane) and the C expression of its divisor."""
        ih, iw = self.in_h, self.in_w
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        if self.divisor is not None:
            divisor = f"{self.divisor}.0f"
        elif self.count_include_pad:
            divisor = "(float)((h1p - h0) * (w1p - w0))"
        else:
            divisor = "(float)((h1 - h0c) * (w1 - w0c))"
        return (f"    const IDX h0 = oh * {sh}{n} - {ph}{n}, w0 = ow * {sw}{n} - {pw}{n};\n"
                f"    const IDX h1p = h0 + {kh}{n} < {ih + ph}{n} ? h0 + {kh}{n} : {ih + ph}{n};\n"
                f"    const IDX w1p = w0 + {kw}{n} < {iw + pw}{n} ? w0 + {kw}{n} : {iw + pw}{n};\n"
                "    const IDX h0c = h0 > 0 ? h0 : 0, w0c = w0 > 0 ? w0 : 0;\n"
                f"    const IDX h1 = h1p < {ih}{n} ? h1p : {ih}{n}, w1 = w1p < {iw}{n} ? w1p : {iw}{n};\n"), divisor

    def _adaptive_bin(self, n: str) -> str:
        """C lines placing output (oh, ow)'s adaptive bin: rows ``h0``..``h1``, columns ``w0``..``w1``."""
        ih, iw, oh, ow = self.in_h, self.in_w, self.out_h, self.out_w
        return (f"    const IDX h0 = (oh * {ih}{n}) / {oh}{n}, h1 = ((oh + 1) * {ih}{n} + {oh - 1}{n}) / {oh}{n};\n"
                f"    const IDX w0 = (ow * {iw}{n}) / {ow}{n}, w1 = ((ow + 1) * {iw}{n} + {ow - 1}{n}) / {ow}{n};\n")

    def _avg_loop(self, unrolled: bool = False, n: str = "LL") -> str:
        """PyTorch's windows: clipped to the padded plane for the divisor, to the plane for the sum;
        a window wholly in the padding (possible with ceil_mode) writes 0. ``n`` is the suffix of
        index constants ("LL" for 64-bit indices, "" for 32-bit ones)."""
        ih, iw = self.in_h, self.in_w
        kh, kw = self.kernel
        bounds, divisor = self._avg_window(n)
        if unrolled:  # the window's fixed extent, each position checked against the plane
            window = (f"#pragma unroll\n    for (int a = 0; a < {kh}; ++a) {{\n      const IDX h = h0 + a;\n"
                      f"      if (h < 0 || h >= {ih}{n}) continue;\n"
                      f"#pragma unroll\n      for (int b = 0; b < {kw}; ++b) {{\n        const IDX w = w0 + b;\n"
                      f"        if (w >= 0 && w < {iw}{n}) s += kf_to_f32(plane[{self._at('h', 'w', n)}]);\n"
                      "      }\n    }\n")
        else:
            window = (f"    for (IDX h = h0c; h < h1; ++h)\n      for (IDX w = w0c; w < w1; ++w) "
                      f"s += kf_to_f32(plane[{self._at('h', 'w', n)}]);\n")
        return (f"{bounds}    const TX *plane = {self._plane(n)};\n    float s = 0.0f;\n"
                f"{window}"
                f"    y[i] = kf_from_f32<TY>(h0c >= h1 || w0c >= w1 ? 0.0f : s / {divisor});\n")

    def _bilinear(self, n: str) -> str:
        """Four taps of the input plane weighted as eager's bilinear kernel weights them; two taps
        of the row for linear resizing, as eager's linear kernel weights them."""
        ih, iw = self.in_h, self.in_w
        lines = []
        dims = (("oh", ih, self.scales[0], "h"), ("ow", iw, self.scales[1], "w"))
        for o, size, scale, name in dims[1:] if self.kind == "linear" else dims:
            if self.align_corners:
                lines.append(f"    const float {name}r = {scale} * (float){o};\n")
            else:  # eager clamps a negative source coordinate to 0
                lines.append(f"    float {name}r = {scale} * ((float){o} + 0.5f) - 0.5f;\n"
                             f"    {name}r = {name}r < 0.0f ? 0.0f : {name}r;\n")
            lines.append(f"    const IDX {name}1 = (IDX){name}r, {name}1p = {name}1 < {size - 1}{n} ? 1 : 0;\n"
                         f"    const float {name}1l = {name}r - (float){name}1, {name}0l = 1.0f - {name}1l;\n")
        if self.kind == "linear":
            return ("".join(lines) + f"    const TX *plane = x + p * {iw}{n} + w1;\n"
                    "    y[i] = kf_from_f32<TY>(w0l * kf_to_f32(plane[0]) + w1l * kf_to_f32(plane[w1p]));\n")
        right = self._col("w1p", n)
        return ("".join(lines) + f"    const TX *plane = {self._plane(n)} + {self._at('h1', 'w1', n)};\n"
                f"    const TX *below = plane + {self._row('h1p', n)};\n"
                f"    y[i] = kf_from_f32<TY>(h0l * (w0l * kf_to_f32(plane[0]) + w1l * kf_to_f32(plane[{right}]))\n"
                f"                           + h1l * (w0l * kf_to_f32(below[0]) + w1l * kf_to_f32(below[{right}])));\n")

    def _bicubic(self, n: str) -> str:
        """Sixteen taps of the input plane, clamped to it, weighted as eager's bicubic kernels weigh
        them (cubic convolution, A = -0.75): each of four rows along w, then the four rows along h.
        The source index is not clamped at 0 (eager's ``cubic=true``); its floor is kept below the
        plane's end and the fraction within [0, 1], as eager's guard_index_and_lambda does."""
        lines = []
        for o, size, scale, name in (("oh", self.in_h, self.scales[0], "h"), ("ow", self.in_w, self.scales[1], "w")):
            real = f"{scale} * (float){o}" if self.align_corners else f"{scale} * ((float){o} + 0.5f) - 0.5f"
            lines.append(
                f"    const float {name}r = {real};\n"
                f"    IDX {name}i = (IDX)floorf({name}r);\n"
                f"    {name}i = {name}i < {size - 1}{n} ? {name}i : {size - 1}{n};\n"
                f"    float {name}t = {name}r - (float){name}i;\n"
                f"    {name}t = {name}t < 0.0f ? 0.0f : ({name}t > 1.0f ? 1.0f : {name}t);\n"
                f"    float {name}c[4];\n    kf_cubic_weights({name}c, {name}t);\n"
                f"    IDX {name}x[4];\n"
                f"    for (int k = 0; k < 4; ++k) {{ const IDX at = {name}i - 1 + k; "
                f"{name}x[k] = at < 0 ? 0 : (at > {size - 1}{n} ? {size - 1}{n} : at); }}\n")
        row = " + ".join(f"wc[{j}] * kf_to_f32(r[{self._col(f'wx[{j}]', n)}])" for j in range(4))
        return ("".join(lines) + f"    const TX *plane = {self._plane(n)};\n    float rows[4];\n"
                f"    for (int k = 0; k < 4; ++k) {{\n      const TX *r = plane + {self._row('hx[k]', n)};\n"
                f"      rows[k] = {row};\n    }}\n"
                "    y[i] = kf_from_f32<TY>(hc[0] * rows[0] + hc[1] * rows[1] + hc[2] * rows[2] + hc[3] * rows[3]);\n")

    def _bin_loop(self, unrolled: bool = False, n: str = "LL") -> str:
        ih, iw = self.in_h, self.in_w
        if self.kind == "avg":
            return self._avg_loop(unrolled, n)
        if self.kind in ("bilinear", "linear"):
            return self._bilinear(n)
        if self.kind == "bicubic":
            return self._bicubic(n)
        unroll = "#pragma unroll\n" if unrolled else ""
        if self.kind == "max":
            (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel, self.stride, self.padding, self.dilation
            return (f"    const TX *plane = {self._plane(n)};\n    float m = -INFINITY;\n"
                    f"{unroll}    for (IDX a = 0; a < {kh}{n}; ++a) {{\n"
                    f"      const IDX h = oh * {sh}{n} - {ph}{n} + a * {dh}{n};\n"
                    f"      if (h < 0 || h >= {ih}{n}) continue;\n"
                    f"{unroll}      for (IDX b = 0; b < {kw}{n}; ++b) {{\n"
                    f"        const IDX w = ow * {sw}{n} - {pw}{n} + b * {dw}{n};\n"
                    f"        if (w < 0 || w >= {iw}{n}) continue;\n"
                    f"        const float v = kf_to_f32(plane[{self._at('h', 'w', n)}]);\n"
                    "        m = (v > m || v != v) ? v : m;\n      }\n    }\n"
                    "    y[i] = kf_from_f32<TY>(m);\n")
        return (f"{self._adaptive_bin(n)}    const TX *plane = {self._plane(n)};\n    float s = 0.0f;\n"
                f"    for (IDX h = h0; h < h1; ++h)\n      for (IDX w = w0; w < w1; ++w) "
                f"s += kf_to_f32(plane[{self._at('h', 'w', n)}]);\n"
                f"    y[i] = kf_from_f32<TY>(s / (float)((h1 - h0) * (w1 - w0)));\n")

    def _cpu_channel_windows(self, total: int) -> str:
        """The cpu loop of a channels-last max, average or adaptive average pool: per output pixel, its
        window's bounds once, then each tap's channels in one vectorised pass into a row of
        accumulators (the taps in eager's order, so sums round as eager's do)."""
        x = self.inputs[self.x]
        c, oh, ow, (s_n, s_c, s_h, s_w) = x.shape[1], self.out_h, self.out_w, x.stride
        ih, iw = self.in_h, self.in_w
        head = (f"  for (int64_t px = 0; px < {total // max(c, 1)}LL; ++px) {{\n"
                f"    const IDX nb = px / {oh * ow}LL, oh = (px / {ow}LL) % {oh}LL, ow = px % {ow}LL;\n"
                f"    float acc[{c}];\n")

        def taps(h_range: str, w_range: str, update: str, skip: str = "") -> str:
            return (f"    for ({h_range}) {{\n{skip and f'      if (h < 0 || h >= {ih}LL) continue;{chr(10)}'}"
                    f"      for ({w_range}) {{\n{skip and f'        if (w < 0 || w >= {iw}LL) continue;{chr(10)}'}"
                    f"        const TX *src = x + nb * {s_n}LL + h * {s_h}LL + w * {s_w}LL;\n#pragma omp simd\n"
                    f"        for (IDX ch = 0; ch < {c}LL; ++ch) {{ const float v = kf_to_f32(src[ch * {s_c}LL]); "
                    f"{update} }}\n      }}\n    }}\n")

        def fill(value: str) -> str:
            return f"#pragma omp simd\n    for (IDX ch = 0; ch < {c}LL; ++ch) acc[ch] = {value};\n"

        def store(value: str) -> str:
            return (f"#pragma omp simd\n    for (IDX ch = 0; ch < {c}LL; ++ch) "
                    f"y[px * {c}LL + ch] = kf_from_f32<TY>({value});\n  }}")

        if self.kind == "max":
            (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel, self.stride, self.padding, self.dilation
            body = taps(f"IDX a = 0, h = oh * {sh}LL - {ph}LL; a < {kh}LL; ++a, h += {dh}LL",
                        f"IDX b = 0, w = ow * {sw}LL - {pw}LL; b < {kw}LL; ++b, w += {dw}LL",
                        "acc[ch] = (v > acc[ch] || v != v) ? v : acc[ch];", skip="yes")
            return head + fill("-INFINITY") + body + store("acc[ch]")
        if self.kind == "avg":
            bounds, divisor = self._avg_window("LL")
            body = taps("IDX h = h0c; h < h1; ++h", "IDX w = w0c; w < w1; ++w", "acc[ch] += v;")
            return (head + bounds + fill("0.0f") + body
                    + store(f"h0c >= h1 || w0c >= w1 ? 0.0f : acc[ch] / {divisor}"))
        body = taps("IDX h = h0; h < h1; ++h", "IDX w = w0; w < w1; ++w", "acc[ch] += v;")
        return head + self._adaptive_bin("LL") + fill("0.0f") + body + store("acc[ch] / (float)((h1 - h0) * (w1 - w0))")

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        knobs = self.knob_space(backend, device).normalise(knobs)
        tx = cxx.element_type(self.inputs[self.x].dtype, backend)
        ty = cxx.element_type(self.outputs[0].dtype, backend)
        total = self.planes * self.out_h * self.out_w

        def index(n: str) -> str:
            if self.kind == "linear":  # rows: no output row coordinate
                return f"    const IDX p = i / {self.out_w}{n}, ow = i % {self.out_w}{n};\n"
            if self._strided:
                c, oh, ow = self.outputs[0].shape[1], self.out_h, self.out_w
                if self._pixels_first:
                    return (f"    const IDX ch = i % {c}{n}, ow = (i / {c}{n}) % {ow}{n}, "
                            f"oh = (i / {c * ow}{n}) % {oh}{n}, nb = i / {c * ow * oh}{n};\n")
                return (f"    const IDX nb = i / {c * oh * ow}{n}, ch = (i / {oh * ow}{n}) % {c}{n}, "
                        f"oh = (i / {ow}{n}) % {oh}{n}, ow = i % {ow}{n};\n")
            return (f"    const IDX p = i / {self.out_h * self.out_w}{n}, oh = (i / {self.out_w}{n}) % {self.out_h}{n},"
                    f" ow = i % {self.out_w}{n};\n")

        if backend == "cuda":
            block = int(knobs["threads_per_block"])
            grid = max(1, min(cxx.ceil_div(total, block), cuda_grid_limit(device, block)))
            n, idx = ("", "int") if knobs["index_bits"] == 32 else ("LL", "int64_t")
            return f"""{cxx.CUDA_PRELUDE}
typedef {tx} TX;
typedef {ty} TY;
typedef {idx} IDX;
{_cubic_weights("__device__ __forceinline__") if self.kind == "bicubic" else ""}/* {self.summary} */
__global__ void __launch_bounds__({block}) kf_pool(const TX *__restrict__ x, TY *__restrict__ y) {{
  for (IDX i = (IDX)blockIdx.x * {block} + threadIdx.x; i < {total}{n}; i += (IDX)gridDim.x * {block}) {{
{index(n)}{self._bin_loop(bool(knobs["unroll_window"]), n)}  }}
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
        if self.kind in ("bilinear", "linear") and not self._strided:  # output rows: columns share no division
            rows, ow = self.planes * self.out_h, self.out_w
            coords = "p = r" if self.kind == "linear" else f"p = r / {self.out_h}LL, oh = r % {self.out_h}LL"
            loop = (f"  for (int64_t r = 0; r < {rows}LL; ++r) {{\n    const IDX {coords};\n#pragma omp simd\n"
                    f"    for (IDX ow = 0; ow < {ow}LL; ++ow) {{\n    const IDX i = r * {ow}LL + ow;\n"
                    f"{self._bin_loop()}    }}\n  }}")
        elif self._pixels_first and self.kind in ("max", "avg", "adaptive_avg"):
            loop = self._cpu_channel_windows(total)
        elif self._pixels_first:  # a pixel's channels, one after another: contiguous reads and writes
            c, oh, ow = self.outputs[0].shape[1], self.out_h, self.out_w
            loop = (f"  for (int64_t px = 0; px < {total // max(c, 1)}LL; ++px) {{\n"
                    f"    const IDX nb = px / {oh * ow}LL, oh = (px / {ow}LL) % {oh}LL, ow = px % {ow}LL;\n"
                    f"#pragma omp simd\n    for (IDX ch = 0; ch < {c}LL; ++ch) {{\n    const IDX i = px * {c}LL + ch;\n"
                    f"{self._bin_loop()}    }}\n  }}")
        else:
            loop = f"  for (int64_t i = 0; i < {total}LL; ++i) {{\n{index('LL')}{self._bin_loop()}  }}"
        return f"""{cxx.CPU_PRELUDE}
typedef {tx} TX;
typedef {ty} TY;
typedef int64_t IDX;
{_cubic_weights("static inline") if self.kind == "bicubic" else ""}/* {self.summary} */
static void kf_pool(const TX *__restrict x, TY *__restrict y) {{
#pragma omp parallel for{threads} schedule({knobs["schedule"]})
{loop}
}}

{launch}"""


def _cubic_weights(qualifiers: str) -> str:
    """Eager's get_cubic_upsample_coefficients (A = -0.75) for fraction ``t``, in float: the four taps'
    weights at distances 1 + t, t, 1 - t and (1 - t) + 1, each rounded as eager rounds it."""
    return f"""{qualifiers} float kf_cubic_near(float d) {{ return (1.25f * d - 2.25f) * d * d + 1.0f; }}
{qualifiers} float kf_cubic_far(float d) {{ return ((-0.75f * d + 3.75f) * d - 6.0f) * d + 3.0f; }}
{qualifiers} void kf_cubic_weights(float c[4], float t) {{
  c[0] = kf_cubic_far(t + 1.0f);
  c[1] = kf_cubic_near(t);
  c[2] = kf_cubic_near(1.0f - t);
  const float u = 1.0f - t;
  c[3] = kf_cubic_far(u + 1.0f);
}}
"""
