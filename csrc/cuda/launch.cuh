// Grid sizing shared by the element-wise kernels, and the loads of their rows.
#pragma once

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../scheme.h"

namespace ozaki::cuda {

// Blocks of a launch whose kernel takes rows blockIdx.x, blockIdx.x + gridDim.x, ...: one per row,
// up to 2^30 (grid x holds at most 2^31 - 1; a 64-bit row count would wrap in the launch).
inline unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t(1) << 30));
}

// Blocks for `work` items at `threads` per block, capped at 32 blocks per multiprocessor (the
// kernels loop grid-stride over the rest).
inline int grid_for(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  const int64_t cap = int64_t(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 32;
  return static_cast<int>(std::max<int64_t>(1, std::min(blocks, cap)));
}

// A launch over `rows` rows of `per_row` work items each, `threads` threads per block: blocks of
// x by y threads, x the smallest power of two at least per_row (at most threads) and y = threads
// / x rows at a time, so that rows shorter than a block still keep every thread busy; grid x
// covers a row's items, grid y the rows y at a time (at most 65535 steps; the kernels loop over
// the rest), all within grid_for's cap. Kernels take row blockIdx.y * blockDim.y + threadIdx.y
// (striding by gridDim.y * blockDim.y) and item blockIdx.x * blockDim.x + threadIdx.x of it.
struct RowLaunch {
  dim3 grid, block;
};
inline RowLaunch row_launch(int64_t rows, int64_t per_row, int threads) {
  int x = 1;
  while (x < per_row && x < threads) x *= 2;
  const int y = threads / x;
  const int grid_x = grid_for(per_row, x);
  const int cap = grid_for(rows * per_row, threads);
  const int64_t row_steps = (rows + y - 1) / y;
  const int64_t grid_y = std::clamp<int64_t>(cap / grid_x, 1, std::min<int64_t>(row_steps, 65535));
  return {dim3(grid_x, static_cast<unsigned>(grid_y)), dim3(x, y)};
}

// Entries per group of load_entry_group: one 8-byte store of their int8 residues or digits.
constexpr int kEntryGroup = 8;

// Entries [l0, l0 + 8) of a row of k entries as doubles, 0 past k. aligned (k a multiple of 8 and
// a 16-byte aligned row): 16-byte loads (a group is then wholly inside the row or wholly past it).
template <bool aligned, typename T>
__device__ __forceinline__ void load_entry_group(const T* entries, int64_t l0, int64_t k,
                                                 double (&x)[kEntryGroup]) {
  if constexpr (aligned) {
    if (l0 >= k) {
#pragma unroll
      for (int c = 0; c < kEntryGroup; ++c) x[c] = 0.0;
      return;
    }
    using Vector = std::conditional_t<sizeof(T) == 8, double2, float4>;
    constexpr int per_vector = 16 / sizeof(T);
#pragma unroll
    for (int v = 0; v < kEntryGroup / per_vector; ++v) {
      const Vector loaded = __ldg(reinterpret_cast<const Vector*>(entries + l0) + v);
      const T* parts = reinterpret_cast<const T*>(&loaded);
#pragma unroll
      for (int c = 0; c < per_vector; ++c) x[v * per_vector + c] = static_cast<double>(parts[c]);
    }
  } else {
#pragma unroll
    for (int c = 0; c < kEntryGroup; ++c) {
      x[c] = l0 + c < k ? static_cast<double>(entries[l0 + c]) : 0.0;
    }
  }
}

// Whether rows of k entries from `a` on take load_entry_group<true> (k a multiple of 8, a 16-byte
// aligned).
template <typename T>
inline bool entry_groups_aligned(const T* a, int64_t k) {
  return k % kEntryGroup == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0;
}

// Calls f(entry) for the entries l = threadIdx.x, + blockDim.x, ... of one row of k entries (a
// block per row), loading four before using any so that several loads per thread are in flight
// (one at a time left the per-row reductions well below the memory bandwidth). The order of the
// calls differs from a plain loop's: for the exact, order-free reductions that use it.
template <typename T, typename F>
__device__ __forceinline__ void for_row_entries(const T* row, int64_t k, F f) {
  const int64_t step = blockDim.x;
  int64_t l = threadIdx.x;
  for (; l + 3 * step < k; l += 4 * step) {
    const T v0 = row[l], v1 = row[l + step], v2 = row[l + 2 * step], v3 = row[l + 3 * step];
    f(v0);
    f(v1);
    f(v2);
    f(v3);
  }
  for (; l < k; l += step) f(row[l]);
}

// Block-wide reductions of the one-block-per-row kernels (blocks of Threads threads): every thread
// calls with its part, thread 0 gets the row's total. Exact and order-free (max, min, or; integer
// sums), so they match the CPU's row-by-row loops.
template <int Threads>
__device__ RowStats block_row_stats(RowStats stats) {
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
  RowStats total;
  if (threadIdx.x == 0) {
    for (int w = 0; w < Threads / 32; ++w) total.merge(warp_max[w], warp_low[w], warp_flag[w]);
  }
  return total;
}

template <int Threads>
__device__ unsigned long long block_sum(unsigned long long value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  __shared__ unsigned long long warp_sum[Threads / 32];
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = value;
  __syncthreads();
  unsigned long long total = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < Threads / 32; ++w) total += warp_sum[w];
  }
  return total;
}

}  // namespace ozaki::cuda
