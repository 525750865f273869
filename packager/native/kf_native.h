// What the runtime's native helpers share: kf_abi.h's descriptor, a card's exact layouts, the
// check of a live tensor against one, and a kernel launch into freshly allocated outputs.
//
// A launch allocates the card's outputs (and the kernel's workspace) through torch's allocator
// on the inputs' device, fills the descriptors from templates made once per card, and calls
// kf_launch on the current stream: no Python, no host sync, so CUDA graphs capture it.

#pragma once

#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>

#ifdef KF_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#ifdef KF_WITH_CUDA
#define KF_HAS_CUDA 1
#else
#define KF_HAS_CUDA 0
#endif

#include <cstdint>
#include <cstring>
#include <vector>

#define KF_EXPORT __attribute__((visibility("default")))

namespace kf {

constexpr int kMaxDims = 8;
// One tensor's layout as Python passes it: ndim, ABI dtype, storage offset, aligned16, sizes, strides.
constexpr int kLayoutWords = 4 + 2 * kMaxDims;
constexpr int32_t kDtypeU8 = 7;

struct KfTensor {  // kf_abi.h's kf_tensor
  void* data;
  int64_t shape[kMaxDims];
  int64_t stride[kMaxDims];
  int32_t ndim;
  int32_t dtype;
};

using LaunchFn = int (*)(const KfTensor*, int32_t, KfTensor*, int32_t, void*);

struct Layout {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype;
  int64_t storage_offset;
  bool aligned16;
  KfTensor descriptor;  // data pointer patched per call
};

// Why a live tensor is not the card's, in the order the checks run (0: it is).
enum Miss : int { kMatch = 0, kShape, kDtype, kStride, kDevice, kStorageOffset, kAlignment, kArgs, kReasons };

// ABI dtype codes (kf_dtype) to torch's scalar types.
inline bool scalar_type_of(int64_t code, c10::ScalarType* out) {
  static const c10::ScalarType table[] = {
      c10::ScalarType::Float, c10::ScalarType::Half, c10::ScalarType::BFloat16,
      c10::ScalarType::Double, c10::ScalarType::Int, c10::ScalarType::Long,
      c10::ScalarType::Bool, c10::ScalarType::Byte, c10::ScalarType::Char};
  if (code < 0 || code >= static_cast<int64_t>(sizeof(table) / sizeof(table[0]))) return false;
  *out = table[code];
  return true;
}

inline bool read_layout(const int64_t* words, Layout* layout) {
  const int64_t ndim = words[0];
  if (ndim < 0 || ndim > kMaxDims || !scalar_type_of(words[1], &layout->dtype)) return false;
  layout->storage_offset = words[2];
  layout->aligned16 = words[3] != 0;
  layout->sizes.assign(words + 4, words + 4 + ndim);
  layout->strides.assign(words + 4 + kMaxDims, words + 4 + kMaxDims + ndim);
  std::memset(&layout->descriptor, 0, sizeof(KfTensor));
  for (int64_t d = 0; d < ndim; ++d) {
    layout->descriptor.shape[d] = layout->sizes[d];
    layout->descriptor.stride[d] = layout->strides[d];
  }
  layout->descriptor.ndim = static_cast<int32_t>(ndim);
  layout->descriptor.dtype = static_cast<int32_t>(words[1]);
  return true;
}

inline bool read_layouts(int32_t n, const int64_t* words, std::vector<Layout>* layouts) {
  if (n < 0) return false;
  layouts->resize(n);
  for (int32_t i = 0; i < n; ++i) {
    if (!read_layout(words + i * kLayoutWords, &(*layouts)[i])) return false;
  }
  return true;
}

// packager.variant.line_offset: where the first element lies in its 16-byte line, in elements
// (the storage offset itself where the address is not a whole number of elements into it).
inline int64_t line_offset(const at::Tensor& tensor) {
  const auto remainder = static_cast<int64_t>(reinterpret_cast<uintptr_t>(tensor.const_data_ptr()) % 16);
  const auto size = static_cast<int64_t>(tensor.element_size());
  return remainder % size == 0 ? remainder / size : tensor.storage_offset();
}

inline Miss check(const at::Tensor& tensor, const Layout& expected, c10::DeviceType device_type) {
  // A card's tensors are dense and strided; a nested tensor has no sizes to compare.
  if (!tensor.defined() || tensor.layout() != c10::kStrided || tensor.is_nested()) return kArgs;
  if (!tensor.sizes().equals(expected.sizes)) return kShape;
  if (tensor.scalar_type() != expected.dtype) return kDtype;
  if (!tensor.strides().equals(expected.strides)) return kStride;
  if (tensor.device().type() != device_type) return kDevice;
  if ((reinterpret_cast<uintptr_t>(tensor.const_data_ptr()) % 16 == 0) != expected.aligned16) return kAlignment;
  if (!expected.aligned16 && line_offset(tensor) != expected.storage_offset) return kStorageOffset;
  return kMatch;
}

// One card's kernel: its kf_launch and exact layouts.
struct Kernel {
  LaunchFn launch = nullptr;
  c10::DeviceType device_type = c10::DeviceType::CPU;
  std::vector<Layout> inputs;
  std::vector<Layout> outputs;
  int64_t workspace_bytes = 0;
  // For each output, the input an in-place op writes and returns as it (-1: a fresh output); empty
  // where no output is an input.
  std::vector<int32_t> aliases;

  bool init(void* launch_fn, int32_t is_cuda, int32_t n_inputs, const int64_t* input_layouts,
            int32_t n_outputs, const int64_t* output_layouts, int64_t workspace,
            const int32_t* output_aliases = nullptr) {
    if (launch_fn == nullptr || workspace < 0) return false;
    launch = reinterpret_cast<LaunchFn>(launch_fn);
    device_type = is_cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
    workspace_bytes = workspace;
    if (!read_layouts(n_inputs, input_layouts, &inputs) || !read_layouts(n_outputs, output_layouts, &outputs)) {
      return false;
    }
    if (output_aliases == nullptr) return true;
    bool any = false;
    for (int32_t i = 0; i < n_outputs; ++i) {
      if (output_aliases[i] < -1 || output_aliases[i] >= n_inputs) return false;
      any = any || output_aliases[i] >= 0;
    }
    if (any) aliases.assign(output_aliases, output_aliases + n_outputs);
    return true;
  }

  // Whether an input this kernel writes in place shares a storage with another of the call's
  // tensors (conservative: any two views of one storage count, as packager.inplace.shares_memory).
  template <class Inputs>
  bool aliased_input_shares_memory(const Inputs& tensors) const {
    for (int32_t same : aliases) {
      if (same < 0) continue;
      const void* storage = tensors[same].storage().data();
      for (size_t j = 0; j < tensors.size(); ++j) {
        if (static_cast<int32_t>(j) != same && tensors[j].storage().data() == storage) return true;
      }
    }
    return false;
  }

  // kf_launch on inputs that match the card, into fresh outputs (an in-place op's into the input it
  // writes); false (nothing kept) on a non-zero status.
  template <class Inputs>
  bool run(const Inputs& tensors, std::vector<at::Tensor>* results) const {
    c10::Device device = tensors.empty() ? c10::Device(device_type) : tensors[0].device();
    c10::OptionalDeviceGuard guard(device);
    std::vector<KfTensor> in(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      in[i] = inputs[i].descriptor;
      in[i].data = const_cast<void*>(tensors[i].const_data_ptr());  // inputs are only read
    }
    std::vector<KfTensor> out(outputs.size() + (workspace_bytes ? 1 : 0));
    results->reserve(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Layout& layout = outputs[i];
      const int32_t same = aliases.empty() ? -1 : aliases[i];
      results->push_back(same >= 0 ? tensors[same]  // the live tensor an in-place op writes and returns
                                   : at::empty_strided(layout.sizes, layout.strides,
                                                       at::TensorOptions().dtype(layout.dtype).device(device)));
      out[i] = layout.descriptor;
      out[i].data = results->back().data_ptr();
    }
    at::Tensor workspace;  // alive until kf_launch has queued its work on the stream
    if (workspace_bytes) {
      workspace = at::empty_strided({workspace_bytes}, {1},
                                    at::TensorOptions().dtype(c10::ScalarType::Byte).device(device));
      KfTensor& slot = out.back();
      std::memset(&slot, 0, sizeof(KfTensor));
      slot.data = workspace.data_ptr();
      slot.shape[0] = workspace_bytes;
      slot.stride[0] = 1;
      slot.ndim = 1;
      slot.dtype = kDtypeU8;
    }
    const int status = launch(in.data(), static_cast<int32_t>(in.size()), out.data(),
                              static_cast<int32_t>(out.size()), current_stream(device));
    if (status != 0) results->clear();
    return status == 0;
  }

  static void* current_stream(const c10::Device& device) {
#ifdef KF_WITH_CUDA
    if (device.is_cuda()) return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#endif
    (void)device;
    return nullptr;
  }
};

}  // namespace kf
