// kforge_cast::native: a packaged kernel inside a compiled graph with no Python on the way in.
//
// The graph calls this op with the card's tensors and a slot number chosen when the graph was
// traced. A slot holds one kernel (kf_native.h) and the names its Python twin knows it by. When
// every input still has the card's shape, stride, dtype, device, storage offset and alignment,
// the kernel runs here. Anything else (a layout miss, a slot switched off with its cast, a kernel
// reporting failure) goes to kforge_cast::kernel, the Python op that counts the reason and runs
// the original computation, so this file only adds a faster way to the same results.
//
// Slots are set up from Python through the extern "C" functions below (ctypes); they are never
// freed, because a compiled graph may outlive the .cast that traced it.

#include "kf_native.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>

namespace {

constexpr int64_t kMaxSlots = 1 << 16;

struct Slot {
  kf::Kernel kernel;
  std::string token;
  std::string card_id;
  std::atomic<bool> active{true};
  std::atomic<int64_t> hits{0};
};

std::array<std::atomic<Slot*>, kMaxSlots> g_slots{};
std::atomic<int64_t> g_next_slot{0};

Slot* find_slot(int64_t id) {
  return id >= 0 && id < kMaxSlots ? g_slots[id].load(std::memory_order_acquire) : nullptr;
}

bool try_launch(Slot& slot, at::TensorList inputs, std::vector<at::Tensor>* outputs) {
  const kf::Kernel& kernel = slot.kernel;
  if (!slot.active.load(std::memory_order_relaxed) || inputs.size() != kernel.inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (kf::check(inputs[i], kernel.inputs[i], kernel.device_type) != kf::kMatch) return false;
  }
  if (!kernel.run(inputs, outputs)) return false;
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
  Slot* slot = find_slot(slot_id);
  TORCH_CHECK(slot != nullptr, "kforge_cast::native: no kernel is loaded in slot " + std::to_string(slot_id));
  std::vector<at::Tensor> outputs;
  if (try_launch(*slot, inputs, &outputs)) return outputs;
  return run_python_op(inputs, *slot);
}

}  // namespace

TORCH_LIBRARY_IMPL(kforge_cast, CPU, m) { m.impl("native", &native_kernel); }
TORCH_LIBRARY_IMPL(kforge_cast, CUDA, m) { m.impl("native", &native_kernel); }

extern "C" {

// Bumped when a signature below changes, so Python never calls a library it does not match.
KF_EXPORT int32_t kfg_abi_version() { return 1; }

KF_EXPORT int32_t kfg_has_cuda() { return KF_HAS_CUDA; }

// A slot for one kernel; -1 when a layout cannot be expressed or the table is full.
KF_EXPORT int64_t kfg_add_slot(void* launch, int32_t is_cuda, int32_t n_inputs, const int64_t* input_layouts,
                               int32_t n_outputs, const int64_t* output_layouts, int64_t workspace_bytes,
                               const char* token, const char* card_id) {
  auto slot = std::make_unique<Slot>();
  if (!slot->kernel.init(launch, is_cuda, n_inputs, input_layouts, n_outputs, output_layouts, workspace_bytes)) {
    return -1;
  }
  slot->token = token;
  slot->card_id = card_id;
  const int64_t id = g_next_slot.fetch_add(1);
  if (id >= kMaxSlots) return -1;
  g_slots[id].store(slot.release(), std::memory_order_release);
  return id;
}

KF_EXPORT void kfg_set_active(int64_t slot_id, int32_t active) {
  if (Slot* slot = find_slot(slot_id)) slot->active.store(active != 0);
}

KF_EXPORT int64_t kfg_hits(int64_t slot_id) {
  Slot* slot = find_slot(slot_id);
  return slot ? slot->hits.load() : 0;
}

}  // extern "C"
