// The FP16 tensor-core GEMM of the fp16 backend and of the |A||B| estimate: FP16 operands, FP32
// accumulation and output, exact for the digit grids of csrc/scheme.h (every partial sum an
// integer below 2^24 units).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "tn_gemm.cuh"

namespace ozaki::cuda {

// Row-major out (rows x cols, leading dimension ld) = a (rows x k_stride) * b (cols x k_stride)^T,
// for each product of a strided batch (tn_gemm.cuh).
inline void exact_half_gemm_batched(cublasHandle_t handle, const __half* b, const __half* a,
                                    int64_t cols, int64_t rows, int64_t k_stride, float* out,
                                    int64_t ld, const GemmBatch& batch) {
  tn_gemm<__half, float, float>(handle, b, a, cols, rows, k_stride, out, ld, batch,
                                GemmTypes{CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F});
}

}  // namespace ozaki::cuda
