// The INT8 tensor-core GEMM of the int8 and crt backends: INT8 operands, INT32 accumulation and
// output, exact whenever k * max|a| * max|b| < 2^31 (the callers' digit and residue bounds).
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "batch.cuh"

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
  const int32_t one = 1, zero = 0;
  const int64_t block = int8_column_block(cols);
  for (int64_t c0 = 0; c0 < cols; c0 += block) {
    const int64_t width = std::min(block, cols - c0);
    if (batch.count == 1) {
      TORCH_CUDABLAS_CHECK(cublasGemmEx(
          handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(width), static_cast<int>(rows),
          static_cast<int>(k_stride), &one, b + c0 * k_stride, CUDA_R_8I,
          static_cast<int>(k_stride), a, CUDA_R_8I, static_cast<int>(k_stride), &zero, out + c0,
          CUDA_R_32I, static_cast<int>(ld), CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
      continue;
    }
    for (int64_t first = 0; first < batch.count; first += kMaxGemmBatch) {
      const int64_t count = std::min(kMaxGemmBatch, batch.count - first);
      TORCH_CUDABLAS_CHECK(cublasGemmStridedBatchedEx(
          handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(width), static_cast<int>(rows),
          static_cast<int>(k_stride), &one, b + first * batch.stride_b + c0 * k_stride, CUDA_R_8I,
          static_cast<int>(k_stride), batch.stride_b, a + first * batch.stride_a, CUDA_R_8I,
          static_cast<int>(k_stride), batch.stride_a, &zero, out + first * batch.stride_out + c0,
          CUDA_R_32I, static_cast<int>(ld), batch.stride_out, static_cast<int>(count),
          CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    }
  }
}

inline void exact_int8_gemm(cublasHandle_t handle, const int8_t* b, const int8_t* a, int64_t cols,
                            int64_t rows, int64_t k_stride, int32_t* out, int64_t ld) {
  exact_int8_gemm_batched(handle, b, a, cols, rows, k_stride, out, ld, kSingleGemm);
}

}  // namespace ozaki::cuda
