// ozaki._C.graph_result_sites, ozaki._C.retarget_graph_result and ozaki._C.copy_to_host
// (csrc/graph_result.h): the Python side of moving a captured graph's result and of the
// copy of the plan's values inside it, and the registry of result-writing kernels.
#include "graph_result.h"

#include <Python.h>

#include <exception>
#include <mutex>
#include <unordered_map>

namespace ozaki {
namespace {

std::mutex writers_lock;
std::unordered_map<const void*, int>& writers() {
  static std::unordered_map<const void*, int> noted;
  return noted;
}

// f() with C++ exceptions turned into Python's RuntimeError (nullptr returned).
template <typename F>
PyObject* python_call(F f) {
  try {
    return f();
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

bool hooks_built() {
  if (graph_result_hooks().sites != nullptr) return true;
  PyErr_SetString(PyExc_RuntimeError, "ozaki was built without its CUDA backend");
  return false;
}

// Whether a byte count is usable; else a ValueError naming it (a negative count would read as a
// huge size_t).
bool bytes_checked(const char* function, long long bytes) {
  if (bytes >= 0) return true;
  PyErr_Format(PyExc_ValueError, "ozaki._C.%s: bytes must be >= 0, got %lld", function, bytes);
  return false;
}

// graph_result_sites(device, graph, address, bytes) -> list of int
PyObject* graph_result_sites(PyObject*, PyObject* args) {
  int device;
  long long graph, address, bytes;
  if (!PyArg_ParseTuple(args, "iLLL", &device, &graph, &address, &bytes) ||
      !bytes_checked("graph_result_sites", bytes) || !hooks_built()) {
    return nullptr;
  }
  return python_call([&]() -> PyObject* {
    const std::vector<int64_t> sites = graph_result_hooks().sites(device, graph, address, bytes);
    PyObject* list = PyList_New(static_cast<Py_ssize_t>(sites.size()));
    if (list == nullptr) return nullptr;
    for (size_t i = 0; i < sites.size(); ++i) {
      PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(sites[i]));
    }
    return list;
  });
}

// retarget_graph_result(device, exec, sites, target) -> None
PyObject* retarget_graph_result(PyObject*, PyObject* args) {
  int device;
  long long exec, target;
  PyObject* given;
  if (!PyArg_ParseTuple(args, "iLO!L", &device, &exec, &PyList_Type, &given, &target) ||
      !hooks_built()) {
    return nullptr;
  }
  std::vector<int64_t> sites(static_cast<size_t>(PyList_GET_SIZE(given)));
  for (size_t i = 0; i < sites.size(); ++i) {
    sites[i] = PyLong_AsLongLong(PyList_GET_ITEM(given, static_cast<Py_ssize_t>(i)));
    if (PyErr_Occurred() != nullptr) return nullptr;
  }
  return python_call([&]() -> PyObject* {
    graph_result_hooks().retarget(device, exec, sites, target);
    Py_RETURN_NONE;
  });
}

// copy_to_host(device, source, target, bytes) -> None
PyObject* copy_to_host(PyObject*, PyObject* args) {
  int device;
  long long source, target, bytes;
  if (!PyArg_ParseTuple(args, "iLLL", &device, &source, &target, &bytes) ||
      !bytes_checked("copy_to_host", bytes) || !hooks_built()) {
    return nullptr;
  }
  return python_call([&]() -> PyObject* {
    graph_result_hooks().copy_to_host(device, source, target, bytes);
    Py_RETURN_NONE;
  });
}

}  // namespace

GraphResultHooks& graph_result_hooks() {
  static GraphResultHooks hooks;
  return hooks;
}

void note_result_writer(const void* kernel, int argument) {
  const std::lock_guard<std::mutex> guard(writers_lock);
  writers()[kernel] = argument;
}

int result_writer_argument(const void* kernel) {
  const std::lock_guard<std::mutex> guard(writers_lock);
  const auto found = writers().find(kernel);
  return found == writers().end() ? -1 : found->second;
}

PyMethodDef graph_result_methods[] = {
    {"graph_result_sites", graph_result_sites, METH_VARARGS,
     "graph_result_sites(device, graph, address, bytes): the sites of the captured graph's "
     "kernels that write the result at [address, address + bytes); [] where it cannot be moved"},
    {"retarget_graph_result", retarget_graph_result, METH_VARARGS,
     "retarget_graph_result(device, exec, sites, target): the sites' result argument in the "
     "instantiated graph set to target"},
    {"copy_to_host", copy_to_host, METH_VARARGS,
     "copy_to_host(device, source, target, bytes): a copy of bytes from device memory at source "
     "into pinned host memory at target, queued on the device's current stream (captured as a "
     "graph node while that stream is captured)"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace ozaki
