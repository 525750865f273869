// expect: REJECTED — does its work on a non-blocking stream of its own and waits for it inside
// kf_launch: the outputs are right, but the work runs while the harness's stream still flushes the
// cache, before the start event, and no event on the harness's stream waits for it.
KF_ENTRY {
  static cudaStream_t own = nullptr;
  if (!own) cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
  spin<<<1, 1, 0, own>>>(200000LL);
  KF_SOFTMAX_ON(inputs, outputs, own);
  cudaStreamSynchronize(own);
  return cudaGetLastError() != cudaSuccess;
}
