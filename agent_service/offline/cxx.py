"""C++ building blocks shared by every template: dtype conversion, the layout guard, constants.

A generated kernel is specialised: every shape, stride and dtype of the card is a constant, and
``kf_launch`` first checks that the runtime tensors are exactly those (non-zero return
otherwise). Float16/bfloat16 are converted through bit manipulation on the cpu backend (no
compiler extension types, no torch headers) and through ``cuda_fp16.h``/``cuda_bf16.h`` on cuda;
arithmetic is always fp32.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kforge_domain.card import TensorSpec
from kforge_domain.dtypes import ABI_DTYPE_CODES, DTYPE_BYTES

FLOAT_DTYPES = ("float32", "float16", "bfloat16")
#: Element sizes of the dtypes templates compute in (a ``KeyError`` for any other).
ELEMENT_BYTES = {dtype: DTYPE_BYTES[dtype] for dtype in FLOAT_DTYPES}

# Status codes kf_launch returns; the sandbox reports them verbatim.
STATUS_WRONG_COUNT = 1
STATUS_WRONG_LAYOUT = 2
STATUS_MISALIGNED = 3
STATUS_LAUNCH_FAILED = 4
STATUS_BAD_INPUT = 5  # an input value eager raises on (an index out of range); nothing was written


_STORAGE_TYPES = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t", "int8": "int8_t",
                  "uint8": "uint8_t", "bool": "uint8_t"}
_HALF_STORAGE_TYPES = {"cpu": {"float16": "kf_f16", "bfloat16": "kf_bf16"},
                       "cuda": {"float16": "__half", "bfloat16": "__nv_bfloat16"}}


def vectorising_cpu_math(expression: str) -> str:
    """``expression`` with fmaxf and fminf calls made the cpu prelude's selects (kf_fmaxf, kf_fminf)."""
    return re.sub(r"\bf(max|min)f\(", r"kf_f\1f(", expression)


def storage_type(dtype: str, backend: str) -> str:
    """The C++ type one element of ``dtype`` is stored as on ``backend`` (``KeyError`` for a dtype without one)."""
    halves = _HALF_STORAGE_TYPES[backend]
    return halves[dtype] if dtype in halves else _STORAGE_TYPES[dtype]


def element_type(dtype: str, backend: str) -> str:
    """The C++ storage type of one element of ``dtype`` on ``backend``, for the templates that
    compute in fp32 (:data:`FLOAT_DTYPES`)."""
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype {dtype} has no template element type")
    return storage_type(dtype, backend)


def vector_width(dtype: str) -> int:
    """Elements per 16-byte access."""
    return 16 // ELEMENT_BYTES[dtype]


def linear_offset(index: str, sizes: Sequence[int], strides: Sequence[int]) -> str:
    """C expression of where element ``index`` of a row-major walk over ``sizes`` lies, at ``strides``.

    ``index`` (a C expression) is below the product of ``sizes``, so the outermost coordinate needs
    no modulo; dims of size 1 and zero strides add no term."""
    dims = [(size, stride) for size, stride in zip(sizes, strides, strict=True) if size != 1]
    terms, divisor = [], 1
    for i in range(len(dims) - 1, -1, -1):
        size, stride = dims[i]
        coordinate = f"({index})" if divisor == 1 else f"(({index}) / {divisor}LL)"
        if i:
            coordinate = f"({coordinate} % {size}LL)"
        if stride:
            terms.append(f"{coordinate} * {stride}LL")
        divisor *= size
    return " + ".join(reversed(terms)) or "0"


def cfloat(value: float) -> str:
    """A float literal C++ reads back exactly (inf/nan spelled as macros)."""
    if value != value:
        return "NAN"
    if value in (float("inf"), float("-inf")):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return f"{float(value)!r}f"


CPU_PRELUDE = r"""#include "kf_abi.h"
#include <stdint.h>
#include <string.h>
#include <math.h>
/* No kernel runs with floating-point traps enabled; saying so lets g++ turn the comparisons of
   the math below into vector selects, so omp simd loops that call it vectorise. */
#pragma GCC optimize("no-trapping-math")

struct kf_f16 { uint16_t bits; };
struct kf_bf16 { uint16_t bits; };

static inline float kf_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t kf_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float kf_to_f32(float v) { return v; }
static inline float kf_to_f32(kf_bf16 v) { return kf_bits_f32((uint32_t)v.bits << 16); }
static inline float kf_to_f32(kf_f16 v) {
  uint32_t h = v.bits, o = (h & 0x7fffu) << 13, exp = o & (0x7c00u << 13);
  o += (127u - 15u) << 23;
  float f = kf_bits_f32(o);
  if (exp == (0x7c00u << 13)) f = kf_bits_f32(o + ((128u - 16u) << 23));
  else if (exp == 0) f = kf_bits_f32(o + (1u << 23)) - kf_bits_f32(113u << 23);
  return kf_bits_f32(kf_f32_bits(f) | ((h & 0x8000u) << 16));
}
template <typename T> static inline T kf_from_f32(float v);
template <> inline float kf_from_f32<float>(float v) { return v; }
template <> inline kf_bf16 kf_from_f32<kf_bf16>(float v) {
  uint32_t u = kf_f32_bits(v);
  kf_bf16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) { r.bits = (uint16_t)((u >> 16) | 0x40u); return r; }
  u += 0x7fffu + ((u >> 16) & 1u);
  r.bits = (uint16_t)(u >> 16);
  return r;
}
template <> inline kf_f16 kf_from_f32<kf_f16>(float v) {
  uint32_t u = kf_f32_bits(v), sign = u & 0x80000000u, o;
  u ^= sign;
  if (u >= (143u << 23)) o = (u > (255u << 23)) ? 0x7e00u : 0x7c00u;
  else if (u < (113u << 23)) o = kf_f32_bits(kf_bits_f32(u) + kf_bits_f32(126u << 23)) - (126u << 23);
  else { uint32_t odd = (u >> 13) & 1u; u += (uint32_t)((15 - 127) << 23) + 0xfffu + odd; o = u >> 13; }
  kf_f16 r;
  r.bits = (uint16_t)(o | (sign >> 16));
  return r;
}
/* exp with a degree-6 polynomial after range reduction, free of library calls (floorf, fminf and
   fmaxf stay calls to g++ without -ffast-math) so that omp simd loops vectorise it. */
static inline float kf_expf(float x) {
  float c = x < -87.3f ? -87.3f : x;
  c = c > 88.7228f ? 88.7228f : c;
  /* the nearest integer to c / ln 2: adding 1.5 * 2^23 leaves no fraction bits to round into */
  float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = c - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f; p = p * r + 8.3334519073e-3f; p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f; p = p * r + 5.0000001201e-1f;
  int32_t k = (int32_t)n;  /* up to 128 near the top of the range: 2^128 is taken as 2^127 * 2 */
  float twice = k > 127 ? 2.0f : 1.0f;
  k = k > 127 ? 127 : k;
  float y = (p * r * r + r + 1.0f) * kf_bits_f32((uint32_t)(k + 127) << 23) * twice;
  y = x < -87.3f ? 0.0f : y;
  y = x > 88.7228f ? INFINITY : y;
  return x != x ? x : y;
}
/* erf without a library call, vectorising like kf_expf: x P(x^2) / Q(x^2), P and Q of degree 5, fitted
   to erf on [0, 4] by least squares (absolute error under 3e-7 in float arithmetic), +-1 beyond 4 where
   erf rounds to 1 in float. One division and no exp: half the time of the exp-based form it replaced. */
static inline float kf_erff(float x) {
  float a = x < 0.0f ? -x : x, z = a * a;
  float p = 2.086932350789745e-06f;
  p = p * z + 2.8474218469329244e-4f; p = p * z + 3.6831418789470896e-3f; p = p * z + 5.248990513577136e-2f;
  p = p * z + 0.18824426378136552f; p = p * z + 1.1283791113148112f;
  float q = 3.847173582899415e-05f;
  q = q * z + 1.1459779785322963e-3f; q = q * z + 1.479894348837985e-2f; q = q * z + 0.11324095791845144f;
  q = q * z + 0.5001597240330979f; q = q * z + 1.0f;
  float y = a * p / q;
  y = y > 1.0f ? 1.0f : y;
  y = a > 4.0f ? 1.0f : y;  /* also an infinite x, whose p / q is inf / inf */
  y = x < 0.0f ? -y : y;
  return x != x ? x : y;
}
/* erfinv, which libm lacks: Giles' single-precision approximation (a polynomial in w = -log(1 - x^2),
   two branches), then one Newton step on erf in double, which takes it to float's last bit. +-1 give
   +-inf, beyond them NaN, as eager. */
static inline float kf_erfinvf(float x) {
  if (x != x || x < -1.0f || x > 1.0f) return NAN;
  if (x == 1.0f || x == -1.0f) return x * INFINITY;
  float w = -logf((1.0f - x) * (1.0f + x)), p;
  if (w < 5.0f) {
    w -= 2.5f;
    p = 2.81022636e-08f; p = 3.43273939e-07f + p * w; p = -3.5233877e-06f + p * w;
    p = -4.39150654e-06f + p * w; p = 0.00021858087f + p * w; p = -0.00125372503f + p * w;
    p = -0.00417768164f + p * w; p = 0.246640727f + p * w; p = 1.50140941f + p * w;
  } else {
    w = sqrtf(w) - 3.0f;
    p = -0.000200214257f; p = 0.000100950558f + p * w; p = 0.00134934322f + p * w;
    p = -0.00367342844f + p * w; p = 0.00573950773f + p * w; p = -0.0076224613f + p * w;
    p = 0.00943887047f + p * w; p = 1.00167406f + p * w; p = 2.83297682f + p * w;
  }
  double y = (double)(p * x);
  y -= (erf(y) - (double)x) / (1.1283791670955126 * exp(-y * y));
  return (float)y;
}
/* fmaxf and fminf as selects, which vectorise where g++ keeps the library calls: a NaN operand
   gives the other one, as fmaxf and fminf do. */
static inline float kf_fmaxf(float a, float b) { return ((a > b) | (b != b)) ? a : b; }
static inline float kf_fminf(float a, float b) { return ((a < b) | (b != b)) ? a : b; }
/* The value static_cast<int64_t>(v) takes in eager's compiled code, back in float (exact for the
   integral values casts see): x86 gives INT64_MIN for NaN and beyond the range, aarch64 saturates
   and gives 0 for NaN. */
static inline float kf_int64_cast_value(float v) {
#if defined(__aarch64__)
  return v != v ? 0.0f : (v > 9223372036854775808.0f ? 9223372036854775808.0f
                          : (v < -9223372036854775808.0f ? -9223372036854775808.0f : v));
#else
  return (v < 9223372036854775808.0f && v >= -9223372036854775808.0f) ? v : -9223372036854775808.0f;
#endif
}
/* log without a library call, vectorising like kf_expf: x = 2^e * m with m in [sqrt(1/2), sqrt(2)),
   log(m) = 2 atanh(s) for s = (m - 1) / (m + 1), |s| < 0.172, whose odd series to s^9 is exact to
   float precision; e ln 2 in two parts. Subnormals are scaled into the normal range first. */
static inline float kf_logf(float x) {
  float tiny = x < 1.17549435e-38f ? 1.0f : 0.0f;
  uint32_t u = kf_f32_bits(x * (tiny * 8388607.0f + 1.0f)) + (0x3f800000u - 0x3f3504f3u);
  float e = (float)((int32_t)(u >> 23) - 127) - tiny * 23.0f;
  float f = kf_bits_f32((u & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
  float s = f / (2.0f + f), z = s * s;
  float p = z * (0.6666666666f + z * (0.4f + z * (0.2857142857f + z * 0.2222222222f)));
  float y = e * 0.693359375f + (e * -2.12194440e-4f + (f - s * (f - p)));
  y = x == 0.0f ? -INFINITY : y;
  y = x < 0.0f ? NAN : y;
  y = x == INFINITY ? x : y;  /* selects one by one: a short-circuit || here keeps g++ from vectorising */
  return x != x ? x : y;
}
/* log(1 + x) as log(u) * x / (u - 1) for u = 1 + x rounded, which cancels the rounding of u
   (Goldberg), so small x keeps its precision: vectorising like kf_logf. */
static inline float kf_log1pf(float x) {
  float u = 1.0f + x, d = u - 1.0f;
  float y = d == 0.0f ? x : kf_logf(u) * (x / (d == 0.0f ? 1.0f : d));
  y = x == INFINITY ? x : y;
  return x != x ? x : y;
}
static int kf_check(const kf_tensor *t, int32_t ndim, const int64_t *shape, const int64_t *stride, int32_t dtype) {
  if (t->ndim != ndim || t->dtype != dtype) return 1;
  for (int32_t d = 0; d < ndim; ++d)
    if (t->shape[d] != shape[d] || (shape[d] != 1 && t->stride[d] != stride[d])) return 1;
  return 0;
}
"""

CUDA_PRELUDE = r"""#include "kf_abi.h"
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

__device__ __forceinline__ float kf_to_f32(float v) { return v; }
__device__ __forceinline__ float kf_to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float kf_to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T kf_from_f32(float v);
template <> __device__ __forceinline__ float kf_from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half kf_from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 kf_from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
__device__ __forceinline__ float kf_expf(float x) { return __expf(x); }
/* static_cast<int64_t>(v) as the device converts it (cvt.rzi: saturating, NaN to 0), written out */
__device__ __forceinline__ long long kf_f2ll(float v) {
  return v != v ? 0LL : (v >= 9223372036854775808.0f ? (long long)0x7fffffffffffffffULL
                         : (v < -9223372036854775808.0f ? (long long)0x8000000000000000ULL : (long long)v));
}
__device__ __forceinline__ long long kf_clamp_ll(long long v, long long low, long long high) {
  return v < low ? low : (v > high ? high : v);
}

/* N elements moved as one access: N * sizeof(T) == 16 gives 128-bit loads and stores. */
template <typename T, int N> struct alignas(sizeof(T) * N) kf_vec { T v[N]; };
template <typename T, int N> __device__ __forceinline__ kf_vec<T, N> kf_load_vec(const T *p) {
  return *reinterpret_cast<const kf_vec<T, N> *>(p);
}
template <typename T, int N> __device__ __forceinline__ void kf_store_vec(T *p, const kf_vec<T, N> &v) {
  *reinterpret_cast<kf_vec<T, N> *>(p) = v;
}

static int kf_check(const kf_tensor *t, int32_t ndim, const int64_t *shape, const int64_t *stride, int32_t dtype) {
  if (t->ndim != ndim || t->dtype != dtype) return 1;
  for (int32_t d = 0; d < ndim; ++d)
    if (t->shape[d] != shape[d] || (shape[d] != 1 && t->stride[d] != stride[d])) return 1;
  return 0;
}
"""


def prelude(backend: str) -> str:
    return CUDA_PRELUDE if backend == "cuda" else CPU_PRELUDE


def _int_list(values: Sequence[int]) -> str:
    return "{" + ", ".join(f"{int(v)}LL" for v in values) + "}" if values else "{0LL}"


@dataclass(frozen=True)
class Workspace:
    """Scratch memory of a kernel: ``count`` elements of ``ctype`` in the workspace its caller passes.

    The kernel contract (kf_abi.h) lets a kernel export ``kf_workspace_bytes``; its caller then
    allocates that many bytes with torch and passes them as one trailing output, so ``kf_launch``
    allocates nothing and stays capturable in a CUDA graph. The contents are garbage on entry.
    """

    name: str
    ctype: str
    count: int

    @property
    def bytes_c(self) -> str:
        """The workspace size as a C expression (``ctype`` must be declared where it is used)."""
        return f"((int64_t){self.count}LL * (int64_t)sizeof({self.ctype}))"

    def export(self) -> str:
        """The ``kf_workspace_bytes`` definition; place it after ``ctype`` is declared."""
        return f'extern "C" int64_t kf_workspace_bytes(void) {{ return {self.bytes_c}; }}\n'

    def take(self, n_outputs: int) -> str:
        """Host code in ``kf_launch``, after :func:`guard`: ``ctype *name`` is the workspace (output ``n_outputs``)."""
        return f"  {self.ctype} *{self.name} = ({self.ctype} *)outputs[{n_outputs}].data;\n"


def guard(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], aligned: Sequence[str] = (),
          workspace: Workspace | None = None) -> str:
    """Statements that return non-zero unless the runtime tensors are exactly the card's.

    ``aligned`` names pointer expressions (``inputs[0].data``) that must be 16-byte aligned
    because the kernel moves them with 16-byte accesses. With a ``workspace`` the outputs are
    followed by it: one 1-D uint8 tensor of at least its size, 16-byte aligned.
    """
    n_outputs = len(outputs) + (1 if workspace is not None else 0)
    lines = [
        f"  if (n_inputs != {len(inputs)} || n_outputs != {n_outputs}) return {STATUS_WRONG_COUNT};",
    ]
    for side, specs in (("inputs", inputs), ("outputs", outputs)):
        for i, spec in enumerate(specs):
            shape, stride = _int_list(spec.shape), _int_list(spec.stride)
            lines.append(
                f"  {{ static const int64_t shape[] = {shape}, stride[] = {stride};"
                f" if (kf_check(&{side}[{i}], {len(spec.shape)}, shape, stride,"
                f" {ABI_DTYPE_CODES.get(spec.dtype, -1)})) return {STATUS_WRONG_LAYOUT}; }}"
            )
    if workspace is not None:
        ws = f"outputs[{len(outputs)}]"
        lines.append(f"  if ({ws}.ndim != 1 || {ws}.dtype != {ABI_DTYPE_CODES['uint8']} || {ws}.shape[0] < "
                     f"{workspace.bytes_c}) return {STATUS_WRONG_LAYOUT};")
        aligned = [*aligned, f"{ws}.data"]
    for pointer in aligned:
        lines.append(f"  if (((uintptr_t)({pointer})) & 15u) return {STATUS_MISALIGNED};")
    return "\n".join(lines)


def cuda_scratch(name: str, ctype: str, count: int) -> Workspace:
    """``count`` elements of ``ctype`` of scratch for a cuda kernel, taken from the workspace.

    Render ``.export()`` after ``ctype``'s declaration, pass the result to :func:`guard`, and put
    ``.take(len(outputs))`` after the guard in ``kf_launch``; nothing is allocated or freed there.
    """
    return Workspace(name, ctype, count)


def cpu_kf_launch(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], body: str,
                  workspace: Workspace | None = None) -> str:
    """A cpu ``kf_launch``: :func:`guard` on the card's tensors (and ``workspace``, exported here), then
    ``body`` (whole lines), then 0."""
    return ((workspace.export() if workspace else '') +
            'extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, '
            'int32_t n_outputs,\n'
            '                         void *stream) {\n'
            '  (void)stream;\n'
            f'{guard(inputs, outputs, workspace=workspace)}\n'
            f'{body}  return 0;\n'
            '}\n')


def cuda_launch_epilogue() -> str:
    return f"  return cudaGetLastError() == cudaSuccess ? 0 : {STATUS_LAUNCH_FAILED};"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
