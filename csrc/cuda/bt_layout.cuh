// Where the rows of bt lie for the kernels that read B's columns in place (docs/algorithm.md,
// "B's columns in place"), and the layout of a tensor bt that ozaki::gemm_crt and
// ozaki::crt_plan_reads receive.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "../checks.h"

namespace ozaki::cuda {

// Where the rows of bt lie in memory: rows of their own (entry l of flattened row g at g * k + l),
// or the columns of a row-major B read in place (bt = B.mT; n columns per element, element e at
// e * element_stride: entry l of row g = e n + j at e * element_stride + l * n + j), which saves
// the copy of B's columns into rows (docs/algorithm.md, "B's columns in place").
struct BtLayout {
  int64_t n = 0;  // 0: rows of their own
  int64_t element_stride = 0;

  __host__ __device__ bool columns() const { return n != 0; }
  // Offset of entry 0 of flattened row g, and the distance between its consecutive entries.
  __host__ __device__ int64_t start(int64_t g, int64_t k) const {
    return columns() ? (g / n) * element_stride + g % n : g * k;
  }
  __host__ __device__ int64_t step() const { return columns() ? n : 1; }
};

// bt's layout: B's columns where bt is a column view (is_column_view), else rows of its own
// (contiguous, as the callers check).
inline BtLayout bt_layout_of(const at::Tensor& bt) {
  if (!is_column_view(bt)) return {};
  return {bt.size(-2), bt.dim() == 3 ? bt.stride(0) : 0};
}

}  // namespace ozaki::cuda
