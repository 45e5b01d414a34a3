// Launchers of the CUDA split kernels, shared by the split operators and the GEMM path.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "batch.cuh"

namespace ozaki::cuda {

// Per-row tau, bit span and non-finite flag of a (rows, k) row-major matrix.
template <typename T>
void launch_row_stats(const T* a, int64_t rows, int64_t k, int* tau, int* bit_span, bool* nonfinite,
                      cudaStream_t stream);

// FP16 (Digit = __half, d * 2^-beta) or INT8 (Digit = int8_t, d) slices of the rows `blocks` of a
// (row-major, k columns), row r of element e written to out[((e * slices + p) * blocks.count + r) *
// k_stride + l] (each element's stacked slices one GEMM operand); columns k .. k_stride - 1
// (k_stride % 4 == 0) are zeroed.
template <typename T, typename Digit>
void launch_split_rows(const T* a, int64_t k, const RowBlocks& blocks, int64_t k_stride,
                       const int* tau, int slices, int beta, Digit* out, cudaStream_t stream);

}  // namespace ozaki::cuda
