// expect: TIMEOUT — a kernel that never finishes.
__global__ void forever(volatile int *flag) { while (*flag == 0) {} }
KF_ENTRY {
  static int *flag = nullptr;
  if (!flag) { cudaMalloc(&flag, sizeof(int)); cudaMemset(flag, 0, sizeof(int)); }
  forever<<<1, 1, 0, (cudaStream_t)stream>>>(flag);
  return 0;
}
