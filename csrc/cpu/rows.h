// Per-row work of the CPU backend: statistics and splitting, on raw row pointers so the GEMM path
// can split chunks straight into its own buffers; and the elements of batched operands.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "../scheme.h"

namespace ozaki::cpu {

template <typename T>
RowStats row_stats_of(const T* row, int64_t k) {
  RowStats stats;
  for (int64_t l = 0; l < k; ++l) stats.add(static_cast<double>(row[l]));
  return stats;
}

// Writes slice p of entry l to out[p * slice_stride + l]; columns k .. k_stride - 1 are zero
// padding.
template <typename T, typename Out>
void split_row(const T* row, int64_t k, int64_t k_stride, int tau, int slices, int beta, Out* out,
               int64_t slice_stride) {
  for (int64_t l = 0; l < k_stride; ++l) {
    const double a = l < k ? static_cast<double>(row[l]) : 0.0;
    split_scaled_value(scaled_entry(a, tau), slices, beta,
                       [&](int p, double v) { out[p * slice_stride + l] = static_cast<Out>(v); });
  }
}

// Element e of a batched (batch, rows, k) operand, or the 2-D operand itself: a view, no copy.
inline at::Tensor batch_element(const at::Tensor& t, bool batched, int64_t e) {
  return batched ? t.select(0, e) : t;
}

}  // namespace ozaki::cpu
