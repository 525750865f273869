// expect: WRONG_RESULT — does its work on a private stream after a long delay, so the harness's
// stream is idle (and an event-only timer on it would read ~0) while the result is still unwritten.
KF_ENTRY {
  static cudaStream_t side = nullptr;
  if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  spin<<<1, 1, 0, side>>>(200000000LL);
  KF_SOFTMAX_ON(inputs, outputs, side);
  return cudaGetLastError() != cudaSuccess;
}
