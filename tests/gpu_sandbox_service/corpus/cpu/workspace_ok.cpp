// expect: PASSED — keeps each row's max and sum in the workspace (kf_workspace_bytes), written before read,
// and leaves NaN there: the workspace is scratch, never checked as an output.
static const int64_t ROWS = 64, COLS = 256;
extern "C" int64_t kf_workspace_bytes(void) { return 2 * ROWS * (int64_t)sizeof(float); }
KF_ENTRY {
  if (n_outputs != 2 || outputs[1].ndim != 1 || outputs[1].dtype != KF_U8 || outputs[1].shape[0] < kf_workspace_bytes())
    return 5;
  const float *x = (const float *)inputs[0].data;
  float *y = (float *)outputs[0].data, *row_max = (float *)outputs[1].data, *row_sum = row_max + ROWS;
  for (int64_t r = 0; r < ROWS; ++r) {
    row_max[r] = x[r * COLS];
    for (int64_t c = 1; c < COLS; ++c) row_max[r] = fmaxf(row_max[r], x[r * COLS + c]);
    row_sum[r] = 0.f;
    for (int64_t c = 0; c < COLS; ++c) row_sum[r] += expf(x[r * COLS + c] - row_max[r]);
  }
  for (int64_t r = 0; r < ROWS; ++r)
    for (int64_t c = 0; c < COLS; ++c) y[r * COLS + c] = expf(x[r * COLS + c] - row_max[r]) / row_sum[r];
  for (int64_t r = 0; r < 2 * ROWS; ++r) row_max[r] = NAN;
  return 0;
}
