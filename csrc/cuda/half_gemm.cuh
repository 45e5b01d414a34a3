// The one tensor-core GEMM ozaki uses: FP16 operands, FP32 accumulation and output, exact for
// the digit grids of csrc/scheme.h (every partial sum an integer below 2^24 units).
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace ozaki::cuda {

// Row-major out (rows x cols, leading dimension ld) = a (rows x k_stride) * b (cols x k_stride)^T.
// In cuBLAS's column-major terms out^T = b^T * a with both operands K-major: the "TN" layout the
// FP16 tensor-core kernels prefer.
inline void exact_half_gemm(cublasHandle_t handle, const __half* b, const __half* a, int64_t cols,
                            int64_t rows, int64_t k_stride, float* out, int64_t ld) {
  const float one = 1.0f, zero = 0.0f;
  TORCH_CUDABLAS_CHECK(cublasGemmEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(cols), static_cast<int>(rows),
      static_cast<int>(k_stride), &one, b, CUDA_R_16F, static_cast<int>(k_stride), a, CUDA_R_16F,
      static_cast<int>(k_stride), &zero, out, CUDA_R_32F, static_cast<int>(ld), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace ozaki::cuda
