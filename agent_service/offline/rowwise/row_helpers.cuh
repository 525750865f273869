struct kf_stat { float a, b, c; };
__device__ __forceinline__ kf_stat kf_shfl(kf_stat s, int mask) {
  kf_stat r;
  r.a = __shfl_xor_sync(0xffffffffu, s.a, mask);
  r.b = __shfl_xor_sync(0xffffffffu, s.b, mask);
  r.c = __shfl_xor_sync(0xffffffffu, s.c, mask);
  return r;
}
struct kf_sum_op { __device__ __forceinline__ kf_stat operator()(kf_stat x, kf_stat y) const {
  kf_stat r = {x.a + y.a, x.b + y.b, x.c + y.c}; return r; } };
/* A max that keeps NaN, as eager's amax does (fmaxf returns the other operand). */
struct kf_max_op { __device__ __forceinline__ kf_stat operator()(kf_stat x, kf_stat y) const {
  kf_stat r = {(y.a != y.a || y.a > x.a) ? y.a : x.a, 0.0f, 0.0f}; return r; } };
/* Welford/Chan merge of (count, mean, M2). */
struct kf_welford_op { __device__ __forceinline__ kf_stat operator()(kf_stat x, kf_stat y) const {
  if (y.a == 0.0f) return x;
  if (x.a == 0.0f) return y;
  const float n = x.a + y.a, d = y.b - x.b, f = y.a / n;
  kf_stat r = {n, x.b + d * f, x.c + y.c + d * d * x.a * f}; return r; } };
/* Online softmax merge of (max, sum of exp(v - max)). */
struct kf_online_op { __device__ __forceinline__ kf_stat operator()(kf_stat x, kf_stat y) const {
  const float m = fmaxf(x.a, y.a);
  if (m == -INFINITY) { kf_stat r = {m, 0.0f, 0.0f}; return r; }
  kf_stat r = {m, x.b * __expf(x.a - m) + y.b * __expf(y.a - m), 0.0f}; return r; } };

/* The online merge for logsumexp, where a row's maximum may be infinite: two partials whose larger
   maximum is +-inf keep it with their summed counts (log then leaves it infinite), where
   exp(inf - inf) would make it NaN. */
struct kf_lse_op { __device__ __forceinline__ kf_stat operator()(kf_stat x, kf_stat y) const {
  const float m = fmaxf(x.a, y.a);
  if (m == -INFINITY || m == INFINITY) { kf_stat r = {m, x.b + y.b, 0.0f}; return r; }
  kf_stat r = {m, x.b * __expf(x.a - m) + y.b * __expf(y.a - m), 0.0f}; return r; } };

/* Columns mode: the NT warps of a block split 32 adjacent rows; lane l of every warp holds row l. */
template <int NT, typename Op>
__device__ __forceinline__ kf_stat kf_column_reduce(kf_stat v, Op op, kf_stat *smem) {
  __syncthreads();
  smem[threadIdx.x] = v;
  __syncthreads();
  kf_stat r = smem[threadIdx.x & 31];
#pragma unroll
  for (int w = 1; w < NT; ++w) r = op(r, smem[w * 32 + (threadIdx.x & 31)]);
  return r;
}

/* Reduce over the NT threads sharing a row: NT == 1, NT aligned lanes of a warp (every lane of
   the warp calls it, each group reducing its own row), one warp, or the whole block. */
template <int NT, bool TREE, typename Op>
__device__ __forceinline__ kf_stat kf_group_reduce(kf_stat v, Op op, kf_stat *smem) {
  if constexpr (NT == 1) {
    return v;
  } else if constexpr (TREE && NT > 32) {
    __syncthreads();
    smem[threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int s = NT / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) smem[threadIdx.x] = op(smem[threadIdx.x], smem[threadIdx.x + s]);
      __syncthreads();
    }
    return smem[0];
  } else {
#pragma unroll
    for (int m = (NT < 32 ? NT : 32) / 2; m > 0; m >>= 1) v = op(v, kf_shfl(v, m));
    if constexpr (NT <= 32) {
      return v;
    } else {
      __syncthreads();
      if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
      __syncthreads();
      kf_stat r = smem[0];
#pragma unroll
      for (int w = 1; w < NT / 32; ++w) r = op(r, smem[w]);
      return r;
    }
  }
}
