// The one tensor-core GEMM ozaki uses: FP16 operands, FP32 accumulation and output, exact for
// the digit grids of csrc/scheme.h (every partial sum an integer below 2^24 units).
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "batch.cuh"

namespace ozaki::cuda {

// Row-major out (rows x cols, leading dimension ld) = a (rows x k_stride) * b (cols x k_stride)^T,
// for each product of a strided batch (one cublasGemmEx call when batch.count is 1).
// In cuBLAS's column-major terms out^T = b^T * a with both operands K-major: the "TN" layout the
// FP16 tensor-core kernels prefer.
inline void exact_half_gemm_batched(cublasHandle_t handle, const __half* b, const __half* a,
                                    int64_t cols, int64_t rows, int64_t k_stride, float* out,
                                    int64_t ld, const GemmBatch& batch) {
  const float one = 1.0f, zero = 0.0f;
  if (batch.count == 1) {
    TORCH_CUDABLAS_CHECK(cublasGemmEx(
        handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(cols), static_cast<int>(rows),
        static_cast<int>(k_stride), &one, b, CUDA_R_16F, static_cast<int>(k_stride), a, CUDA_R_16F,
        static_cast<int>(k_stride), &zero, out, CUDA_R_32F, static_cast<int>(ld),
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  for (int64_t first = 0; first < batch.count; first += kMaxGemmBatch) {
    const int64_t count = std::min(kMaxGemmBatch, batch.count - first);
    TORCH_CUDABLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(cols), static_cast<int>(rows),
        static_cast<int>(k_stride), &one, b + first * batch.stride_b, CUDA_R_16F,
        static_cast<int>(k_stride), batch.stride_b, a + first * batch.stride_a, CUDA_R_16F,
        static_cast<int>(k_stride), batch.stride_a, &zero, out + first * batch.stride_out,
        CUDA_R_32F, static_cast<int>(ld), batch.stride_out, static_cast<int>(count),
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

inline void exact_half_gemm(cublasHandle_t handle, const __half* b, const __half* a, int64_t cols,
                            int64_t rows, int64_t k_stride, float* out, int64_t ld) {
  exact_half_gemm_batched(handle, b, a, cols, rows, k_stride, out, ld, kSingleGemm);
}

}  // namespace ozaki::cuda
