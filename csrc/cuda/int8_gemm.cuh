// The INT8 tensor-core GEMM of the int8 and crt backends: INT8 operands, INT32 accumulation and
// output, exact whenever k * max|a| * max|b| < 2^31 (the callers' digit and residue bounds).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "tn_gemm.cuh"

namespace ozaki::cuda {

// Output columns per cuBLAS call. On the H100 cuBLAS's default algorithm for an INT8 GEMM with
// 16384 output columns picks a tile that runs at 787-794 TOPS; the same product as two calls of
// 8192 columns runs at 1472-1513 TOPS, and 8192 columns as two calls of 4096 at 1442 against 1348
// TOPS in one call (scripts/int8_rate.cu, scripts/int8_blocks.py; docs/benchmarks.md). So from
// 8192 columns on, the columns go in at least two calls of at most 8192. OZAKI_INT8_BLOCK (a
// fixed width) overrides it for tuning.
inline int64_t int8_column_block(int64_t cols) {
  static const int64_t fixed = [] {
    const char* value = std::getenv("OZAKI_INT8_BLOCK");
    const long parsed = value != nullptr ? std::strtol(value, nullptr, 10) : 0;
    return parsed > 0 ? static_cast<int64_t>(parsed) : int64_t(0);
  }();
  if (fixed > 0) return fixed;
  constexpr int64_t kWidest = 8192;
  if (cols < kWidest) return cols;
  const int64_t calls = std::max<int64_t>(2, (cols + kWidest - 1) / kWidest);
  return ((cols + calls - 1) / calls + 63) / 64 * 64;
}

// Row-major out (rows x cols, leading dimension ld) = a (rows x k_stride) * b (cols x k_stride)^T,
// both operands K-major (cuBLAS "TN"); k_stride and ld must be multiples of 4 (16 for speed). For
// each product of a strided batch (cublasGemmEx calls when batch.count is 1); the column blocks
// apply to every product of the batch alike.
inline void exact_int8_gemm_batched(cublasHandle_t handle, const int8_t* b, const int8_t* a,
                                    int64_t cols, int64_t rows, int64_t k_stride, int32_t* out,
                                    int64_t ld, const GemmBatch& batch) {
  const int64_t block = int8_column_block(cols);
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
