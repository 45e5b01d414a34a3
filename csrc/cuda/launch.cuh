// Grid sizing shared by the element-wise kernels.
#pragma once

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstdint>

namespace ozaki::cuda {

// Blocks for `work` items at `threads` per block, capped at 32 blocks per multiprocessor (the
// kernels loop grid-stride over the rest).
inline int grid_for(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  const int64_t cap = int64_t(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 32;
  return static_cast<int>(std::max<int64_t>(1, std::min(blocks, cap)));
}

// A 2-D grid for `rows` rows of `per_row` work items each at `threads` items per block: x covers a
// row's items, y the rows (at most 65535; the kernels loop over the rest), all within grid_for's cap.
inline dim3 row_grid(int64_t rows, int64_t per_row, int threads) {
  const int x = grid_for(per_row, threads);
  const int cap = grid_for(rows * per_row, threads);
  const int64_t y = std::clamp<int64_t>(cap / x, 1, std::min<int64_t>(rows, 65535));
  return dim3(x, static_cast<unsigned>(y));
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

}  // namespace ozaki::cuda
