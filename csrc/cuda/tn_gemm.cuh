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
// cuBLAS takes int sizes (its 64-bit calls refuse INT8 GEMMs of 2^31 rows), so rows go in blocks
// of at most 2^30, each block's rows of out their own dot products: the same integers.
template <typename Operand, typename Output, typename Scalar>
void tn_gemm(cublasHandle_t handle, const Operand* b, const Operand* a, int64_t cols, int64_t rows,
             int64_t k_stride, Output* out, int64_t ld, const GemmBatch& batch,
             const GemmTypes& types) {
  constexpr int64_t kIntMax = 2147483647, kRowBlock = int64_t(1) << 30;
  TORCH_CHECK(std::max({cols, k_stride, ld}) <= kIntMax, "ozaki: a GEMM of ", rows, " x ", cols,
              " x ", k_stride, " (output leading dimension ", ld,
              ") has sizes past cuBLAS's int range");
  const Scalar one = 1, zero = 0;
  const int n = static_cast<int>(cols), k = static_cast<int>(k_stride), ldc = static_cast<int>(ld);
  for (int64_t first_row = 0; first_row < rows; first_row += kRowBlock) {
    const int m = static_cast<int>(std::min(kRowBlock, rows - first_row));
    const Operand* a_rows = a + first_row * k_stride;
    Output* out_rows = out + first_row * ld;
    if (batch.count == 1) {
      TORCH_CUDABLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b,
                                        types.operand, k, a_rows, types.operand, k, &zero,
                                        out_rows, types.output, ldc, types.compute,
                                        CUBLAS_GEMM_DEFAULT));
      continue;
    }
    for (int64_t first = 0; first < batch.count; first += kMaxGemmBatch) {
      const int64_t count = std::min(kMaxGemmBatch, batch.count - first);
      TORCH_CUDABLAS_CHECK(cublasGemmStridedBatchedEx(
          handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b + first * batch.stride_b,
          types.operand, k, batch.stride_b, a_rows + first * batch.stride_a, types.operand, k,
          batch.stride_a, &zero, out_rows + first * batch.stride_out, types.output, ldc,
          batch.stride_out, static_cast<int>(count), types.compute, CUBLAS_GEMM_DEFAULT));
    }
  }
}

}  // namespace ozaki::cuda
