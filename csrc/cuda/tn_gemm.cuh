// The one cuBLAS call pattern behind the exact FP16 and INT8 GEMMs (half_gemm.cuh, int8_gemm.cuh).
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>

#include <algorithm>
#include <cstdint>

#include "batch.cuh"

namespace ozaki::cuda {

// The cuBLAS types of one exact GEMM: operand and output data types and the compute type.
struct GemmTypes {
  cudaDataType operand, output;
  cublasComputeType_t compute;
};

// Row-major out (rows x cols, leading dimension ld) = a (rows x k_stride) * b (cols x k_stride)^T,
// for each product of a strided batch. In cuBLAS's column-major terms out^T = b^T * a with both
// operands K-major: the "TN" layout the tensor-core kernels prefer. One product is one
// cublasGemmEx call; a batch goes in cublasGemmStridedBatchedEx calls of at most kMaxGemmBatch.
template <typename Operand, typename Output, typename Scalar>
void tn_gemm(cublasHandle_t handle, const Operand* b, const Operand* a, int64_t cols, int64_t rows,
             int64_t k_stride, Output* out, int64_t ld, const GemmBatch& batch,
             const GemmTypes& types) {
  const Scalar one = 1, zero = 0;
  // Sizes past int's range (2^31 rows of a, say) take cuBLAS's 64-bit calls; the others keep the
  // int calls the kernels were measured with. Either way the integer products are exact.
  constexpr int64_t kIntMax = 2147483647;
  const bool wide = std::max({cols, rows, k_stride, ld}) > kIntMax;
  if (batch.count == 1) {
    if (wide) {
      TORCH_CUDABLAS_CHECK(cublasGemmEx_64(handle, CUBLAS_OP_T, CUBLAS_OP_N, cols, rows, k_stride,
                                           &one, b, types.operand, k_stride, a, types.operand,
                                           k_stride, &zero, out, types.output, ld, types.compute,
                                           CUBLAS_GEMM_DEFAULT));
      return;
    }
    const int n = static_cast<int>(cols), m = static_cast<int>(rows), k = static_cast<int>(k_stride);
    TORCH_CUDABLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b,
                                      types.operand, k, a, types.operand, k, &zero, out,
                                      types.output, static_cast<int>(ld), types.compute,
                                      CUBLAS_GEMM_DEFAULT));
    return;
  }
  for (int64_t first = 0; first < batch.count; first += kMaxGemmBatch) {
    const int64_t count = std::min(kMaxGemmBatch, batch.count - first);
    const Operand* b_first = b + first * batch.stride_b;
    const Operand* a_first = a + first * batch.stride_a;
    Output* out_first = out + first * batch.stride_out;
    if (wide) {
      TORCH_CUDABLAS_CHECK(cublasGemmStridedBatchedEx_64(
          handle, CUBLAS_OP_T, CUBLAS_OP_N, cols, rows, k_stride, &one, b_first, types.operand,
          k_stride, batch.stride_b, a_first, types.operand, k_stride, batch.stride_a, &zero,
          out_first, types.output, ld, batch.stride_out, count, types.compute,
          CUBLAS_GEMM_DEFAULT));
      continue;
    }
    const int n = static_cast<int>(cols), m = static_cast<int>(rows), k = static_cast<int>(k_stride);
    TORCH_CUDABLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b_first, types.operand, k,
        batch.stride_b, a_first, types.operand, k, batch.stride_a, &zero, out_first,
        types.output, static_cast<int>(ld), batch.stride_out, static_cast<int>(count),
        types.compute, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace ozaki::cuda
