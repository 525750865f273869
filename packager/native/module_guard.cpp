// The module guard in C++: a module card's hit decided and launched with no Python per call.
//
// packager.module_dispatch.ModuleOverride asks a front first on every eager call made with
// positional arguments only. A front serves a call only while the module is exactly as it was
// when the Python guard last matched one of its kernels there (the kernel is then "armed"):
// every slot of the module tree (instance attributes, parameters, buffers, submodules, each
// with its name) holds the very same object, and every list slot the very same items. While
// that holds, the module's side of the key is what Python matched, so only tensors remain to
// check, on every call: the call's arguments and the module's state tensors against the card's
// layouts (`param.data = ...` changes a tensor in place). The front holds strong references to
// what it compares, so no identity it remembers can be reused by another object.
//
// A call whose first argument is a tensor of a shape no kernel of the module takes is a miss
// whatever else it holds: once told the kernels' first shapes and the original forward, the
// front counts it (a shape miss for every kernel, as the Python guard would) and calls the
// original forward itself.
//
// Anything else returns the `declined` marker and the Python guard decides as it always did: a
// changed module (which also disarms every kernel until Python matches again), a tensor
// subclass, other arguments, a call autograd must record, a kernel error. Python holds the GIL
// throughout, so a front needs no lock of its own.

#include <Python.h>

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/python_variable.h>

#include "kf_native.h"

#include <memory>
#include <utility>
#include <vector>

namespace {

constexpr int kAbiVersion = 1;

// An owned reference.
struct Ref {
  PyObject* object = nullptr;
  explicit Ref(PyObject* borrowed) : object(borrowed) { Py_XINCREF(object); }
  Ref(const Ref& other) : Ref(other.object) {}
  Ref& operator=(const Ref&) = delete;
  ~Ref() { Py_XDECREF(object); }
};

// What a walk of the module tree saw, in walk order: the name and value of every slot, and the
// items of every list among them.
struct Snapshot {
  std::vector<Ref> slots;
};

// One armed kernel: where each of the card's tensors comes from on a call.
struct Armed {
  int kernel = -1;
  Py_ssize_t n_args = 0;
  std::vector<int> from_arg;           // per card tensor: the call argument holding it, or -1
  std::vector<at::Tensor> from_state;  // per card tensor: the module's tensor when from_arg is -1
};

struct ModuleKernel {
  kf::Kernel kernel;
  int64_t hits = 0;
  int64_t shape_misses = 0;
};

struct State {
  Ref declined{nullptr};                    // what hit() returns to hand a call back to Python
  std::vector<PyTypeObject*> tensor_types;  // the exact types a card's tensor may have
  std::vector<std::vector<int64_t>> first_shapes;  // every kernel's first argument's shape
  Ref original{nullptr};                    // the module class's forward; null: misses go to Python
  std::vector<std::unique_ptr<ModuleKernel>> kernels;
  std::unique_ptr<Snapshot> snapshot;  // null: nothing armed
  std::vector<Armed> armed;
};

struct FrontObject {
  PyObject_HEAD
  State* state;
};

// Visits every slot of the module tree as (name, value) pairs, then each list slot's items, in a
// fixed order; `visit` returns false to stop. False when the walk stopped or met something that
// is not a module with a __dict__ (an error is never left set).
template <class Visit>
bool walk(PyObject* module, Visit&& visit) {
  static PyObject* const tables[] = {PyUnicode_InternFromString("_parameters"),
                                     PyUnicode_InternFromString("_buffers"),
                                     PyUnicode_InternFromString("_modules")};
  std::vector<PyObject*> pending{module};
  while (!pending.empty()) {
    PyObject* current = pending.back();
    pending.pop_back();
    PyObject* dict = PyObject_GenericGetDict(current, nullptr);
    if (dict == nullptr || !PyDict_Check(dict)) {
      Py_XDECREF(dict);
      PyErr_Clear();
      return false;
    }
    auto visit_dict = [&](PyObject* table) {
      Py_ssize_t position = 0;
      PyObject *name = nullptr, *value = nullptr;
      while (PyDict_Next(table, &position, &name, &value)) {
        if (!visit(name) || !visit(value)) return false;
        if (PyList_CheckExact(value)) {
          for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); ++i) {
            if (!visit(PyList_GET_ITEM(value, i))) return false;
          }
          if (!visit(Py_None)) return false;  // a list's end: a longer list is not the same
        }
      }
      return true;
    };
    bool whole = visit_dict(dict);
    for (PyObject* name : tables) {
      PyObject* table = whole ? PyDict_GetItemWithError(dict, name) : nullptr;
      if (table == nullptr) {
        PyErr_Clear();
        continue;
      }
      if (!PyDict_Check(table)) {
        whole = false;
        break;
      }
      whole = visit_dict(table);
      if (whole && name == tables[2]) {
        Py_ssize_t position = 0;
        PyObject *key = nullptr, *child = nullptr;
        while (PyDict_Next(table, &position, &key, &child)) {
          if (child != Py_None) pending.push_back(child);  // alive: the tree holds it while Python waits
        }
      }
    }
    Py_DECREF(dict);
    if (!whole) return false;
  }
  return true;
}

std::unique_ptr<Snapshot> take_snapshot(PyObject* module) {
  auto snapshot = std::make_unique<Snapshot>();
  const bool whole = walk(module, [&](PyObject* seen) {
    snapshot->slots.emplace_back(seen);
    return true;
  });
  return whole ? std::move(snapshot) : nullptr;
}

bool unchanged(PyObject* module, const Snapshot& snapshot) {
  size_t next = 0;
  const bool whole = walk(module, [&](PyObject* seen) {
    return next < snapshot.slots.size() && snapshot.slots[next++].object == seen;
  });
  return whole && next == snapshot.slots.size();
}

bool in_snapshot(PyObject* object, const Snapshot& snapshot) {
  for (const Ref& slot : snapshot.slots) {
    if (slot.object == object) return true;
  }
  return false;
}

bool exact_tensor(const State& state, PyObject* object) {
  for (PyTypeObject* type : state.tensor_types) {
    if (Py_TYPE(object) == type) return true;
  }
  return false;
}

void disarm(State* state) {
  state->armed.clear();
  state->snapshot.reset();
}

// ---- the Python type ------------------------------------------------------------------------

PyObject* front_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *types = nullptr, *declined = nullptr;
  static const char* names[] = {"tensor_types", "declined", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O", const_cast<char**>(names), &PyTuple_Type, &types,
                                   &declined)) {
    return nullptr;
  }
  auto state = std::make_unique<State>();
  Py_INCREF(declined);
  state->declined.object = declined;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); ++i) {
    PyObject* item = PyTuple_GET_ITEM(types, i);
    if (!PyType_Check(item)) {
      PyErr_SetString(PyExc_TypeError, "tensor_types holds types only");
      return nullptr;
    }
    Py_INCREF(item);  // kept for the process: tensor types live as long as torch
    state->tensor_types.push_back(reinterpret_cast<PyTypeObject*>(item));
  }
  auto* self = reinterpret_cast<FrontObject*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->state = state.release();
  return reinterpret_cast<PyObject*>(self);
}

// A front is part of the cycle module -> forward -> override -> front -> snapshot -> forward, so
// the collector must see what it holds.
int front_traverse(PyObject* object, visitproc visit, void* arg) {
  const State* state = reinterpret_cast<FrontObject*>(object)->state;
  if (state == nullptr) return 0;
  Py_VISIT(state->declined.object);
  Py_VISIT(state->original.object);
  if (state->snapshot != nullptr) {
    for (const Ref& slot : state->snapshot->slots) Py_VISIT(slot.object);
  }
  return 0;
}

int front_clear(PyObject* object) {
  State* state = reinterpret_cast<FrontObject*>(object)->state;
  if (state != nullptr) {
    disarm(state);
    Py_CLEAR(state->original.object);
  }
  return 0;
}

void front_dealloc(PyObject* object) {
  PyObject_GC_UnTrack(object);
  auto* self = reinterpret_cast<FrontObject*>(object);
  delete self->state;
  self->state = nullptr;
  Py_TYPE(object)->tp_free(object);
}

// add_kernel(launch_address, is_cuda, n_inputs, input_words_address, n_outputs, output_words_address,
//            workspace_bytes) -> index, or -1 when the layouts are outside the kernel contract
PyObject* front_add_kernel(PyObject* object, PyObject* args) {
  unsigned long long launch = 0, input_words = 0, output_words = 0;
  int is_cuda = 0, n_inputs = 0, n_outputs = 0;
  long long workspace = 0;
  if (!PyArg_ParseTuple(args, "KiiKiKL", &launch, &is_cuda, &n_inputs, &input_words, &n_outputs, &output_words,
                        &workspace)) {
    return nullptr;
  }
  if (is_cuda && !KF_HAS_CUDA) return PyLong_FromLong(-1);
  auto kernel = std::make_unique<ModuleKernel>();
  if (!kernel->kernel.init(reinterpret_cast<void*>(launch), is_cuda, n_inputs,
                           reinterpret_cast<const int64_t*>(input_words), n_outputs,
                           reinterpret_cast<const int64_t*>(output_words), workspace)) {
    return PyLong_FromLong(-1);
  }
  State* state = reinterpret_cast<FrontObject*>(object)->state;
  state->kernels.push_back(std::move(kernel));
  return PyLong_FromSsize_t(static_cast<Py_ssize_t>(state->kernels.size()) - 1);
}

// arm(index, module, args, tensors) -> bool: kernel `index` just matched the call `args` (a
// tuple) on `module`, with the card's tensors `tensors` (a list, in key order). False when the
// call is not one the front can repeat: an argument that is not one of the card's tensors, or
// a card tensor that is neither an argument nor held by the module.
PyObject* front_arm(PyObject* object, PyObject* const* argv, Py_ssize_t n) {
  State* state = reinterpret_cast<FrontObject*>(object)->state;
  if (n != 4 || !PyLong_Check(argv[0]) || !PyTuple_Check(argv[2]) || !PyList_Check(argv[3])) {
    PyErr_SetString(PyExc_TypeError, "arm(index, module, args: tuple, tensors: list)");
    return nullptr;
  }
  const long index = PyLong_AsLong(argv[0]);
  if (index < 0 || index >= static_cast<long>(state->kernels.size())) {
    PyErr_SetString(PyExc_IndexError, "no such kernel");
    return nullptr;
  }
  PyObject* module = argv[1];
  PyObject* call = argv[2];
  PyObject* tensors = argv[3];
  const kf::Kernel& kernel = state->kernels[index]->kernel;
  if (PyList_GET_SIZE(tensors) != static_cast<Py_ssize_t>(kernel.inputs.size())) Py_RETURN_FALSE;
  if (state->snapshot == nullptr || !unchanged(module, *state->snapshot)) {
    disarm(state);
    state->snapshot = take_snapshot(module);
    if (state->snapshot == nullptr) Py_RETURN_FALSE;
  }
  Armed armed;
  armed.kernel = static_cast<int>(index);
  armed.n_args = PyTuple_GET_SIZE(call);
  std::vector<bool> used(armed.n_args, false);
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tensors); ++i) {
    PyObject* tensor = PyList_GET_ITEM(tensors, i);
    if (!exact_tensor(*state, tensor)) Py_RETURN_FALSE;
    int from = -1;
    for (Py_ssize_t j = 0; j < armed.n_args && from < 0; ++j) {
      if (PyTuple_GET_ITEM(call, j) == tensor) from = static_cast<int>(j);
    }
    if (from < 0 && !in_snapshot(tensor, *state->snapshot)) Py_RETURN_FALSE;
    if (from >= 0) used[from] = true;
    armed.from_arg.push_back(from);
    armed.from_state.push_back(from < 0 ? THPVariable_Unpack(tensor) : at::Tensor());
  }
  for (bool argument_used : used) {
    if (!argument_used) Py_RETURN_FALSE;  // a value the card keys on, which this front cannot compare
  }
  for (Armed& existing : state->armed) {
    if (existing.kernel == armed.kernel) {
      existing = std::move(armed);
      Py_RETURN_TRUE;
    }
  }
  state->armed.push_back(std::move(armed));
  Py_RETURN_TRUE;
}

PyObject* wrap(std::vector<at::Tensor>& results) {
  if (results.size() == 1) return THPVariable_Wrap(std::move(results[0]));
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(results.size()));
  if (tuple == nullptr) return nullptr;
  for (size_t i = 0; i < results.size(); ++i) {
    PyObject* item = THPVariable_Wrap(std::move(results[i]));
    if (item == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), item);
  }
  return tuple;
}

PyObject* declined(const State* state) {
  Py_INCREF(state->declined.object);
  return state->declined.object;
}

// Whether no kernel takes a first argument of `tensor`'s shape.
bool no_kernel_takes(const State& state, const at::Tensor& tensor) {
  if (state.original.object == nullptr || state.first_shapes.empty()) return false;
  if (tensor.layout() != c10::kStrided || tensor.is_nested()) return false;
  for (const std::vector<int64_t>& shape : state.first_shapes) {
    if (tensor.sizes().equals(shape)) return false;
  }
  return true;
}

// The original forward on `module` and `call`, after counting a shape miss for every kernel.
PyObject* turn_away(State* state, PyObject* module, PyObject* call) {
  for (auto& kernel : state->kernels) ++kernel->shape_misses;
  const Py_ssize_t n = PyTuple_GET_SIZE(call);
  std::vector<PyObject*> arguments(n + 1);
  arguments[0] = module;
  for (Py_ssize_t j = 0; j < n; ++j) arguments[j + 1] = PyTuple_GET_ITEM(call, j);
  return PyObject_Vectorcall(state->original.object, arguments.data(), static_cast<size_t>(n + 1), nullptr);
}

// hit(module, args) -> the kernel's outputs, the original forward's result for a call no kernel
// takes, or the `declined` marker when the Python guard must decide.
PyObject* front_hit(PyObject* object, PyObject* const* argv, Py_ssize_t n) {
  State* state = reinterpret_cast<FrontObject*>(object)->state;
  if (n != 2 || !PyTuple_Check(argv[1])) {
    PyErr_SetString(PyExc_TypeError, "hit(module, args: tuple)");
    return nullptr;
  }
  PyObject* first = PyTuple_GET_SIZE(argv[1]) > 0 ? PyTuple_GET_ITEM(argv[1], 0) : nullptr;
  if (first != nullptr && exact_tensor(*state, first) && no_kernel_takes(*state, THPVariable_Unpack(first))) {
    return turn_away(state, argv[0], argv[1]);
  }
  if (state->snapshot == nullptr) return declined(state);
  if (!unchanged(argv[0], *state->snapshot)) {
    disarm(state);
    return declined(state);
  }
  PyObject* call = argv[1];
  const Py_ssize_t n_args = PyTuple_GET_SIZE(call);
  for (Py_ssize_t j = 0; j < n_args; ++j) {
    if (!exact_tensor(*state, PyTuple_GET_ITEM(call, j))) return declined(state);
  }
  try {
    std::vector<at::Tensor> tensors;
    for (size_t a = 0; a < state->armed.size(); ++a) {
      const Armed& armed = state->armed[a];
      if (armed.n_args != n_args) continue;
      ModuleKernel& entry = *state->kernels[armed.kernel];
      const kf::Kernel& kernel = entry.kernel;
      tensors.clear();
      bool match = true;
      for (size_t i = 0; i < armed.from_arg.size() && match; ++i) {
        const at::Tensor& tensor = armed.from_arg[i] >= 0 ? THPVariable_Unpack(PyTuple_GET_ITEM(call, armed.from_arg[i]))
                                                           : armed.from_state[i];
        match = kf::check(tensor, kernel.inputs[i], kernel.device_type) == kf::kMatch;
        tensors.push_back(tensor);
      }
      if (!match) continue;
      if (c10::GradMode::is_enabled()) {
        for (const at::Tensor& tensor : tensors) {
          if (tensor.requires_grad()) return declined(state);
        }
      }
      std::vector<at::Tensor> results;
      if (!kernel.run(tensors, &results)) {
        state->armed.erase(state->armed.begin() + static_cast<std::ptrdiff_t>(a));  // Python counts the error
        return declined(state);
      }
      ++entry.hits;
      return wrap(results);
    }
  } catch (const std::exception&) {
    // An allocation that failed, say: the Python guard meets it again and raises it as eager would.
  }
  return declined(state);
}

// counts(index) -> (hits, shape misses) of kernel `index`.
PyObject* front_counts(PyObject* object, PyObject* index_object) {
  State* state = reinterpret_cast<FrontObject*>(object)->state;
  const long index = PyLong_AsLong(index_object);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  if (index < 0 || index >= static_cast<long>(state->kernels.size())) {
    PyErr_SetString(PyExc_IndexError, "no such kernel");
    return nullptr;
  }
  const ModuleKernel& kernel = *state->kernels[index];
  return Py_BuildValue("(LL)", static_cast<long long>(kernel.hits), static_cast<long long>(kernel.shape_misses));
}

// turn_away(first_shapes, class_forward): calls whose first argument no kernel takes run
// class_forward(module, *args) from here. `first_shapes` must hold every kernel's first argument.
PyObject* front_turn_away(PyObject* object, PyObject* args) {
  PyObject *shapes = nullptr, *original = nullptr;
  if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &shapes, &original)) return nullptr;
  std::vector<std::vector<int64_t>> parsed;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(shapes); ++i) {
    PyObject* shape = PySequence_Fast(PyList_GET_ITEM(shapes, i), "a shape is a sequence of ints");
    if (shape == nullptr) return nullptr;
    std::vector<int64_t> sizes;
    for (Py_ssize_t d = 0; d < PySequence_Fast_GET_SIZE(shape); ++d) {
      sizes.push_back(PyLong_AsLongLong(PySequence_Fast_GET_ITEM(shape, d)));
    }
    Py_DECREF(shape);
    if (PyErr_Occurred()) return nullptr;
    parsed.push_back(std::move(sizes));
  }
  State* state = reinterpret_cast<FrontObject*>(object)->state;
  state->first_shapes = std::move(parsed);
  Py_INCREF(original);
  Py_XDECREF(state->original.object);
  state->original.object = original;
  Py_RETURN_NONE;
}

PyObject* front_disarm(PyObject* object, PyObject*) {
  disarm(reinterpret_cast<FrontObject*>(object)->state);
  Py_RETURN_NONE;
}

PyObject* front_armed(PyObject* object, PyObject*) {
  return PyLong_FromSize_t(reinterpret_cast<FrontObject*>(object)->state->armed.size());
}

PyMethodDef front_methods[] = {
    {"add_kernel", front_add_kernel, METH_VARARGS, "Teach the front a kernel; its index, or -1."},
    {"arm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(front_arm)), METH_FASTCALL,
     "Serve the call the Python guard just matched to a kernel while the module stays as it is."},
    {"hit", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(front_hit)), METH_FASTCALL,
     "The kernel's outputs for a call, the original forward's for a call no kernel takes, or the declined "
     "marker when the Python guard must decide."},
    {"counts", front_counts, METH_O, "(hits, shape misses) of kernel `index`."},
    {"turn_away", front_turn_away, METH_VARARGS, "Run the original forward for calls no kernel takes."},
    {"disarm", front_disarm, METH_NOARGS, "Serve nothing until the Python guard arms a kernel again."},
    {"armed", front_armed, METH_NOARGS, "How many kernels the front serves now."},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject front_type = [] {
  PyTypeObject type{PyVarObject_HEAD_INIT(nullptr, 0)};
  type.tp_name = "kf_module_guard.Front";
  type.tp_basicsize = sizeof(FrontObject);
  type.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  type.tp_traverse = front_traverse;
  type.tp_clear = front_clear;
  type.tp_doc = "One module instance's kernels, served from C++ while the module is unchanged.";
  type.tp_new = front_new;
  type.tp_dealloc = front_dealloc;
  type.tp_methods = front_methods;
  return type;
}();

PyObject* abi_version(PyObject*, PyObject*) { return PyLong_FromLong(kAbiVersion); }
PyObject* has_cuda(PyObject*, PyObject*) { return PyBool_FromLong(KF_HAS_CUDA); }

PyMethodDef module_methods[] = {
    {"abi_version", abi_version, METH_NOARGS, nullptr},
    {"has_cuda", has_cuda, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "kf_module_guard",
                          "Module cards' eager hits served in C++.", -1, module_methods};

}  // namespace

PyMODINIT_FUNC PyInit_kf_module_guard() {
  if (PyType_Ready(&front_type) < 0) return nullptr;
  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) return nullptr;
  Py_INCREF(&front_type);
  if (PyModule_AddObject(module, "Front", reinterpret_cast<PyObject*>(&front_type)) < 0) {
    Py_DECREF(&front_type);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
