// expect: PASSED
KF_ENTRY {
  KF_SOFTMAX_ON(inputs, outputs, (cudaStream_t)stream);
  return cudaGetLastError() != cudaSuccess;
}
