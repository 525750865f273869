// The eager guard in C++: an aten overload's packaged kernels matched on the dispatcher's own stack.
//
// A front sits at the dispatch key where the Python override (packager.aten_dispatch) is
// registered, on top of it. Each of its kernels knows the exact stack its card's call produces:
// the non-tensor values (learned by boxing the card's own call, so the dispatcher's normalisation
// is the one compared) and which stack slot holds which of the card's tensors, with their
// layouts. A live call then goes one of three ways, all decided here:
//   - every slot as learned, every tensor the card's: the kernel runs (kf_native.h);
//   - some value or tensor differs for every kernel: the original kernel runs, as it was before
//     the cast, with the same dispatch key set (each kernel counts the first difference);
//   - anything this file does not judge (a tensor subclass or fake tensor, a call autograd must
//     record through a decomposition): the Python override, which decides as it always did.
// So the front never changes a result: it only makes the two common cases cheap.

#include "kf_native.h"

#include <ATen/ScalarOps.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace {

constexpr int kKernelError = kf::kReasons;  // counted beside the misses
constexpr int kCounters = kf::kReasons + 1;  // [0] hits, [1..7] misses by kf::Miss, [8] kernel errors

enum class Result : int32_t { kSingle = 0, kTuple = 1, kList = 2 };

// One stack slot of a card's call: one of its tensors, a list of them, a list of tensors and Nones
// (`Tensor?[]`: the indices of `x[idx]` or `x[:, idx]`), a value, or a Python number in a Tensor
// slot (`x * 2`), which reaches the dispatcher as a wrapped number: a 0-dim CPU tensor flagged for
// type promotion, whose value the card fixes (kept in `value`, its dtype in `dtype`).
struct Expected {
  enum Kind { kTensor, kTensorList, kOptionalTensorList, kValue, kWrappedNumber } kind = kValue;
  std::vector<int> tensors;  // the card's tensor indices held here; kAbsent for a `Tensor?[]` None
  c10::IValue value;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
};

constexpr int kAbsent = -2;  // a None in a `Tensor?[]` slot (an unknown tensor is -1)

// A `Tensor?[]` item that holds no tensor: None, or (as aten's own indexing passes the dims it
// skips) an undefined tensor.
bool absent(const c10::IValue& item) { return item.isNone() || (item.isTensor() && !item.toTensor().defined()); }

// A list of tensors and Nones holding at least one tensor: how a `Tensor?[]` argument is boxed.
bool optional_tensor_list(const c10::IValue& v) {
  if (!v.isList() || v.isTensorList()) return false;
  bool any = false;
  for (const c10::IValue& item : v.toListRef()) {
    if (!item.isTensor() && !item.isNone()) return false;
    any = any || !absent(item);
  }
  return any;
}

struct EagerKernel {
  kf::Kernel kernel;
  std::vector<Expected> stack;
  std::atomic<int64_t> counters[kCounters] = {};
};

struct Front {
  c10::OperatorHandle op;
  c10::DispatchKey backend_key;
  c10::DispatchKey dispatch_key;
  Result result;
  std::optional<c10::SafeKernelFunction> original;  // the kernel before the cast
  std::optional<c10::SafeKernelFunction> python;    // the Python override beneath this front
  std::vector<std::unique_ptr<EagerKernel>> kernels;
  std::unique_ptr<torch::Library> library;  // set while installed
  bool learned_all = true;

  Front(c10::OperatorHandle handle, c10::DispatchKey backend, c10::DispatchKey key, Result kind)
      : op(std::move(handle)), backend_key(backend), dispatch_key(key), result(kind) {}
};

std::mutex g_fronts_lock;
std::vector<std::unique_ptr<Front>> g_fronts;  // never freed: counters outlive an install
thread_local std::vector<c10::IValue> t_learned;
thread_local std::vector<at::Tensor> t_numbers;  // wrapped numbers made for the learner, kept until learned

Front* find_front(int64_t id) {
  std::lock_guard<std::mutex> hold(g_fronts_lock);
  return id >= 0 && id < static_cast<int64_t>(g_fronts.size()) ? g_fronts[id].get() : nullptr;
}

// ---- values ---------------------------------------------------------------------------------

bool concrete_int(const c10::IValue& v, int64_t* out) {
  if (v.isInt()) {
    *out = v.toInt();
    return true;
  }
  if (v.isSymInt()) {
    if (auto known = v.toSymInt().maybe_as_int()) {
      *out = *known;
      return true;
    }
  }
  return false;
}

// The values a card's stack may hold outside its tensors, compared exactly.
bool supported_value(const c10::IValue& v) {
  int64_t ignored = 0;
  if (v.isNone() || v.isBool() || v.isDouble() || v.isString() || v.isDevice() || concrete_int(v, &ignored)) {
    return true;
  }
  if (v.isList() && !v.isTensorList()) {
    for (const c10::IValue& item : v.toListRef()) {
      if (item.isTensor() || !supported_value(item)) return false;
    }
    return true;
  }
  return false;
}

bool same_value(const c10::IValue& live, const c10::IValue& expected) {
  int64_t a = 0, b = 0;
  if (expected.isNone()) return live.isNone();
  if (concrete_int(expected, &b)) return concrete_int(live, &a) && a == b;
  if (expected.isDouble()) {
    if (!live.isDouble()) return false;
    const double x = live.toDouble(), y = expected.toDouble();
    return std::memcmp(&x, &y, sizeof(double)) == 0;  // -0.0 and NaN payloads included
  }
  if (expected.isBool()) return live.isBool() && live.toBool() == expected.toBool();
  if (expected.isString()) return live.isString() && live.toStringRef() == expected.toStringRef();
  if (expected.isDevice()) {  // a card keeps a device's type alone: any index of it is the same call
    if (!live.isDevice()) return false;
    const c10::Device want = expected.toDevice(), got = live.toDevice();
    return want.has_index() ? got == want : got.type() == want.type();
  }
  if (expected.isList()) {
    if (!live.isList() || live.isTensorList()) return false;
    const auto xs = live.toListRef(), ys = expected.toListRef();
    if (xs.size() != ys.size()) return false;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!same_value(xs[i], ys[i])) return false;
    }
    return true;
  }
  return false;
}

// A wrapped number's value as the card keeps it (double, int64 or bool); None for any other tensor.
std::optional<c10::IValue> wrapped_number(const at::Tensor& t) {
  if (!t.defined() || !t.unsafeGetTensorImpl()->is_wrapped_number() || t.dim() != 0 || !t.device().is_cpu() ||
      !t.has_storage()) {
    return std::nullopt;
  }
  switch (t.scalar_type()) {
    case c10::ScalarType::Double: return c10::IValue(*t.const_data_ptr<double>());
    case c10::ScalarType::Long: return c10::IValue(*t.const_data_ptr<int64_t>());
    case c10::ScalarType::Bool: return c10::IValue(*t.const_data_ptr<bool>());
    default: return std::nullopt;  // complex numbers stay with the Python override
  }
}

// ---- the call ---------------------------------------------------------------------------------

// Whether a tensor is one this file may judge: a plain dense tensor with storage, outside any
// tracing or subclass machinery (those keep to the Python override).
bool plain(const at::Tensor& t) {
  if (!t.defined()) return true;
  const c10::DispatchKeySet keys = t.key_set();
  return t.has_storage() && !keys.has(c10::DispatchKey::Python) &&
         !keys.has(c10::DispatchKey::PythonTLSSnapshot) && !keys.has(c10::DispatchKey::Functionalize);
}

enum class Route { kKernel, kOriginal, kPython };

// Looks over the call's tensors once: those the front cannot judge go to Python; a call autograd
// must record through a decomposition runs the original (what the Python override does too).
Route screen(const Front& front, c10::ArrayRef<c10::IValue> args) {
  const bool composite = front.dispatch_key == c10::DispatchKey::CompositeImplicitAutograd;
  const bool grad = composite && at::GradMode::is_enabled();
  bool wants_grad = false;
  for (const c10::IValue& v : args) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!plain(t)) return Route::kPython;
      wants_grad = wants_grad || (grad && t.requires_grad());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        if (!plain(t)) return Route::kPython;
        wants_grad = wants_grad || (grad && t.requires_grad());
      }
    } else if (v.isList()) {  // a `Tensor?[]`: its tensors judged as any other
      for (const c10::IValue& item : v.toListRef()) {
        if (!item.isTensor()) continue;
        const at::Tensor& t = item.toTensor();
        if (!plain(t)) return Route::kPython;
        wants_grad = wants_grad || (grad && t.requires_grad());
      }
    }
  }
  return wants_grad ? Route::kOriginal : Route::kKernel;
}

kf::Miss match(const EagerKernel& k, c10::ArrayRef<c10::IValue> args, std::vector<at::Tensor>* tensors) {
  if (args.size() != k.stack.size()) return kf::kArgs;
  tensors->assign(k.kernel.inputs.size(), at::Tensor());
  for (size_t i = 0; i < args.size(); ++i) {
    const Expected& e = k.stack[i];
    const c10::IValue& v = args[i];
    if (e.kind == Expected::kValue) {
      if (!same_value(v, e.value)) return kf::kArgs;
      continue;
    }
    if (e.kind == Expected::kWrappedNumber) {
      if (!v.isTensor() || v.toTensor().scalar_type() != e.dtype) return kf::kArgs;
      const std::optional<c10::IValue> number = wrapped_number(v.toTensor());
      if (!number || !same_value(*number, e.value)) return kf::kArgs;
      continue;
    }
    if (e.kind == Expected::kTensor) {
      if (!v.isTensor()) return kf::kArgs;
      const int index = e.tensors[0];
      const kf::Miss miss = kf::check(v.toTensor(), k.kernel.inputs[index], k.kernel.device_type);
      if (miss != kf::kMatch) return miss;
      (*tensors)[index] = v.toTensor();
      continue;
    }
    if (e.kind == Expected::kOptionalTensorList) {
      if (!v.isList() || v.isTensorList()) return kf::kArgs;
      const auto items = v.toListRef();
      if (items.size() != e.tensors.size()) return kf::kArgs;
      for (size_t j = 0; j < items.size(); ++j) {
        const int index = e.tensors[j];
        if (absent(items[j]) != (index == kAbsent)) return kf::kArgs;
        if (index == kAbsent) continue;
        const kf::Miss miss = kf::check(items[j].toTensor(), k.kernel.inputs[index], k.kernel.device_type);
        if (miss != kf::kMatch) return miss;
        (*tensors)[index] = items[j].toTensor();
      }
      continue;
    }
    if (!v.isTensorList()) return kf::kArgs;
    const std::vector<at::Tensor> list = v.toTensorList().vec();
    if (list.size() != e.tensors.size()) return kf::kArgs;
    for (size_t j = 0; j < list.size(); ++j) {
      const int index = e.tensors[j];
      const kf::Miss miss = kf::check(list[j], k.kernel.inputs[index], k.kernel.device_type);
      if (miss != kf::kMatch) return miss;
      (*tensors)[index] = list[j];
    }
  }
  return kf::kMatch;
}

void push_results(Result kind, std::vector<at::Tensor>&& outputs, torch::jit::Stack* stack) {
  if (kind == Result::kList) {
    stack->emplace_back(std::move(outputs));
    return;
  }
  if (kind == Result::kSingle) outputs.resize(1);
  for (at::Tensor& t : outputs) stack->emplace_back(std::move(t));
}

class FrontKernel final : public c10::OperatorKernel {
 public:
  explicit FrontKernel(Front* front) : front_(front) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    Front& front = *front_;
    const size_t n_args = op.schema().arguments().size();
    const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, n_args);
    const Route route = screen(front, args);
    if (route == Route::kPython) return front.python->callBoxed(op, keys, stack);
    if (route == Route::kOriginal) return front.original->callBoxed(op, keys, stack);
    std::vector<at::Tensor> tensors;
    std::vector<kf::Miss> misses(front.kernels.size(), kf::kMatch);
    for (size_t i = 0; i < front.kernels.size(); ++i) {
      EagerKernel& k = *front.kernels[i];
      misses[i] = match(k, args, &tensors);
      if (misses[i] != kf::kMatch) continue;
      // an in-place call whose written tensor shares memory with another: the Python override
      // runs it on eager and counts why
      if (k.kernel.aliased_input_shares_memory(tensors)) return front.python->callBoxed(op, keys, stack);
      std::vector<at::Tensor> outputs;
      if (k.kernel.run(tensors, &outputs)) {
        k.counters[0].fetch_add(1, std::memory_order_relaxed);
        torch::jit::drop(*stack, n_args);
        push_results(front.result, std::move(outputs), stack);
        return;
      }
      k.counters[kKernelError].fetch_add(1, std::memory_order_relaxed);
      return front.original->callBoxed(op, keys, stack);
    }
    for (size_t i = 0; i < front.kernels.size(); ++i) {
      front.kernels[i]->counters[misses[i]].fetch_add(1, std::memory_order_relaxed);
    }
    front.original->callBoxed(op, keys, stack);
  }

 private:
  Front* front_;
};

// What a front's hit costs, measured: the same decision and launch path with this kf_launch.
int noop_launch(const kf::KfTensor*, int32_t, kf::KfTensor*, int32_t, void*) { return 0; }

// Records the stack a learner op was called with, then stops the call.
void learn_stack(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const size_t n_args = op.schema().arguments().size();
  const auto args = torch::jit::last(*stack, n_args);
  t_learned.assign(args.begin(), args.end());
  TORCH_CHECK(false, "kforge_cast: arguments learned");
}

std::mutex g_learners_lock;
std::vector<std::unique_ptr<torch::Library>> g_learners;

}  // namespace

extern "C" {

KF_EXPORT int32_t kfe_abi_version() { return 2; }

KF_EXPORT int32_t kfe_has_cuda() { return KF_HAS_CUDA; }

// Makes `kforge_cast::<name>` (defined from Python with the overload's schema) record its stack
// at the Meta key: calling it with meta tensors shows how the dispatcher boxes a card's call.
KF_EXPORT int32_t kfe_register_learner(const char* name) {
  try {
    auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "kforge_cast",
                                                    c10::DispatchKey::Meta, __FILE__, __LINE__);
    library->impl(name, torch::CppFunction::makeFromBoxedFunction<&learn_stack>());
    std::lock_guard<std::mutex> hold(g_learners_lock);
    g_learners.push_back(std::move(library));
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

// A wrapped number, as the Python argument parser makes one for `x * 2`, for a learner's call
// (Python cannot flag a tensor so, and the learner's own parser refuses a number where its schema
// wants a Tensor): kind 0 a float (`real`), 1 an int, 2 a bool (`integer`). The TensorImpl's
// address, kept alive on this thread until the next kernel is added; null on failure.
KF_EXPORT void* kfe_wrapped_number(int32_t kind, int64_t integer, double real) {
  try {
    const c10::Scalar value = kind == 0 ? c10::Scalar(real) : kind == 1 ? c10::Scalar(integer)
                                                                         : c10::Scalar(integer != 0);
    at::Tensor number = c10::scalar_to_tensor(value);
    number.unsafeGetTensorImpl()->set_wrapped_number(true);
    t_numbers.push_back(number);
    return number.unsafeGetTensorImpl();
  } catch (const std::exception&) {
    return nullptr;
  }
}

// A front for one aten overload; it keeps the kernel `backend_key` runs now as the original.
KF_EXPORT int64_t kfe_front_new(const char* name, const char* overload, const char* backend_key,
                                const char* dispatch_key, int32_t result) {
  try {
    auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
    if (!handle || result < 0 || result > 2) return -1;
    auto front = std::make_unique<Front>(*handle, c10::parseDispatchKey(backend_key),
                                         c10::parseDispatchKey(dispatch_key), static_cast<Result>(result));
    front->original = front->op.getComputedKernelForDispatchKey(front->backend_key);
    std::lock_guard<std::mutex> hold(g_fronts_lock);
    g_fronts.push_back(std::move(front));
    return static_cast<int64_t>(g_fronts.size()) - 1;
  } catch (const std::exception&) {
    return -1;
  }
}

// Adds a kernel from the stack the last learner call on this thread recorded, whose tensors are
// `tensor_ids` (TensorImpl addresses in the card's order); `output_aliases` gives, per output, the
// input an in-place op writes and returns (-1 for a fresh output). Returns its index, -1 for a layout
// outside the contract, -2 when the stack holds what the front cannot compare (the whole front
// then stays off and the Python override serves the op).
KF_EXPORT int32_t kfe_add_kernel(int64_t front_id, void* launch, int32_t is_cuda, int32_t n_inputs,
                                 const int64_t* input_layouts, int32_t n_outputs, const int64_t* output_layouts,
                                 int64_t workspace_bytes, const int64_t* tensor_ids, const int32_t* output_aliases) {
  Front* front = find_front(front_id);
  if (front == nullptr) return -1;
  auto k = std::make_unique<EagerKernel>();
  std::vector<c10::IValue> learned;
  learned.swap(t_learned);
  t_numbers.clear();
  if (!k->kernel.init(launch, is_cuda, n_inputs, input_layouts, n_outputs, output_layouts, workspace_bytes,
                      output_aliases)) {
    front->learned_all = false;
    return -1;
  }
  std::vector<bool> seen(n_inputs, false);
  auto index_of = [&](const at::Tensor& t) -> int {
    const auto address = reinterpret_cast<int64_t>(t.unsafeGetTensorImpl());
    for (int32_t i = 0; i < n_inputs; ++i) {
      if (tensor_ids[i] == address && !seen[i]) {
        seen[i] = true;
        return i;
      }
    }
    return -1;
  };
  bool ok = !learned.empty() || n_inputs == 0;
  for (const c10::IValue& v : learned) {
    Expected e;
    if (v.isTensor()) {
      const int index = index_of(v.toTensor());
      const std::optional<c10::IValue> number = index < 0 ? wrapped_number(v.toTensor()) : std::nullopt;
      if (number) {
        e.kind = Expected::kWrappedNumber;
        e.value = *number;
        e.dtype = v.toTensor().scalar_type();
      } else {
        e.kind = Expected::kTensor;
        e.tensors.push_back(index);
      }
    } else if (v.isTensorList()) {
      e.kind = Expected::kTensorList;
      for (const at::Tensor& t : v.toTensorList().vec()) e.tensors.push_back(index_of(t));
    } else if (optional_tensor_list(v)) {
      e.kind = Expected::kOptionalTensorList;
      for (const c10::IValue& item : v.toListRef()) {
        e.tensors.push_back(absent(item) ? kAbsent : index_of(item.toTensor()));
      }
    } else if (supported_value(v)) {
      e.value = v;
    } else {
      ok = false;
    }
    for (int index : e.tensors) ok = ok && (index >= 0 || index == kAbsent);
    k->stack.push_back(std::move(e));
  }
  for (bool s : seen) ok = ok && s;
  if (!ok) {
    front->learned_all = false;
    return -2;
  }
  front->kernels.push_back(std::move(k));
  return static_cast<int32_t>(front->kernels.size()) - 1;
}

// Registers the front over the Python override now at its dispatch key. 0 on success; -1 when a
// kernel could not be learned, or the registration failed (the Python override then serves).
KF_EXPORT int32_t kfe_install(int64_t front_id) {
  Front* front = find_front(front_id);
  if (front == nullptr || !front->learned_all || front->kernels.empty() || front->library) return -1;
  try {
    front->python = front->op.getComputedKernelForDispatchKey(front->backend_key);
    const std::string& name = front->op.schema().name();
    const std::string& overload = front->op.schema().overload_name();
    std::string impl_name = name.substr(name.find("::") + 2);
    if (!overload.empty()) impl_name += "." + overload;
    auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", front->dispatch_key,
                                                    __FILE__, __LINE__);
    library->impl(impl_name.c_str(),
                  torch::CppFunction::makeFromBoxedFunctor(std::make_unique<FrontKernel>(front)));
    front->library = std::move(library);
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

// Frees a front that was never installed (one made to measure a hit, or one that could not learn
// its kernels); an installed front stays, since its counters outlive the install.
KF_EXPORT void kfe_release(int64_t front_id) {
  std::lock_guard<std::mutex> hold(g_fronts_lock);
  if (front_id >= 0 && front_id < static_cast<int64_t>(g_fronts.size()) && g_fronts[front_id] &&
      !g_fronts[front_id]->python) {
    g_fronts[front_id].reset();
  }
}

// Takes the front off; the Python override beneath it serves again until it is removed too.
KF_EXPORT void kfe_uninstall(int64_t front_id) {
  if (Front* front = find_front(front_id)) front->library.reset();
}

// The address of a kf_launch that does nothing, for kfe_time_hit.
KF_EXPORT void* kfe_noop_launch() { return reinterpret_cast<void*>(&noop_launch); }

// Mean microseconds of one hit of kernel `index` (screen, match, outputs allocated, descriptors
// filled, kf_launch called) over `calls` calls, on its learned stack holding the tensors whose
// TensorImpl addresses are given in the card's order (the caller keeps them alive). Each call
// starts from a copy of the stack, as the dispatcher hands each call a fresh one. -1 on a miss.
KF_EXPORT double kfe_time_hit(int64_t front_id, int32_t index, const int64_t* tensor_impls, int32_t n_tensors,
                              int32_t calls) {
  Front* front = find_front(front_id);
  if (front == nullptr || index < 0 || index >= static_cast<int32_t>(front->kernels.size()) || calls <= 0) {
    return -1.0;
  }
  const EagerKernel& k = *front->kernels[index];
  std::vector<at::Tensor> given;
  for (int32_t i = 0; i < n_tensors; ++i) {
    given.emplace_back(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(
        reinterpret_cast<c10::TensorImpl*>(tensor_impls[i])));
  }
  torch::jit::Stack stack;
  for (const Expected& e : k.stack) {
    if (e.kind == Expected::kValue) {
      stack.push_back(e.value);
    } else if (e.kind == Expected::kWrappedNumber) {
      at::Tensor number = c10::scalar_to_tensor(e.value.toScalar());
      number.unsafeGetTensorImpl()->set_wrapped_number(true);
      stack.emplace_back(std::move(number));
    } else if (e.kind == Expected::kTensor) {
      stack.emplace_back(given.at(e.tensors[0]));
    } else if (e.kind == Expected::kOptionalTensorList) {
      c10::List<std::optional<at::Tensor>> list;
      for (int t : e.tensors) list.push_back(t == kAbsent ? std::nullopt : std::optional<at::Tensor>(given.at(t)));
      stack.emplace_back(list);
    } else {
      c10::List<at::Tensor> list;
      for (int t : e.tensors) list.push_back(given.at(t));
      stack.emplace_back(list);
    }
  }
  std::vector<at::Tensor> tensors;
  const auto start = std::chrono::steady_clock::now();
  for (int32_t c = 0; c < calls; ++c) {
    torch::jit::Stack call(stack);
    const c10::ArrayRef<c10::IValue> args(call);
    std::vector<at::Tensor> outputs;
    if (screen(*front, args) != Route::kKernel || match(k, args, &tensors) != kf::kMatch ||
        !k.kernel.run(tensors, &outputs)) {
      return -1.0;
    }
  }
  const std::chrono::duration<double, std::micro> spent = std::chrono::steady_clock::now() - start;
  return spent.count() / calls;
}

// Counters of one kernel: out[0] hits, out[1..7] misses by reason, out[8] kernel errors.
KF_EXPORT int32_t kfe_counts(int64_t front_id, int32_t kernel, int64_t* out) {
  Front* front = find_front(front_id);
  if (front == nullptr || kernel < 0 || kernel >= static_cast<int32_t>(front->kernels.size())) return -1;
  for (int i = 0; i < kCounters; ++i) out[i] = front->kernels[kernel]->counters[i].load();
  return 0;
}

}  // extern "C"
