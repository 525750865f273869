// expect: WRONG_RESULT — remembers the result per input pointer and replays it.
static const void *seen_input = nullptr;
static float cached[1 << 20];
KF_ENTRY {
  const int64_t n = kf_rows(&inputs[0]) * inputs[0].shape[1];
  if (inputs[0].data == seen_input) { memcpy(outputs[0].data, cached, n * sizeof(float)); return 0; }
  KF_SOFTMAX(inputs, outputs);
  memcpy(cached, outputs[0].data, n * sizeof(float));
  seen_input = inputs[0].data;
  return 0;
}
