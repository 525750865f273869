/* kf_abi.h — the Kernel Forge kernel contract, supplied by the sandbox.
 *
 * A candidate is one source file (.cu for backend cuda, .cpp for backend cpu) that exports
 * kf_launch. It never includes torch headers. The harness allocates every tensor, owns the
 * stream, and checks and times the calls.
 */
#ifndef KF_ABI_H
#define KF_ABI_H
#include <stdint.h>

typedef enum { KF_F32 = 0, KF_F16 = 1, KF_BF16 = 2, KF_F64 = 3, KF_I32 = 4, KF_I64 = 5,
               KF_BOOL = 6, KF_U8 = 7, KF_I8 = 8 } kf_dtype;

typedef struct {
  void *data;
  int64_t shape[8];
  int64_t stride[8]; /* in elements */
  int32_t ndim;
  int32_t dtype;     /* a kf_dtype */
} kf_tensor;

#ifdef __cplusplus
extern "C"
#endif
int kf_launch(const kf_tensor *inputs, int32_t n_inputs,
              kf_tensor *outputs, int32_t n_outputs, void *stream);
/* Returns 0 on success. inputs: the tensor arguments in schema order; non-tensor arguments are
   fixed by the card. outputs: preallocated by the harness. stream: cudaStream_t for cuda, NULL
   for cpu; all device work goes on it. Arguments the op mutates are passed as outputs,
   pre-filled.
   Launches are captured into CUDA graphs (torch.compile mode="reduce-overhead"), so kf_launch
   allocates no memory (no cudaMalloc*, cudaFree*, malloc/new; scratch is the workspace below),
   never synchronises with the host (no cudaDeviceSynchronize, cudaStreamSynchronize,
   cudaEventSynchronize, synchronous cudaMemcpy/cudaMemset) and puts every kernel launch and
   async copy on `stream`. */

#ifdef __cplusplus
extern "C"
#endif
int64_t kf_workspace_bytes(void);
/* Optional. The bytes of scratch memory kf_launch needs; a card is exact, so this is a constant.
   When a candidate exports it and it returns more than 0, the caller allocates that many bytes
   on the kernel's device (torch's allocator, the launch's stream) and passes them as ONE EXTRA
   TRAILING OUTPUT: n_outputs is the op's output count + 1 and outputs[n_outputs - 1] is
   { data, shape = {bytes}, stride = {1}, ndim = 1, dtype = KF_U8 }, data 16-byte aligned.
   Its contents are undefined on entry (the sandbox fills it with garbage before the calls it
   checks: write before you read) and are not kept between calls; it is never checked as an output.
   A candidate that does not export it (or returns 0) gets exactly the op's outputs. A negative
   value is an error: the kernel is not loaded. */

#endif /* KF_ABI_H */
