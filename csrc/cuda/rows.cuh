// Block-wide per-row reductions of the row kernels (ozaki::row_stats, row_norm_exponents,
// row_norm_square_sums, row_stats_norms): a block of Threads threads reads one row, each thread
// a strided part of it (for_row_entries), then the warps and the block merge. Both reductions are
// exact and order-free (max/min and flags, integer sums), so every kernel that calls them, and the
// CPU kernels' plain loops, get the same bits.
#pragma once

#include <cstdint>

#include "../crt.h"
#include "../scheme.h"
#include "launch.cuh"

namespace ozaki::cuda {

constexpr int kRowThreads = 256;

// Where a kernel writes row_stats' outputs (tau, bit span, non-finite flag) of a row.
struct RowStatsOutputs {
  int* tau;
  int* bit_span;
  bool* nonfinite;
  __device__ void write(int64_t row, const RowStats& stats) const {
    tau[row] = stats.tau();
    bit_span[row] = stats.bit_span();
    nonfinite[row] = stats.nonfinite;
  }
};

// The RowStats of row[0 .. k) (row_stats' tau, bit span, non-finite flag), returned to every
// thread of the block. All threads must call it; a block may call it again (next row) once it
// returns.
template <int Threads = kRowThreads, typename T>
__device__ __forceinline__ RowStats block_row_stats(const T* row, int64_t k) {
  RowStats stats;
  for_row_entries(row, k, [&](T x) { stats.add(static_cast<double>(x)); });
  for (int offset = 16; offset > 0; offset /= 2) {
    stats.merge(__shfl_xor_sync(0xffffffffu, stats.max_exponent, offset),
                __shfl_xor_sync(0xffffffffu, stats.lowest_bit, offset),
                __shfl_xor_sync(0xffffffffu, static_cast<int>(stats.nonfinite), offset) != 0);
  }
  __shared__ int warp_max[Threads / 32], warp_low[Threads / 32];
  __shared__ bool warp_flag[Threads / 32];
  if (threadIdx.x % 32 == 0) {
    warp_max[threadIdx.x / 32] = stats.max_exponent;
    warp_low[threadIdx.x / 32] = stats.lowest_bit;
    warp_flag[threadIdx.x / 32] = stats.nonfinite;
  }
  __syncthreads();
  RowStats total;  // every thread merges the warps' (shared-memory broadcasts)
  for (int w = 0; w < Threads / 32; ++w) total.merge(warp_max[w], warp_low[w], warp_flag[w]);
  __syncthreads();  // read by all before a next call overwrites them
  return total;
}

// The exact sum of norm_square_units(x, tau) (csrc/crt.h) over the entries x of row[0 .. k),
// returned to every thread of the block; calls as block_row_stats.
template <int Threads = kRowThreads, typename T>
__device__ __forceinline__ uint64_t block_norm_square_sum(const T* row, int64_t k, int tau) {
  unsigned long long sum = 0;  // exact: integers, any order
  for_row_entries(row, k, [&](T x) { sum += norm_square_units(static_cast<double>(x), tau); });
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ unsigned long long warp_sum[Threads / 32];
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = sum;
  __syncthreads();
  unsigned long long total = 0;
  for (int w = 0; w < Threads / 32; ++w) total += warp_sum[w];
  __syncthreads();
  return total;
}

}  // namespace ozaki::cuda
