// Remembered calls launched from C++: one Python call checks x against the call's signature, allocates y and
// launches the kernel's C entry `int launch(first, x, y, stream)`; Python runs nothing between.
//
// make(fn, first, x, y, stream_only, what, guards, grad_bias, owner) -> spec (a capsule)
//   fn, first: the entry's address and its first argument (a plan or packed arguments, which owner keeps alive);
//   x, y: tensors of the call's signature (shape, dtype, device; y's shape and dtype are what a call returns);
//   stream_only: None, or the one stream the call may take (0 is the default stream); on another stream, or on that
//   one while it captures a CUDA graph, the call misses;
//   what: the family and problem, for a launch error's message;
//   guards: ((dict, key, object), ...): the call holds while dict[key] is that object (None: or absent), and, for a
//   tensor, has the same data pointer (a module's buffers and bias: .to(), reassignment or .data = ... end it);
//   grad_bias: None, or the bias whose requires_grad (like x's) sends the call to autograd while grad mode is on;
//   owner: held by the spec (what keeps first's memory alive).
// call(spec, x) -> y, or None when x does not fit the spec (the caller then takes its Python path).
// set_error(type): the exception a failed launch raises.
#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <string>
#include <vector>

#ifdef CNM_WITH_CUDA
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace {

using LaunchFn = int (*)(void*, void*, void*, void*);

struct Guard {
  PyObject* dict;      // strong
  PyObject* key;       // strong
  PyObject* expected;  // strong
  void* data;          // a tensor's data pointer (null for other objects)
};

struct Spec {
  LaunchFn fn = nullptr;
  void* first = nullptr;
  std::vector<int64_t> x_sizes;
  c10::ScalarType x_dtype = c10::ScalarType::Undefined;
  c10::Device device{c10::kCPU};
  std::vector<int64_t> y_sizes;
  at::TensorOptions y_options;
  bool one_stream = false;
  uintptr_t stream_only = 0;
  std::string what;
  std::vector<Guard> guards;
  PyObject* grad_bias = nullptr;  // strong, or null
  PyObject* owner = nullptr;      // strong
};

PyObject* launch_error = PyExc_RuntimeError;
constexpr const char* kCapsule = "cutlass_nm.fastcall.spec";

void drop(PyObject* capsule) {
  auto* spec = static_cast<Spec*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (spec == nullptr) {
    PyErr_Clear();
    return;
  }
  for (Guard& g : spec->guards) {
    Py_XDECREF(g.dict);
    Py_XDECREF(g.key);
    Py_XDECREF(g.expected);
  }
  Py_XDECREF(spec->grad_bias);
  Py_XDECREF(spec->owner);
  delete spec;
}

bool tensor_arg(PyObject* obj, const char* name) {
  if (THPVariable_Check(obj)) return true;
  PyErr_Format(PyExc_TypeError, "fastcall: %s must be a tensor", name);
  return false;
}

#ifndef CNM_WITH_CUDA
uintptr_t cpu_stream = 0;  // a build without CUDA: the "current stream" its tests set (_set_stream)
#endif

uintptr_t current_stream(const c10::Device& device) {
#ifdef CNM_WITH_CUDA
  if (device.is_cuda()) return reinterpret_cast<uintptr_t>(c10::cuda::getCurrentCUDAStream(device.index()).stream());
  return 0;
#else
  (void)device;
  return cpu_stream;
#endif
}

bool capturing() {
#ifdef CNM_WITH_CUDA
  return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
#else
  return false;
#endif
}

PyObject* make(PyObject*, PyObject* args) {
  unsigned long long fn = 0, first = 0;
  PyObject *x_obj, *y_obj, *stream_only, *guards, *grad_bias, *owner;
  const char* what;
  if (!PyArg_ParseTuple(args, "KKOOOsOOO", &fn, &first, &x_obj, &y_obj, &stream_only, &what, &guards, &grad_bias,
                        &owner))
    return nullptr;
  unsigned long long only = 0;
  if (stream_only != Py_None) {
    only = PyLong_AsUnsignedLongLong(stream_only);
    if (PyErr_Occurred()) return nullptr;
  }
  if (fn == 0) {
    PyErr_SetString(PyExc_ValueError, "fastcall: the launch entry's address is 0");
    return nullptr;
  }
  if (!tensor_arg(x_obj, "x") || !tensor_arg(y_obj, "y")) return nullptr;
  if (!PyTuple_Check(guards)) {
    PyErr_SetString(PyExc_TypeError, "fastcall: guards must be a tuple of (dict, key, object)");
    return nullptr;
  }
  const at::Tensor& x = THPVariable_Unpack(x_obj);
  const at::Tensor& y = THPVariable_Unpack(y_obj);
  auto* spec = new Spec();
  spec->fn = reinterpret_cast<LaunchFn>(static_cast<uintptr_t>(fn));
  spec->first = reinterpret_cast<void*>(static_cast<uintptr_t>(first));
  spec->x_sizes.assign(x.sizes().begin(), x.sizes().end());
  spec->x_dtype = x.scalar_type();
  spec->device = x.device();
  spec->y_sizes.assign(y.sizes().begin(), y.sizes().end());
  spec->y_options = at::TensorOptions().dtype(y.scalar_type()).device(y.device());
  spec->one_stream = stream_only != Py_None;
  spec->stream_only = static_cast<uintptr_t>(only);
  spec->what = what;
  Py_INCREF(owner);
  spec->owner = owner;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(guards); ++i) {
    PyObject* g = PyTuple_GET_ITEM(guards, i);
    if (!PyTuple_Check(g) || PyTuple_GET_SIZE(g) != 3 || !PyDict_Check(PyTuple_GET_ITEM(g, 0))) {
      PyErr_SetString(PyExc_TypeError, "fastcall: each guard is (dict, key, object)");
      PyObject* capsule = PyCapsule_New(spec, kCapsule, drop);  // frees what was taken so far
      Py_XDECREF(capsule);
      return nullptr;
    }
    Guard guard{PyTuple_GET_ITEM(g, 0), PyTuple_GET_ITEM(g, 1), PyTuple_GET_ITEM(g, 2), nullptr};
    if (THPVariable_Check(guard.expected)) guard.data = THPVariable_Unpack(guard.expected).data_ptr();
    Py_INCREF(guard.dict);
    Py_INCREF(guard.key);
    Py_INCREF(guard.expected);
    spec->guards.push_back(guard);
  }
  if (grad_bias != Py_None) {
    if (!tensor_arg(grad_bias, "grad_bias")) {
      PyObject* capsule = PyCapsule_New(spec, kCapsule, drop);
      Py_XDECREF(capsule);
      return nullptr;
    }
    Py_INCREF(grad_bias);
    spec->grad_bias = grad_bias;
  }
  PyObject* capsule = PyCapsule_New(spec, kCapsule, drop);
  if (capsule == nullptr) delete spec;
  return capsule;
}

bool guards_hold(const Spec& spec) {
  for (const Guard& g : spec.guards) {
    PyObject* now = PyDict_GetItemWithError(g.dict, g.key);  // borrowed
    if (now == nullptr) {
      if (PyErr_Occurred()) return false;
      now = Py_None;  // an absent key holds where None is expected
    }
    if (now != g.expected) return false;
    if (g.data != nullptr && THPVariable_Unpack(now).data_ptr() != g.data) return false;
  }
  return true;
}

PyObject* call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "fastcall.call(spec, x)");
    return nullptr;
  }
  auto* spec = static_cast<const Spec*>(PyCapsule_GetPointer(args[0], kCapsule));
  if (spec == nullptr) return nullptr;
  if (!THPVariable_CheckExact(args[1])) Py_RETURN_NONE;  // a subclass (a fake tensor, say) takes the Python path
  const at::Tensor& x = THPVariable_Unpack(args[1]);
  if (x.sizes() != c10::IntArrayRef(spec->x_sizes) || x.scalar_type() != spec->x_dtype ||
      x.device() != spec->device || !x.is_contiguous() || reinterpret_cast<uintptr_t>(x.data_ptr()) % 16)
    Py_RETURN_NONE;
  if (!guards_hold(*spec)) {
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_NONE;
  }
  if (c10::GradMode::is_enabled() &&
      (x.requires_grad() || (spec->grad_bias != nullptr && THPVariable_Unpack(spec->grad_bias).requires_grad())))
    Py_RETURN_NONE;
  uintptr_t stream = current_stream(spec->device);
  if (spec->one_stream && (stream != spec->stream_only || capturing())) Py_RETURN_NONE;
  at::Tensor y = at::empty(spec->y_sizes, spec->y_options);
  int status = spec->fn(spec->first, x.data_ptr(), y.data_ptr(), reinterpret_cast<void*>(stream));
  if (status != 0) {
    if (status >= 1000)
      PyErr_Format(launch_error, "%s: CUDA error %d launching", spec->what.c_str(), status - 1000);
    else
      PyErr_Format(launch_error, "%s: the kernel refused the call (status %d)", spec->what.c_str(), status);
    return nullptr;
  }
  return THPVariable_Wrap(std::move(y));
}

PyObject* set_error(PyObject*, PyObject* type) {
  if (!PyType_Check(type) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type),
                                               reinterpret_cast<PyTypeObject*>(PyExc_Exception))) {
    PyErr_SetString(PyExc_TypeError, "fastcall.set_error takes an exception type");
    return nullptr;
  }
  Py_INCREF(type);
  launch_error = type;
  Py_RETURN_NONE;
}

#ifndef CNM_WITH_CUDA
PyObject* set_stream(PyObject*, PyObject* value) {
  cpu_stream = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(value));
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NONE;
}
#endif

PyMethodDef methods[] = {
    {"make", make, METH_VARARGS, "make(fn, first, x, y, stream_only, what, guards, grad_bias, owner) -> spec"},
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call)), METH_FASTCALL,
     "call(spec, x) -> y, or None when x does not fit the spec"},
    {"set_error", set_error, METH_O, "set_error(type): what a failed launch raises"},
#ifndef CNM_WITH_CUDA
    {"_set_stream", set_stream, METH_O, "_set_stream(handle): the current stream of a build without CUDA (tests)"},
#endif
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cnm_fastcall", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__cnm_fastcall() { return PyModule_Create(&module); }
