// Every ozaki operator schema, in one place. Kernels are registered per device in csrc/cpu and
// csrc/cuda; the public Python API (ozaki/) validates user input and calls these.
#include <Python.h>
#include <torch/library.h>

// Importing ozaki._C loads this library, which registers the operators below with the dispatcher.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module);
}

TORCH_LIBRARY(ozaki, m) {
  // Per row of a (m, k) matrix: tau (every |entry| < 2^tau; 0 for a zero row), the bit span from
  // tau down to the lowest set bit of any finite entry, and whether the row holds NaN or +-Inf.
  m.def("row_stats(Tensor a) -> (Tensor tau, Tensor bit_span, Tensor nonfinite)");
  // The FP16 slices of every row, scaled by 2^-tau: shape (slices, m, k), float16.
  m.def("split_rows(Tensor a, Tensor tau, int slices) -> Tensor");
  // Exact lower bound of (|a| |bt|^T)_ij 2^-(tau_a_i + tau_b_j) from magnitudes floored onto a
  // coarse grid: float64 (m, n). The automatic slice count is planned from it.
  m.def("magnitude_product(Tensor a, Tensor bt, Tensor tau_a, Tensor tau_b) -> Tensor");
  // C = a @ bt.T by Ozaki scheme I with FP16 slices; bt holds B's columns as rows and tau_*,
  // span_*, nonfinite_* are the row_stats of a and bt. nearest: correctly rounded result.
  m.def(
      "gemm_fp16(Tensor a, Tensor bt, Tensor tau_a, Tensor tau_b, Tensor span_a, Tensor span_b, "
      "Tensor nonfinite_a, Tensor nonfinite_b, int slices, bool fast, bool nearest, "
      "int workspace_bytes) -> Tensor");
}
