// The INT8 tensor-core GEMM of the int8 and crt backends: INT8 operands, INT32 accumulation and
// output, exact whenever k * max|a| * max|b| < 2^31 (the callers' digit and residue bounds).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "tn_gemm.cuh"

namespace ozaki::cuda {

// Output columns per cuBLAS call. cuBLAS's default algorithm picks slow tiles for some wide INT8
// GEMMs, which narrower calls avoid (measured in docs/benchmarks.md, "The INT8 GEMM rate"): from
// 8192 columns on, the columns go in calls of at most 8192 (16384 rows and k or more) or 4096.
// OZAKI_INT8_BLOCK (a fixed width) overrides it for tuning.
inline int64_t int8_column_block(int64_t rows, int64_t cols, int64_t k) {
  static const int64_t fixed = [] {
    const char* value = std::getenv("OZAKI_INT8_BLOCK");
    const long parsed = value != nullptr ? std::strtol(value, nullptr, 10) : 0;
    return parsed > 0 ? static_cast<int64_t>(parsed) : int64_t(0);
  }();
  if (fixed > 0) return fixed;
  constexpr int64_t kSplitFrom = 8192;
  if (cols < kSplitFrom) return cols;
  const int64_t widest = rows >= 16384 && k >= 16384 ? 8192 : 4096;
  const int64_t calls = (cols + widest - 1) / widest;
  return ((cols + calls - 1) / calls + 63) / 64 * 64;
}

// Row-major out (rows x cols, leading dimension ld) = a (rows x k_stride) * b (cols x k_stride)^T,
// both operands K-major (cuBLAS "TN"); k_stride and ld must be multiples of 4 (16 for speed). For
// each product of a strided batch (cublasGemmEx calls when batch.count is 1); the column blocks
// apply to every product of the batch alike.
inline void exact_int8_gemm_batched(cublasHandle_t handle, const int8_t* b, const int8_t* a,
                                    int64_t cols, int64_t rows, int64_t k_stride, int32_t* out,
                                    int64_t ld, const GemmBatch& batch) {
  const int64_t block = int8_column_block(rows, cols, k_stride);
  for (int64_t c0 = 0; c0 < cols; c0 += block) {
    tn_gemm<int8_t, int32_t, int32_t>(handle, b + c0 * k_stride, a, std::min(block, cols - c0),
                                      rows, k_stride, out + c0, ld, batch,
                                      GemmTypes{CUDA_R_8I, CUDA_R_32I, CUBLAS_COMPUTE_32I});
  }
}

inline void exact_int8_gemm(cublasHandle_t handle, const int8_t* b, const int8_t* a, int64_t cols,
                            int64_t rows, int64_t k_stride, int32_t* out, int64_t ld) {
  exact_int8_gemm_batched(handle, b, a, cols, rows, k_stride, out, ld, kSingleGemm);
}

}  // namespace ozaki::cuda
