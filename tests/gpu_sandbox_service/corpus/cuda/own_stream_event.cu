// expect: REJECTED — does its work on a non-blocking stream of its own and makes the harness's
// stream wait for it through an event: ordered, so the outputs are right, yet the work starts
// at once, while the harness's stream still flushes the cache before the start event.
KF_ENTRY {
  static cudaStream_t own = nullptr;
  static cudaEvent_t done = nullptr;
  if (!own) {
    cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  }
  spin<<<1, 1, 0, own>>>(200000LL);
  KF_SOFTMAX_ON(inputs, outputs, own);
  cudaEventRecord(done, own);
  cudaStreamWaitEvent((cudaStream_t)stream, done, 0);
  return cudaGetLastError() != cudaSuccess;
}
