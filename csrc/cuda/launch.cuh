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

}  // namespace ozaki::cuda
