// Argument checks shared by the CPU and CUDA kernels. The Python API already validated user
// input with friendlier messages; these protect direct calls of the torch.ops.ozaki operators.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <initializer_list>
#include <string>

#include "crt.h"
#include "scheme.h"

namespace ozaki {

inline void check_matrix(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.dim() == 2, op, ": ", name, " must be 2-D, got ", t.dim(), "-D");
  TORCH_CHECK(t.scalar_type() == at::kDouble || t.scalar_type() == at::kFloat, op, ": ", name,
              " must be float64 or float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
}

inline void check_row_vector(const at::Tensor& t, int64_t rows, at::ScalarType dtype, const char* op,
                             const char* name) {
  TORCH_CHECK(t.dim() == 1 && t.size(0) == rows && t.scalar_type() == dtype && t.is_contiguous(), op,
              ": ", name, " must be a contiguous 1-D ", dtype, " tensor of length ", rows, ", got ",
              t.sizes(), " ", t.scalar_type());
}

// a and bt are the two row-major operands of one product: same dtype, same inner dimension.
inline void check_same_operands(const at::Tensor& a, const at::Tensor& bt, const char* op) {
  TORCH_CHECK(a.scalar_type() == bt.scalar_type(), op, ": a and bt must have the same dtype, got ",
              a.scalar_type(), " and ", bt.scalar_type());
  TORCH_CHECK(a.size(1) == bt.size(1), op, ": a and bt must have the same number of columns, got ",
              a.size(1), " and ", bt.size(1));
}

// The row_stats triple (tau, bit_span, nonfinite) of an operand with `rows` rows.
inline void check_row_stats(const at::Tensor& tau, const at::Tensor& span,
                            const at::Tensor& nonfinite, int64_t rows, const char* op,
                            const char* operand) {
  const std::string name(operand);
  check_row_vector(tau, rows, at::kInt, op, ("tau_" + name).c_str());
  check_row_vector(span, rows, at::kInt, op, ("span_" + name).c_str());
  check_row_vector(nonfinite, rows, at::kBool, op, ("nonfinite_" + name).c_str());
}

// Every tensor of a CUDA call on the device of `first`.
inline void check_same_device(const at::Tensor& first, std::initializer_list<const at::Tensor*> others,
                              const char* op) {
  for (const at::Tensor* t : others) {
    TORCH_CHECK(t->device() == first.device(), op, ": every tensor must be on ", first.device(),
                ", got ", t->device());
  }
}

inline void check_slices(int64_t slices, const char* op) {
  TORCH_CHECK(slices >= 1 && slices <= kMaxSlices, op, ": slices must be in [1, ", kMaxSlices,
              "], got ", slices);
}

// beta for the inner dimension, or a clear error when k is too large for exact FP16 products.
inline int digit_bits_checked(int64_t k, const char* op) {
  const int beta = digit_bits_for(k);
  TORCH_CHECK(beta >= 1, op, ": inner dimension k = ", k,
              " is too large for exact FP16 slice products (k must be <= 2^22)");
  return beta;
}

// beta of the FP16 or INT8 digits for the inner dimension, with the same kind of error.
inline int slice_digit_bits_checked(int64_t k, bool int8, const char* op) {
  if (!int8) return digit_bits_checked(k, op);
  const int beta = int8_digit_bits_for(k);
  TORCH_CHECK(beta >= 1, op, ": inner dimension k = ", k,
              " is too large for exact INT8 slice products (k must be < 2^29)");
  return beta;
}

// The arguments of ozaki::magnitude_product: two row-major operands and their row exponents.
inline void check_magnitude_arguments(const at::Tensor& a, const at::Tensor& bt,
                                      const at::Tensor& tau_a, const at::Tensor& tau_b,
                                      const char* op) {
  check_matrix(a, op, "a");
  check_matrix(bt, op, "bt");
  check_same_operands(a, bt, op);
  check_row_vector(tau_a, a.size(0), at::kInt, op, "tau_a");
  check_row_vector(tau_b, bt.size(0), at::kInt, op, "tau_b");
  digit_bits_checked(a.size(1), op);
}

// The per-row int32 vectors of a scheme-II call (shifts, exponents) and its moduli count.
inline void check_crt_inner(int64_t k, const char* op) {
  TORCH_CHECK(k <= kCrtMaxInner, op, ": inner dimension k = ", k,
              " is too large for exact INT8 residue products (k must be < 2^17)");
}
inline void check_moduli(int64_t moduli, const char* op) {
  TORCH_CHECK(moduli >= 1 && moduli <= kMaxModuli, op, ": moduli must be in [1, ", kMaxModuli,
              "], got ", moduli);
}

// The arguments of ozaki::crt_magnitude (k is checked: its digit products need k < 2^17).
inline void check_crt_magnitude_arguments(const at::Tensor& a, const at::Tensor& bt,
                                          const at::Tensor& tau_a, const at::Tensor& tau_b,
                                          const at::Tensor& nu_a, const at::Tensor& nu_b,
                                          const at::Tensor& usable_a, const at::Tensor& usable_b,
                                          const char* op) {
  check_matrix(a, op, "a");
  check_matrix(bt, op, "bt");
  check_same_operands(a, bt, op);
  const int64_t m = a.size(0), n = bt.size(0);
  check_row_vector(tau_a, m, at::kInt, op, "tau_a");
  check_row_vector(tau_b, n, at::kInt, op, "tau_b");
  check_row_vector(nu_a, m, at::kInt, op, "nu_a");
  check_row_vector(nu_b, n, at::kInt, op, "nu_b");
  check_row_vector(usable_a, m, at::kBool, op, "usable_a");
  check_row_vector(usable_b, n, at::kBool, op, "usable_b");
  check_crt_inner(a.size(1), op);
}

// The arguments of ozaki::gemm_crt (k is checked by the caller once the product is not empty).
inline void check_gemm_crt_arguments(const at::Tensor& a, const at::Tensor& bt,
                                     const at::Tensor& shift_a, const at::Tensor& shift_b,
                                     const at::Tensor& nonfinite_a, const at::Tensor& nonfinite_b,
                                     int64_t moduli, const char* op) {
  check_matrix(a, op, "a");
  check_matrix(bt, op, "bt");
  check_same_operands(a, bt, op);
  check_moduli(moduli, op);
  const int64_t m = a.size(0), n = bt.size(0);
  check_row_vector(shift_a, m, at::kInt, op, "shift_a");
  check_row_vector(shift_b, n, at::kInt, op, "shift_b");
  check_row_vector(nonfinite_a, m, at::kBool, op, "nonfinite_a");
  check_row_vector(nonfinite_b, n, at::kBool, op, "nonfinite_b");
}

// The operands of ozaki::int8_matmul: contiguous int8 (m, k) and (n, k), k < 2^17.
inline void check_int8_operands(const at::Tensor& a, const at::Tensor& bt, const char* op) {
  for (const auto* t : {&a, &bt}) {
    TORCH_CHECK(t->dim() == 2 && t->scalar_type() == at::kChar && t->is_contiguous(), op,
                ": operands must be contiguous 2-D int8 tensors, got ", t->sizes(), " ",
                t->scalar_type());
  }
  TORCH_CHECK(a.size(1) == bt.size(1), op, ": a and bt must have the same number of columns, got ",
              a.size(1), " and ", bt.size(1));
  check_crt_inner(a.size(1), op);
}

// Slices are stored with rows padded to a multiple of 8 halves (16 bytes) for the tensor cores;
// the padding holds zeros, which add nothing to the exact products.
inline int64_t padded_inner(int64_t k) { return (k + 7) / 8 * 8; }

}  // namespace ozaki
