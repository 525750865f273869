// kforge_cast::native: a packaged kernel inside a compiled graph with no Python on the way in.
//
// The graph calls this op with the card's tensors and a slot number chosen when the graph was
// traced. A slot holds one kernel's kf_launch and its card's exact layouts. When every input
// still has the card's shape, stride, dtype, device, storage offset and 16-byte alignment, the
// outputs are allocated through torch's allocator, the descriptors are filled from the slot's
// templates and kf_launch runs on the current stream: no Python, no host sync, so CUDA graphs
// capture it. Anything else (a layout miss, a slot that was deactivated, a kernel reporting
// failure) is handed to kforge_cast::kernel, the Python op that counts the reason and runs the
// original computation, so this file only ever adds a faster way to the same results.
//
// Slots are set up from Python through the extern "C" functions below (ctypes); they are never
// freed, because a compiled graph may outlive the .cast that traced it.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#ifdef KF_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr int kMaxDims = 8;
constexpr int64_t kMaxSlots = 1 << 16;
// One tensor's layout as Python passes it: ndim, ABI dtype, storage offset, aligned16, sizes, strides.
constexpr int kLayoutWords = 4 + 2 * kMaxDims;

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

struct Slot {
  LaunchFn launch;
  c10::DeviceType device_type;
  std::vector<Layout> inputs;
  std::vector<Layout> outputs;
  int64_t workspace_bytes;
  KfTensor workspace_descriptor;
  std::string token;
  std::string card_id;
  std::atomic<bool> active{true};
  std::atomic<int64_t> hits{0};
};

std::array<std::atomic<Slot*>, kMaxSlots> g_slots{};
std::atomic<int64_t> g_next_slot{0};

// ABI dtype codes (kf_dtype) to torch's scalar types; -1 marks a code the contract lacks.
bool scalar_type_of(int64_t code, c10::ScalarType* out) {
  static const c10::ScalarType table[] = {
      c10::ScalarType::Float, c10::ScalarType::Half, c10::ScalarType::BFloat16,
      c10::ScalarType::Double, c10::ScalarType::Int, c10::ScalarType::Long,
      c10::ScalarType::Bool, c10::ScalarType::Byte, c10::ScalarType::Char};
  if (code < 0 || code >= static_cast<int64_t>(sizeof(table) / sizeof(table[0]))) return false;
  *out = table[code];
  return true;
}

bool read_layout(const int64_t* words, Layout* layout) {
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

bool matches(const at::Tensor& tensor, const Layout& expected, c10::DeviceType device_type) {
  return tensor.defined() && tensor.device().type() == device_type &&
         tensor.scalar_type() == expected.dtype && tensor.sizes().equals(expected.sizes) &&
         tensor.strides().equals(expected.strides) &&
         tensor.storage_offset() == expected.storage_offset &&
         ((reinterpret_cast<uintptr_t>(tensor.data_ptr()) % 16 == 0) == expected.aligned16);
}

void* current_stream(const c10::Device& device) {
#ifdef KF_WITH_CUDA
  if (device.is_cuda()) return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#endif
  (void)device;
  return nullptr;
}

// The card's kernel on matched inputs; false (nothing returned) when it cannot or did not run.
bool try_launch(Slot& slot, at::TensorList inputs, std::vector<at::Tensor>* outputs) {
  if (!slot.active.load(std::memory_order_relaxed) || inputs.size() != slot.inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!matches(inputs[i], slot.inputs[i], slot.device_type)) return false;
  }
  c10::Device device = inputs.empty() ? c10::Device(slot.device_type) : inputs[0].device();
  c10::OptionalDeviceGuard guard(device);
  std::vector<KfTensor> in_descriptors(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    in_descriptors[i] = slot.inputs[i].descriptor;
    in_descriptors[i].data = inputs[i].data_ptr();
  }
  std::vector<KfTensor> out_descriptors(slot.outputs.size() + (slot.workspace_bytes ? 1 : 0));
  outputs->reserve(slot.outputs.size());
  for (size_t i = 0; i < slot.outputs.size(); ++i) {
    const Layout& layout = slot.outputs[i];
    outputs->push_back(at::empty_strided(layout.sizes, layout.strides,
                                         at::TensorOptions().dtype(layout.dtype).device(device)));
    out_descriptors[i] = layout.descriptor;
    out_descriptors[i].data = outputs->back().data_ptr();
  }
  at::Tensor workspace;  // kept alive until kf_launch has queued its work on the stream
  if (slot.workspace_bytes) {
    workspace = at::empty_strided({slot.workspace_bytes}, {1},
                                  at::TensorOptions().dtype(c10::ScalarType::Byte).device(device));
    out_descriptors.back() = slot.workspace_descriptor;
    out_descriptors.back().data = workspace.data_ptr();
  }
  const int status = slot.launch(in_descriptors.data(), static_cast<int32_t>(in_descriptors.size()),
                                 out_descriptors.data(), static_cast<int32_t>(out_descriptors.size()),
                                 current_stream(device));
  if (status != 0) {
    outputs->clear();
    return false;
  }
  slot.hits.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::vector<at::Tensor> run_python_op(at::TensorList inputs, const Slot& slot) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("kforge_cast::kernel", "");
  torch::jit::Stack stack;
  stack.emplace_back(inputs.vec());
  stack.emplace_back(slot.token);
  stack.emplace_back(slot.card_id);
  op.callBoxed(&stack);
  return stack.at(0).toTensorVector();
}

std::vector<at::Tensor> native_kernel(at::TensorList inputs, int64_t slot_id) {
  Slot* slot = slot_id >= 0 && slot_id < kMaxSlots ? g_slots[slot_id].load(std::memory_order_acquire) : nullptr;
  TORCH_CHECK(slot != nullptr, "kforge_cast::native: no kernel is loaded in slot ", slot_id);
  std::vector<at::Tensor> outputs;
  if (try_launch(*slot, inputs, &outputs)) return outputs;
  return run_python_op(inputs, *slot);
}

}  // namespace

TORCH_LIBRARY_IMPL(kforge_cast, CPU, m) { m.impl("native", &native_kernel); }
TORCH_LIBRARY_IMPL(kforge_cast, CUDA, m) { m.impl("native", &native_kernel); }

#define KFG_EXPORT __attribute__((visibility("default")))

extern "C" {

// Bumped when a signature below changes, so Python never calls a library it does not match.
KFG_EXPORT int32_t kfg_abi_version() { return 1; }

KFG_EXPORT int32_t kfg_has_cuda() {
#ifdef KF_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

// A slot for one kernel; -1 when a layout cannot be expressed or the table is full.
KFG_EXPORT int64_t kfg_add_slot(void* launch, int32_t is_cuda, int32_t n_inputs, const int64_t* input_layouts,
                     int32_t n_outputs, const int64_t* output_layouts, int64_t workspace_bytes,
                     const char* token, const char* card_id) {
  if (launch == nullptr || n_inputs < 0 || n_outputs < 0 || workspace_bytes < 0) return -1;
  auto slot = std::make_unique<Slot>();
  slot->launch = reinterpret_cast<LaunchFn>(launch);
  slot->device_type = is_cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  slot->inputs.resize(n_inputs);
  slot->outputs.resize(n_outputs);
  for (int32_t i = 0; i < n_inputs; ++i) {
    if (!read_layout(input_layouts + i * kLayoutWords, &slot->inputs[i])) return -1;
  }
  for (int32_t i = 0; i < n_outputs; ++i) {
    if (!read_layout(output_layouts + i * kLayoutWords, &slot->outputs[i])) return -1;
  }
  slot->workspace_bytes = workspace_bytes;
  std::memset(&slot->workspace_descriptor, 0, sizeof(KfTensor));
  slot->workspace_descriptor.shape[0] = workspace_bytes;
  slot->workspace_descriptor.stride[0] = 1;
  slot->workspace_descriptor.ndim = 1;
  slot->workspace_descriptor.dtype = 7;  // KF_U8
  slot->token = token;
  slot->card_id = card_id;
  const int64_t id = g_next_slot.fetch_add(1);
  if (id >= kMaxSlots) return -1;
  g_slots[id].store(slot.release(), std::memory_order_release);
  return id;
}

KFG_EXPORT void kfg_set_active(int64_t slot_id, int32_t active) {
  if (slot_id < 0 || slot_id >= kMaxSlots) return;
  if (Slot* slot = g_slots[slot_id].load(std::memory_order_acquire)) slot->active.store(active != 0);
}

KFG_EXPORT int64_t kfg_hits(int64_t slot_id) {
  if (slot_id < 0 || slot_id >= kMaxSlots) return 0;
  Slot* slot = g_slots[slot_id].load(std::memory_order_acquire);
  return slot ? slot->hits.load() : 0;
}

}  // extern "C"
