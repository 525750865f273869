// A correct row softmax over the last dimension of a contiguous float32 matrix.
#include <math.h>
#include "kf_abi.h"

extern "C" int kf_launch(const kf_tensor *inputs, int32_t n_inputs, kf_tensor *outputs, int32_t n_outputs,
                         void *stream) {
  if (n_inputs != 1 || n_outputs != 1 || inputs[0].dtype != KF_F32) return 1;
  const float *x = (const float *)inputs[0].data;
  float *y = (float *)outputs[0].data;
  const int64_t cols = inputs[0].shape[inputs[0].ndim - 1];
  int64_t rows = 1;
  for (int d = 0; d < inputs[0].ndim - 1; ++d) rows *= inputs[0].shape[d];
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    float m = xr[0];
    for (int64_t c = 1; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
    float s = 0.f;
    for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
    const float inv = 1.f / s;
    for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
  }
  return 0;
}
