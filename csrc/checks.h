// Argument checks shared by the CPU and CUDA kernels. The Python API already validated user
// input with friendlier messages; these protect direct calls of the torch.ops.ozaki operators.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "crt.h"
#include "crt_exact.h"
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

// A kept part that the CUDA kernels load with the tensor memory accelerator or 16-byte copies
// starts at a 16-byte boundary (the allocator's tensors do; a view at another offset is refused
// here, on every device, rather than fault on the GPU). `made_by` names what makes it.
inline void check_aligned(const at::Tensor& t, const char* op, const char* name,
                          const char* made_by) {
  const auto past = reinterpret_cast<uintptr_t>(t.const_data_ptr()) % kResidueRowAlign;
  TORCH_CHECK(past == 0, op, ": ", name, " must start at a ", kResidueRowAlign,
              "-byte boundary (", made_by, "), got an address ", past, " byte",
              past == 1 ? "" : "s", " past one");
}

// The shape of a @ bt.T, or of a batch of such products: a is (m, k) or (batch, m, k) and bt is
// (n, k) or (batch, n, k). Per-row vectors describe the rows of the flattened operands
// a.reshape(batch * m, k) and bt.reshape(batch * n, k) (row e * m + i is row i of element e).
struct ProductShape {
  bool batched;
  int64_t batch, m, k, n;  // batch = 1 for 2-D operands

  // (m, n), or (batch, m, n) for batched operands.
  std::vector<int64_t> out_sizes() const {
    return batched ? std::vector<int64_t>{batch, m, n} : std::vector<int64_t>{m, n};
  }
};

// Whether bt (n, k) or (batch, n, k), not contiguous, is B.mT of a contiguous B (k, n) or
// (batch, k, n): B's columns, which the operators that say so read in place (BtLayout).
inline bool is_column_view(const at::Tensor& bt) {
  if (bt.is_contiguous() || (bt.dim() != 2 && bt.dim() != 3)) return false;
  const int64_t n = bt.size(-2), k = bt.size(-1);
  return bt.stride(-2) == 1 && bt.stride(-1) == n && (bt.dim() == 2 || bt.stride(0) == n * k);
}

// The rows that a per-row operator reads: a contiguous (rows, k) matrix, or, where columns is true,
// B's columns in place (is_column_view of a 2-D or 3-D bt: its batch * n columns are the rows, as
// those of bt.reshape(-1, k)). Returns that number of rows.
inline int64_t check_row_operand(const at::Tensor& t, const char* op, const char* name,
                                 bool columns) {
  if (!(columns && is_column_view(t))) {
    check_matrix(t, op, name);
    return t.size(0);
  }
  TORCH_CHECK(t.scalar_type() == at::kDouble || t.scalar_type() == at::kFloat, op, ": ", name,
              " must be float64 or float32, got ", t.scalar_type());
  return t.dim() == 3 ? t.size(0) * t.size(1) : t.size(0);
}

// a and bt are the two row-major operands of one product (or of one batch of products): both 2-D
// or both 3-D with the same batch size, same float dtype, same inner dimension, contiguous;
// bt_columns: bt may also be B's columns (is_column_view).
inline ProductShape check_operands(const at::Tensor& a, const at::Tensor& bt, const char* op,
                                   bool bt_columns = false) {
  for (const auto& [t, name] : {std::pair<const at::Tensor*, const char*>{&a, "a"}, {&bt, "bt"}}) {
    TORCH_CHECK(t->dim() == 2 || t->dim() == 3, op, ": ", name, " must be 2-D (rows, k) or 3-D "
                "(batch, rows, k), got ", t->dim(), "-D of shape ", t->sizes());
    TORCH_CHECK(t->scalar_type() == at::kDouble || t->scalar_type() == at::kFloat, op, ": ", name,
                " must be float64 or float32, got ", t->scalar_type());
    TORCH_CHECK(t->is_contiguous() || (bt_columns && t == &bt && is_column_view(bt)), op, ": ",
                name, " must be contiguous", t == &bt && bt_columns
                ? " or the transpose of a contiguous (k, n) matrix or (batch, k, n) batch" : "",
                ", got strides ", t->strides());
  }
  TORCH_CHECK(a.dim() == bt.dim(), op, ": a and bt must both be 2-D or both be 3-D (batched), got "
              "a of shape ", a.sizes(), " and bt of shape ", bt.sizes());
  const bool batched = a.dim() == 3;
  TORCH_CHECK(!batched || a.size(0) == bt.size(0), op, ": a and bt must have the same batch size, "
              "got a of shape ", a.sizes(), " and bt of shape ", bt.sizes());
  TORCH_CHECK(a.scalar_type() == bt.scalar_type(), op, ": a and bt must have the same dtype, got ",
              a.scalar_type(), " and ", bt.scalar_type());
  TORCH_CHECK(a.size(-1) == bt.size(-1), op, ": a and bt must have the same number of columns, got ",
              a.size(-1), " and ", bt.size(-1));
  return ProductShape{batched, batched ? a.size(0) : 1, a.size(-2), a.size(-1), bt.size(-2)};
}

// A per-row vector of operand a (of_a) or bt: one entry per row of the flattened operand.
inline void check_operand_vector(const at::Tensor& t, const ProductShape& shape, bool of_a,
                                 at::ScalarType dtype, const char* op, const char* name) {
  const int64_t rows = of_a ? shape.m : shape.n;
  if (!shape.batched) return check_row_vector(t, rows, dtype, op, name);
  TORCH_CHECK(t.dim() == 1 && t.size(0) == shape.batch * rows && t.scalar_type() == dtype &&
                  t.is_contiguous(),
              op, ": ", name, " must be a contiguous 1-D ", dtype, " tensor of length batch * ",
              of_a ? "m = " : "n = ", shape.batch, " * ", rows, " = ", shape.batch * rows,
              " (one entry per row of the flattened ", of_a ? "a" : "bt", "), got ", t.sizes(), " ",
              t.scalar_type());
}

// The row_stats triple (tau, bit_span, nonfinite) of operand a (of_a) or bt.
inline void check_row_stats(const at::Tensor& tau, const at::Tensor& span,
                            const at::Tensor& nonfinite, const ProductShape& shape, bool of_a,
                            const char* op) {
  const std::string name(of_a ? "a" : "b");
  check_operand_vector(tau, shape, of_a, at::kInt, op, ("tau_" + name).c_str());
  check_operand_vector(span, shape, of_a, at::kInt, op, ("span_" + name).c_str());
  check_operand_vector(nonfinite, shape, of_a, at::kBool, op, ("nonfinite_" + name).c_str());
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

// The arguments of ozaki::magnitude_product: two row-major operands (or batches of them) and their
// row exponents.
// The inner dimension whose grid a k-shard uses: total_k when given (> 0, at least the shard's k),
// else the shard's own k.
inline int64_t grid_inner_checked(int64_t k, int64_t total_k, const char* op) {
  TORCH_CHECK(total_k >= 0 && (total_k == 0 || total_k >= k), op,
              ": total_k must be 0 or at least the operands' inner dimension ", k, ", got ", total_k);
  return total_k > 0 ? total_k : k;
}

// The magnitude estimate's grid bits for the inner dimension (total_k when given), or a clear
// error past 2^22, where the estimate has no grid left (the planner reads it only below that).
inline int magnitude_grid_bits_checked(int64_t k, int64_t total_k, const char* op) {
  const int64_t inner = grid_inner_checked(k, total_k, op);
  const int bits = magnitude_grid_bits(inner);
  TORCH_CHECK(bits >= 1, op, ": inner dimension ", inner,
              " is too large for the magnitude estimate (it must be <= 2^22)");
  return bits;
}

inline ProductShape check_magnitude_arguments(const at::Tensor& a, const at::Tensor& bt,
                                              const at::Tensor& tau_a, const at::Tensor& tau_b,
                                              const char* op) {
  const ProductShape shape = check_operands(a, bt, op);
  check_operand_vector(tau_a, shape, true, at::kInt, op, "tau_a");
  check_operand_vector(tau_b, shape, false, at::kInt, op, "tau_b");
  digit_bits_checked(shape.k, op);
  return shape;
}

// The arguments of ozaki::sampled_magnitudes: two 2-D operands, their row exponents and usable
// flags, int64 vectors of row indices (their values are checked by the kernels), the rows per
// element and optional norm scale codes (both or neither).
// bt_columns: bt may also be B's columns in place (check_row_operand). Returns bt's rows.
inline int64_t check_sampled_magnitudes_arguments(
    const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a, const at::Tensor& tau_b,
    const at::Tensor& usable_a, const at::Tensor& usable_b, const at::Tensor& rows_a,
    const at::Tensor& rows_b, int64_t m, int64_t n, const std::optional<at::Tensor>& norm_a,
    const std::optional<at::Tensor>& norm_b, const char* op, bool bt_columns = false) {
  check_matrix(a, op, "a");
  const int64_t rows_bt = check_row_operand(bt, op, "bt", bt_columns);
  TORCH_CHECK(a.scalar_type() == bt.scalar_type() && a.size(1) == bt.size(-1), op,
              ": a and bt must have the same dtype and number of columns, got ", a.scalar_type(),
              " ", a.sizes(), " and ", bt.scalar_type(), " ", bt.sizes());
  check_row_vector(tau_a, a.size(0), at::kInt, op, "tau_a");
  check_row_vector(tau_b, rows_bt, at::kInt, op, "tau_b");
  check_row_vector(usable_a, a.size(0), at::kBool, op, "usable_a");
  check_row_vector(usable_b, rows_bt, at::kBool, op, "usable_b");
  for (const auto& [t, name] :
       {std::pair<const at::Tensor*, const char*>{&rows_a, "rows_a"}, {&rows_b, "rows_b"}}) {
    TORCH_CHECK(t->dim() == 1 && t->scalar_type() == at::kLong && t->is_contiguous(), op, ": ",
                name, " must be a contiguous 1-D int64 tensor, got ", t->sizes(), " ",
                t->scalar_type());
  }
  TORCH_CHECK(m >= 1 && n >= 1, op, ": m and n (rows per element) must be at least 1, got ", m,
              " and ", n);
  TORCH_CHECK(a.size(0) % m == 0 && rows_bt % n == 0 && a.size(0) / m == rows_bt / n, op,
              ": m = ", m, " and n = ", n, " (rows per element) must split a's ", a.size(0),
              " rows and bt's ", rows_bt, " rows into the same number of whole elements");
  TORCH_CHECK(norm_a.has_value() == norm_b.has_value(), op,
              ": norm_a and norm_b must be given together");
  if (norm_a.has_value()) {
    check_row_vector(*norm_a, a.size(0), at::kInt, op, "norm_a");
    check_row_vector(*norm_b, rows_bt, at::kInt, op, "norm_b");
  }
  return rows_bt;
}

// The SampledRows (csrc/crt.h) of a checked ozaki::sampled_magnitudes call.
inline SampledRows sampled_rows(const at::Tensor& tau_a, const at::Tensor& tau_b,
                                const at::Tensor& usable_a, const at::Tensor& usable_b, int64_t m,
                                int64_t n, const std::optional<at::Tensor>& norm_a,
                                const std::optional<at::Tensor>& norm_b) {
  return {tau_a.const_data_ptr<int>(), tau_b.const_data_ptr<int>(),
          usable_a.const_data_ptr<bool>(), usable_b.const_data_ptr<bool>(),
          norm_a.has_value() ? norm_a->const_data_ptr<int>() : nullptr,
          norm_b.has_value() ? norm_b->const_data_ptr<int>() : nullptr, m, n};
}

// The arguments of ozaki::gemm_slices (k is checked by the caller once the product is not empty).
inline ProductShape check_gemm_slices_arguments(
    const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a, const at::Tensor& tau_b,
    const at::Tensor& span_a, const at::Tensor& span_b, const at::Tensor& nonfinite_a,
    const at::Tensor& nonfinite_b, int64_t slices, const char* op) {
  const ProductShape shape = check_operands(a, bt, op);
  check_slices(slices, op);
  check_row_stats(tau_a, span_a, nonfinite_a, shape, true, op);
  check_row_stats(tau_b, span_b, nonfinite_b, shape, false, op);
  return shape;
}

// The per-row int32 vectors of a scheme-II call (scale codes) and its moduli count.
inline void check_crt_inner(int64_t k, const char* op) {
  TORCH_CHECK(k <= kCrtMaxInner, op, ": inner dimension k = ", k,
              " is too large for exact INT8 residue products (k must be < 2^17)");
}
inline void check_moduli(int64_t moduli, const char* op, bool exact = false) {
  const int64_t limit = exact ? kExactMaxModuli : kMaxModuli;
  TORCH_CHECK(moduli >= 1 && moduli <= limit, op, ": moduli must be in [1, ", limit, "], got ",
              moduli);
}

// The rows' norm scale codes, tau and bit_span of ozaki::crt_row_scales and crt_wide_exponents:
// three contiguous int32 vectors of one length, returned.
inline int64_t check_norm_scale_rows(const at::Tensor& norm_scales, const at::Tensor& tau,
                                     const at::Tensor& bit_span, const char* op) {
  TORCH_CHECK(norm_scales.dim() == 1, op, ": norm_scales must be 1-D, got ", norm_scales.dim(),
              "-D of shape ", norm_scales.sizes());
  const int64_t rows = norm_scales.size(0);
  check_row_vector(norm_scales, rows, at::kInt, op, "norm_scales");
  check_row_vector(tau, rows, at::kInt, op, "tau");
  check_row_vector(bit_span, rows, at::kInt, op, "bit_span");
  return rows;
}

// The arguments of ozaki::crt_row_scales: three int32 vectors of one length and a scale exponent
// that keeps the codes' scales within the rounded operands' int64.
inline void check_crt_row_scales_arguments(const at::Tensor& norm_scales, const at::Tensor& tau,
                                           const at::Tensor& bit_span, int64_t t, const char* op) {
  check_norm_scale_rows(norm_scales, tau, bit_span, op);
  TORCH_CHECK(t >= 0 && t <= kCrtMaxScaleBits, op, ": t must be in [0, ", kCrtMaxScaleBits,
              "], got ", t);
}

// The arguments of ozaki::crt_wide_exponents: crt_row_scales' vectors, the rows' bool usable
// flags, and a budget t in [0, 2^12].
inline void check_crt_wide_exponents_arguments(const at::Tensor& norm_scales, const at::Tensor& tau,
                                               const at::Tensor& bit_span, const at::Tensor& usable,
                                               int64_t t, const char* op) {
  const int64_t rows = check_norm_scale_rows(norm_scales, tau, bit_span, op);
  check_row_vector(usable, rows, at::kBool, op, "usable");
  TORCH_CHECK(t >= 0 && t <= (1 << 12), op, ": t must be in [0, 4096], got ", t);
}

// The arguments of ozaki::crt_row_bounds: four contiguous vectors of one length, int32 but for
// the bool nonfinite.
inline void check_crt_row_bounds_arguments(const at::Tensor& tau, const at::Tensor& bit_span,
                                           const at::Tensor& nonfinite,
                                           const at::Tensor& norm_scales, const char* op) {
  TORCH_CHECK(tau.dim() == 1, op, ": tau must be 1-D, got ", tau.dim(), "-D of shape ",
              tau.sizes());
  const int64_t rows = tau.size(0);
  check_row_vector(tau, rows, at::kInt, op, "tau");
  check_row_vector(bit_span, rows, at::kInt, op, "bit_span");
  check_row_vector(nonfinite, rows, at::kBool, op, "nonfinite");
  check_row_vector(norm_scales, rows, at::kInt, op, "norm_scales");
}

// The arguments of ozaki::crt_kept_plan_reads: a (m, k) and bt (n, k) of one float dtype, a's kept
// row vectors, digits int8 (m, k rounded up to kResidueRowAlign), bounds float64 (2,) and, where
// given, column exponents int64 (k,).
inline void check_kept_plan_reads_arguments(
    const at::Tensor& a, const at::Tensor& tau_a, const at::Tensor& bit_span_a,
    const at::Tensor& nonfinite_a, const at::Tensor& usable_a, const at::Tensor& norm_a,
    const at::Tensor& digits_a, const at::Tensor& bounds_a,
    const std::optional<at::Tensor>& column_exponents_a, const at::Tensor& bt, const char* op) {
  check_matrix(a, op, "a");
  TORCH_CHECK(bt.dim() == 2, op, ": bt must be 2-D, got ", bt.dim(), "-D");
  TORCH_CHECK(bt.is_contiguous() || is_column_view(bt), op,
              ": bt must be contiguous or the transpose of a contiguous (k, n) matrix, got strides ",
              bt.strides());
  TORCH_CHECK(a.size(1) == bt.size(1) && a.scalar_type() == bt.scalar_type(), op,
              ": a and bt must have the same number of columns and dtype, got ", a.sizes(), " ",
              a.scalar_type(), " and ", bt.sizes(), " ", bt.scalar_type());
  const int64_t m = a.size(0), k = a.size(1);
  check_row_vector(tau_a, m, at::kInt, op, "tau_a");
  check_row_vector(bit_span_a, m, at::kInt, op, "bit_span_a");
  check_row_vector(nonfinite_a, m, at::kBool, op, "nonfinite_a");
  check_row_vector(usable_a, m, at::kBool, op, "usable_a");
  check_row_vector(norm_a, m, at::kInt, op, "norm_a");
  const int64_t width = (k + kResidueRowAlign - 1) / kResidueRowAlign * kResidueRowAlign;
  TORCH_CHECK(digits_a.scalar_type() == at::kChar && digits_a.dim() == 2 &&
                  digits_a.size(0) == m && digits_a.size(1) == width && digits_a.is_contiguous(),
              op, ": digits_a must be contiguous int8 (", m, ", ", width, "), got ",
              digits_a.scalar_type(), " ", digits_a.sizes());
  check_aligned(digits_a, op, "digits_a", "crt_magnitude_digits' result");
  TORCH_CHECK(bounds_a.scalar_type() == at::kDouble && bounds_a.dim() == 1 &&
                  bounds_a.size(0) == 2 && bounds_a.is_contiguous(),
              op, ": bounds_a must be float64 (2,) (crt_row_bounds), got ", bounds_a.scalar_type(),
              " ", bounds_a.sizes());
  if (column_exponents_a.has_value()) {
    check_row_vector(*column_exponents_a, k, at::kLong, op, "column_exponents_a");
  }
  check_crt_inner(k, op);
}

// The arguments of ozaki::crt_entry_bound_sum: two (elements, k) tensors of one dtype, int64 or
// float64, with at least one element. Returns (elements, k).
inline std::pair<int64_t, int64_t> check_entry_bound_sum_arguments(const at::Tensor& u,
                                                                   const at::Tensor& v,
                                                                   const char* op) {
  TORCH_CHECK(u.dim() == 2 && u.sizes() == v.sizes() && u.size(0) >= 1, op,
              ": exponents_a and exponents_b must be (elements, k) of one shape with at least one "
              "element, got ", u.sizes(), " and ", v.sizes());
  TORCH_CHECK((u.scalar_type() == at::kLong || u.scalar_type() == at::kDouble) &&
                  v.scalar_type() == u.scalar_type(),
              op, ": exponents_a and exponents_b must both be int64 or both float64, got ",
              u.scalar_type(), " and ", v.scalar_type());
  TORCH_CHECK(u.is_contiguous() && v.is_contiguous(), op,
              ": exponents_a and exponents_b must be contiguous");
  return {u.size(0), u.size(1)};
}

// The arguments of ozaki::crt_magnitude (k is checked: its digit products need k < 2^17).
inline ProductShape check_crt_magnitude_arguments(
    const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a, const at::Tensor& tau_b,
    const at::Tensor& norm_a, const at::Tensor& norm_b, const at::Tensor& usable_a,
    const at::Tensor& usable_b, const char* op) {
  const ProductShape shape = check_operands(a, bt, op);
  check_operand_vector(tau_a, shape, true, at::kInt, op, "tau_a");
  check_operand_vector(tau_b, shape, false, at::kInt, op, "tau_b");
  check_operand_vector(norm_a, shape, true, at::kInt, op, "norm_a");
  check_operand_vector(norm_b, shape, false, at::kInt, op, "norm_b");
  check_operand_vector(usable_a, shape, true, at::kBool, op, "usable_a");
  check_operand_vector(usable_b, shape, false, at::kBool, op, "usable_b");
  check_crt_inner(shape.k, op);
  return shape;
}

// The arguments of ozaki::crt_magnitude_digits; returns the gain of its digits (the whole
// product's inner dimension total_k, 0 for a's own, decides it).
inline int check_crt_magnitude_digits_arguments(const at::Tensor& a, const at::Tensor& tau,
                                               const at::Tensor& norm, int64_t total_k,
                                               const char* op) {
  check_matrix(a, op, "a");
  check_row_vector(tau, a.size(0), at::kInt, op, "tau");
  check_row_vector(norm, a.size(0), at::kInt, op, "norm");
  const int64_t k = grid_inner_checked(a.size(1), total_k, op);
  check_crt_inner(k, op);
  return crt_magnitude_gain(k);
}

// The layout of crt_left_residues' result for operand a: int8 (moduli, m, k_stride), or
// (batch, moduli, m, k_stride) for a batch, k_stride = k rounded up to kResidueRowAlign.
inline std::vector<int64_t> left_residue_sizes(const at::Tensor& a, int64_t moduli) {
  const int64_t k = a.size(-1);
  const int64_t k_stride = (k + kResidueRowAlign - 1) / kResidueRowAlign * kResidueRowAlign;
  if (a.dim() == 3) return {a.size(0), moduli, a.size(1), k_stride};
  return {moduli, a.size(0), k_stride};
}

// The arguments of ozaki::crt_left_residues: a float64/float32 (m, k) or (batch, m, k) contiguous
// operand, int32 per-row scales (codes, or exponents when exact) and a moduli count the scheme
// allows.
inline void check_crt_left_residues_arguments(const at::Tensor& a, const at::Tensor& scale,
                                              int64_t moduli, bool exact, const char* op) {
  const ProductShape shape = check_operands(a, a, op);
  check_operand_vector(scale, shape, true, at::kInt, op, "scale");
  check_moduli(moduli, op, exact);
  check_crt_inner(shape.k, op);
}

// Prepared residues of a product's a: their data (nullptr when none are given) and the entries of
// one batch element.
struct LeftResidues {
  const int8_t* data;
  int64_t element_size;

  // Element e's residues, or nullptr.
  const int8_t* element(int64_t e) const {
    return data == nullptr ? nullptr : data + e * element_size;
  }
};

// The optional prepared residues of a product's a, checked (crt_left_residues' result for
// `moduli`: on a's device, int8, contiguous, of crt_left_residues' shape).
inline LeftResidues checked_residues_a(const std::optional<at::Tensor>& residues,
                                       const at::Tensor& a, int64_t moduli, const char* op) {
  const std::vector<int64_t> sizes = left_residue_sizes(a, moduli);
  const int64_t element_size = sizes.end()[-3] * sizes.end()[-2] * sizes.end()[-1];
  if (!residues.has_value()) return LeftResidues{nullptr, element_size};
  const at::Tensor& r = *residues;
  TORCH_CHECK(r.scalar_type() == at::kChar && r.is_contiguous() &&
                  r.sizes() == at::IntArrayRef(sizes),
              op, ": residues_a must be a contiguous int8 tensor of shape ", at::IntArrayRef(sizes),
              " (crt_left_residues of a for ", moduli, " moduli), got ", r.scalar_type(), " ",
              r.sizes());
  TORCH_CHECK(r.device() == a.device(), op, ": residues_a must be on a's device ", a.device(),
              ", got ", r.device());
  check_aligned(r, op, "residues_a", "crt_left_residues' result");
  return LeftResidues{r.const_data_ptr<int8_t>(), element_size};
}

// The arguments of ozaki::gemm_crt (exact false: int32 scale codes scale_a, scale_b and
// 1 <= moduli <= kMaxModuli) or ozaki::gemm_crt_exact (exact: int32 row exponents exponent_a,
// exponent_b and 1 <= moduli <= kExactMaxModuli), with bool nonfinite flags per row and the optional
// prepared residues of a; k is held to scheme II's exact INT32 sums when the product is not empty;
// bt_columns: bt may be B's columns (is_column_view).
struct CrtProductArguments {
  ProductShape shape;
  LeftResidues prepared_a;
  bool empty;  // a batch, m, n or k of zero: the product is zeros
};
inline CrtProductArguments check_crt_product_arguments(
    const at::Tensor& a, const at::Tensor& bt, const at::Tensor& scale_a, const at::Tensor& scale_b,
    const at::Tensor& nonfinite_a, const at::Tensor& nonfinite_b, int64_t moduli,
    const std::optional<at::Tensor>& residues_a, bool exact, const char* op,
    bool bt_columns = false) {
  const ProductShape shape = check_operands(a, bt, op, bt_columns);
  check_moduli(moduli, op, exact);
  check_operand_vector(scale_a, shape, true, at::kInt, op, exact ? "exponent_a" : "scale_a");
  check_operand_vector(scale_b, shape, false, at::kInt, op, exact ? "exponent_b" : "scale_b");
  check_operand_vector(nonfinite_a, shape, true, at::kBool, op, "nonfinite_a");
  check_operand_vector(nonfinite_b, shape, false, at::kBool, op, "nonfinite_b");
  const LeftResidues prepared_a = checked_residues_a(residues_a, a, moduli, op);
  const bool empty = shape.batch == 0 || shape.m == 0 || shape.n == 0 || shape.k == 0;
  if (!empty) check_crt_inner(shape.k, op);
  return {shape, prepared_a, empty};
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

// The argument of ozaki::transposed: a float64 or float32 (k, n) matrix or (batch, k, n) batch,
// any strides.
inline void check_transposed_argument(const at::Tensor& b, const char* op) {
  TORCH_CHECK(b.dim() == 2 || b.dim() == 3, op, ": b must be 2-D (k, n) or 3-D (batch, k, n), got ",
              b.dim(), "-D of shape ", b.sizes());
  TORCH_CHECK(b.scalar_type() == at::kDouble || b.scalar_type() == at::kFloat, op,
              ": b must be float64 or float32, got ", b.scalar_type());
}

inline void check_fingerprint_argument(const at::Tensor& a, const char* op) {
  TORCH_CHECK(a.dim() == 2, op, ": a must be 2-D (m, k), got ", a.dim(), "-D of shape ", a.sizes());
  TORCH_CHECK(a.scalar_type() == at::kDouble || a.scalar_type() == at::kFloat, op,
              ": a must be float64 or float32, got ", a.scalar_type());
}

// Slices are stored with rows padded to a multiple of 8 halves (16 bytes) for the tensor cores;
// the padding holds zeros, which add nothing to the exact products.
inline int64_t padded_inner(int64_t k) { return (k + 7) / 8 * 8; }

// 2-D operands a and bt of one k-shard (check_operands' rules), with an int32 code per row of each
// (row_a, row_b, named name_a, name_b).
inline ProductShape check_shard_operands(const at::Tensor& a, const at::Tensor& bt,
                                         const at::Tensor& row_a, const at::Tensor& row_b,
                                         const char* name_a, const char* name_b, const char* op) {
  check_matrix(a, op, "a");
  check_matrix(bt, op, "bt");
  const ProductShape shape = check_operands(a, bt, op);
  check_row_vector(row_a, shape.m, at::kInt, op, name_a);
  check_row_vector(row_b, shape.n, at::kInt, op, name_b);
  return shape;
}

// The arguments of ozaki::crt_residue_products: 2-D operands of one k-shard (check_operands'
// rules otherwise), int32 scale codes of their rows, 1 <= moduli <= 16 and k < 2^17 whatever the
// shape (a shard's results are only useful summed with the others').
inline ProductShape check_crt_residue_products_arguments(const at::Tensor& a, const at::Tensor& bt,
                                                         const at::Tensor& scale_a,
                                                         const at::Tensor& scale_b, int64_t moduli,
                                                         const char* op) {
  check_moduli(moduli, op);
  const ProductShape shape = check_shard_operands(a, bt, scale_a, scale_b, "scale_a", "scale_b", op);
  check_crt_inner(shape.k, op);
  return shape;
}

// The arguments of ozaki::crt_round: the summed int32 (moduli, m, n) crt_residue_products with
// 1 <= moduli <= 16, the scale codes they were computed with, and a float64 or float32 output
// dtype.
inline void check_crt_round_arguments(const at::Tensor& products, const at::Tensor& scale_a,
                                      const at::Tensor& scale_b, at::ScalarType dtype,
                                      const char* op) {
  TORCH_CHECK(products.dim() == 3 && products.scalar_type() == at::kInt && products.is_contiguous(),
              op, ": products must be a contiguous 3-D int32 tensor (moduli, m, n), got ",
              products.sizes(), " ", products.scalar_type());
  TORCH_CHECK(products.size(0) >= 1 && products.size(0) <= kMaxModuli, op,
              ": products.size(0) (the moduli count) must be in [1, ", kMaxModuli, "], got ",
              products.size(0));
  check_row_vector(scale_a, products.size(1), at::kInt, op, "scale_a");
  check_row_vector(scale_b, products.size(2), at::kInt, op, "scale_b");
  TORCH_CHECK(dtype == at::kDouble || dtype == at::kFloat, op,
              ": dtype must be float64 or float32, got ", dtype);
}

// ---- k-sharded scheme I (ozaki::slice_levels, ozaki::round_levels) ------------------------------

// Levels of scheme I's slice products, one per p + q: 0 .. 2 slices - 2, or 0 .. slices - 1 when
// fast mode drops the pairs with p + q >= slices.
inline int64_t level_count(int64_t slices, bool fast) { return fast ? slices : 2 * slices - 1; }

// total_k, the whole product's inner dimension, sets the digit width of every shard.
inline void check_total_k(int64_t k, int64_t total_k, const char* op) {
  TORCH_CHECK(total_k >= 1 && total_k >= k, op, ": total_k (the whole product's inner dimension) "
              "must be at least 1 and at least the shard's inner dimension k = ", k, ", got ",
              total_k);
}

// beta of the FP16 or INT8 digits for the whole inner dimension total_k, or a clear error when it
// is too large for exact slice products (as slice_digit_bits_checked for one-device products).
inline int total_k_digit_bits_checked(int64_t total_k, bool int8, const char* op) {
  const int beta = int8 ? int8_digit_bits_for(total_k) : digit_bits_for(total_k);
  TORCH_CHECK(beta >= 1, op, ": total_k = ", total_k, " is too large for exact ",
              int8 ? "INT8 slice products (total_k must be < 2^29)"
                   : "FP16 slice products (total_k must be <= 2^22)");
  return beta;
}

// The arguments of ozaki::slice_levels: 2-D operands of a k-shard and the whole rows' tau.
inline ProductShape check_slice_levels_arguments(const at::Tensor& a, const at::Tensor& bt,
                                                 const at::Tensor& tau_a, const at::Tensor& tau_b,
                                                 int64_t slices, int64_t total_k, const char* op) {
  check_slices(slices, op);
  const ProductShape shape = check_shard_operands(a, bt, tau_a, tau_b, "tau_a", "tau_b", op);
  check_total_k(shape.k, total_k, op);
  return shape;
}

// The arguments of ozaki::round_levels: summed level sums (levels, m, n) as slice_levels returns
// them for `slices` and `fast`, the whole rows' tau and bit spans, and a float output dtype.
// Returns (m, n).
inline std::pair<int64_t, int64_t> check_round_levels_arguments(
    const at::Tensor& levels, const at::Tensor& tau_a, const at::Tensor& tau_b,
    const at::Tensor& span_a, const at::Tensor& span_b, int64_t slices, bool fast, int64_t total_k,
    at::ScalarType dtype, const char* op) {
  TORCH_CHECK(levels.dim() == 3 && levels.scalar_type() == at::kDouble && levels.is_contiguous(),
              op, ": levels must be a contiguous 3-D float64 tensor (levels, m, n), got ",
              levels.sizes(), " ", levels.scalar_type(),
              levels.is_contiguous() ? "" : " (not contiguous)");
  check_slices(slices, op);
  const int64_t expected = level_count(slices, fast);
  TORCH_CHECK(levels.size(0) == expected, op, ": levels must hold ", expected,
              " levels for slices = ", slices, " and fast = ", fast ? "true" : "false", ", got ",
              levels.size(0), " (shape ", levels.sizes(), ")");
  const int64_t m = levels.size(1), n = levels.size(2);
  check_row_vector(tau_a, m, at::kInt, op, "tau_a");
  check_row_vector(tau_b, n, at::kInt, op, "tau_b");
  check_row_vector(span_a, m, at::kInt, op, "span_a");
  check_row_vector(span_b, n, at::kInt, op, "span_b");
  TORCH_CHECK(total_k >= 1, op, ": total_k (the whole product's inner dimension) must be at least "
              "1, got ", total_k);
  TORCH_CHECK(dtype == at::kDouble || dtype == at::kFloat, op,
              ": dtype must be float64 or float32, got ", dtype);
  return {m, n};
}

}  // namespace ozaki
