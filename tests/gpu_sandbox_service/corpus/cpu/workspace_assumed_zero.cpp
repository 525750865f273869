// expect: WRONG_RESULT — adds each row's sum into a workspace it never zeroed, and zeroes it after use for
// the next call: right on memory that starts at zero, wrong on the garbage the harness fills it with.
static const int64_t ROWS = 64, COLS = 256;
extern "C" int64_t kf_workspace_bytes(void) { return ROWS * (int64_t)sizeof(float); }
KF_ENTRY {
  if (n_outputs != 2) return 5;
  const float *x = (const float *)inputs[0].data;
  float *y = (float *)outputs[0].data, *row_sum = (float *)outputs[1].data;
  for (int64_t r = 0; r < ROWS; ++r) {
    float m = x[r * COLS];
    for (int64_t c = 1; c < COLS; ++c) m = fmaxf(m, x[r * COLS + c]);
    for (int64_t c = 0; c < COLS; ++c) row_sum[r] += expf(x[r * COLS + c] - m);
    for (int64_t c = 0; c < COLS; ++c) y[r * COLS + c] = expf(x[r * COLS + c] - m) / row_sum[r];
    row_sum[r] = 0.f;
  }
  return 0;
}
