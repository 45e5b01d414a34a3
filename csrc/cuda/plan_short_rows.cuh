// The plan's pass over short rows (docs/algorithm.md, "9.10"): row_stats_norm_kernel with
// WriteDigits (plan_reads.cu) for rows whose entries a block holds in registers, 8 consecutive
// ones per thread. The row is read from memory once, all its loads in flight together; the
// statistics, the norm sum and the digits then come from the registers instead of two more sweeps
// through L2. The same values, bit for bit.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "../crt.h"
#include "launch.cuh"

namespace ozaki::cuda {

constexpr int kShortRowThreads = 1024;

// Whether rows of k_stride entries (k padded, a multiple of kEntryGroup) go to
// short_row_plan: kEntryGroup entries per thread of a block of at most kShortRowThreads.
// Longer rows keep row_stats_norm_kernel (docs/benchmarks.md, "The plan's pass over short rows").
inline bool short_plan_rows(int64_t k_stride) {
  return k_stride <= int64_t(kShortRowThreads) * kEntryGroup;
}

// Blocks of Threads, a row at a time each (rows blockIdx.x, + gridDim.x, ...), thread t holding
// entries 8 t .. 8 t + 7 of the row (zeros past k, which add nothing to any of the values): the
// row's RowStats, then its norm sum with tau known, then, where digits is not nullptr, its
// magnitude digits into row `row` of digits (k_stride bytes, zeros past k). Row g gets tau,
// bit_span, nonfinite, norm_scale and usable at [g]; the block of row 0 sets *smallest to INT_MAX
// for the minimum epilogue (nullptr: not).
template <typename T, int Threads, bool aligned>
__device__ __forceinline__ void short_row_plan(const T* a, int64_t rows, int64_t k,
                                               int64_t k_stride, int gain, int* tau,
                                               int* bit_span, bool* nonfinite, int* norm_scale,
                                               bool* usable, int8_t* digits, int32_t* smallest) {
  __shared__ int row_tau, row_norm;
  const int64_t l0 = int64_t(kEntryGroup) * threadIdx.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    double x[kEntryGroup];
    load_entry_group<aligned>(a + row * k, l0, k, x);
    RowStats stats;
#pragma unroll
    for (int c = 0; c < kEntryGroup; ++c) stats.add(x[c]);
    const RowStats total = block_row_stats<Threads>(stats);
    if (threadIdx.x == 0) {
      tau[row] = total.tau();
      bit_span[row] = total.bit_span();
      nonfinite[row] = total.nonfinite;
      usable[row] = usable_row(total.bit_span(), total.nonfinite);
      if (row == 0 && smallest != nullptr) *smallest = INT_MAX;
      row_tau = total.tau();
    }
    __syncthreads();
    const int t = row_tau;
    unsigned long long sum = 0;  // exact: integers, any order
#pragma unroll
    for (int c = 0; c < kEntryGroup; ++c) sum += norm_square_units(x[c], t);
    const unsigned long long square_sum = block_sum<Threads>(sum);
    if (threadIdx.x == 0) {
      row_norm = norm_scale_code(square_sum, t);
      norm_scale[row] = row_norm;
    }
    __syncthreads();
    if (digits != nullptr && l0 < k_stride) {
      const int norm = row_norm;
      __align__(8) int8_t packed[kEntryGroup];
#pragma unroll
      for (int c = 0; c < kEntryGroup; ++c) {
        packed[c] = static_cast<int8_t>(magnitude_digit(x[c], t, norm, gain));
      }
      *reinterpret_cast<uint2*>(digits + row * k_stride + l0) =
          *reinterpret_cast<const uint2*>(packed);
    }
    __syncthreads();  // the next row rewrites the shared values
  }
}

// short_row_plan in blocks of up to kShortRowThreads / 2 threads, registers left to the compiler.
template <typename T, int Threads, bool aligned>
__global__ void __launch_bounds__(Threads)
    short_row_plan_kernel(const T* a, int64_t rows, int64_t k, int64_t k_stride, int gain,
                          int* tau, int* bit_span, bool* nonfinite, int* norm_scale, bool* usable,
                          int8_t* digits, int32_t* smallest) {
  short_row_plan<T, Threads, aligned>(a, rows, k, k_stride, gain, tau, bit_span, nonfinite,
                                      norm_scale, usable, digits, smallest);
}

// short_row_plan in blocks of kShortRowThreads, two per multiprocessor (32 registers), so that
// one block's loads overlap the other's reductions. A separate kernel: a minimum block count in
// the launch bound of the smaller blocks makes the compiler give them more registers, and they
// run slower.
template <typename T, bool aligned>
__global__ void __launch_bounds__(kShortRowThreads, 2)
    short_row_plan_two_per_sm_kernel(const T* a, int64_t rows, int64_t k, int64_t k_stride,
                                     int gain, int* tau, int* bit_span, bool* nonfinite,
                                     int* norm_scale, bool* usable, int8_t* digits,
                                     int32_t* smallest) {
  short_row_plan<T, kShortRowThreads, aligned>(a, rows, k, k_stride, gain, tau, bit_span,
                                               nonfinite, norm_scale, usable, digits, smallest);
}

// The kernel for blocks of Threads.
template <typename T, int Threads, bool aligned>
constexpr auto short_row_plan_kernel_for() {
  if constexpr (Threads == kShortRowThreads) {
    return &short_row_plan_two_per_sm_kernel<T, aligned>;
  } else {
    return &short_row_plan_kernel<T, Threads, aligned>;
  }
}

template <typename T, int Threads>
void launch_short_row_plan_of(const T* a, int64_t rows, int64_t k, int64_t k_stride, int gain,
                              int* tau, int* bit_span, bool* nonfinite, int* norm_scale,
                              bool* usable, int8_t* digits, int32_t* smallest,
                              cudaStream_t stream) {
  const bool aligned = entry_groups_aligned(a, k);
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(rows, INT_MAX));
  const auto kernel = aligned ? short_row_plan_kernel_for<T, Threads, true>()
                              : short_row_plan_kernel_for<T, Threads, false>();
  kernel<<<blocks, Threads, 0, stream>>>(a, rows, k, k_stride, gain, tau, bit_span, nonfinite,
                                         norm_scale, usable, digits, smallest);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// short_row_plan over the (rows, k) rows of a on `stream` (short_plan_rows(k_stride)), in
// blocks of 128 threads for rows of up to 1024 entries, 256 up to 2048, 512 up to 4096, else
// 1024.
template <typename T>
void launch_short_row_plan(const T* a, int64_t rows, int64_t k, int64_t k_stride, int gain,
                           int* tau, int* bit_span, bool* nonfinite, int* norm_scale, bool* usable,
                           int8_t* digits, int32_t* smallest, cudaStream_t stream) {
  TORCH_CHECK(k_stride % kEntryGroup == 0 && k_stride >= k && short_plan_rows(k_stride),
              "launch_short_row_plan: rows of ", k_stride, " padded entries");
  if (k_stride <= 128 * kEntryGroup) {
    launch_short_row_plan_of<T, 128>(a, rows, k, k_stride, gain, tau, bit_span, nonfinite,
                                     norm_scale, usable, digits, smallest, stream);
  } else if (k_stride <= 256 * kEntryGroup) {
    launch_short_row_plan_of<T, 256>(a, rows, k, k_stride, gain, tau, bit_span, nonfinite,
                                     norm_scale, usable, digits, smallest, stream);
  } else if (k_stride <= 512 * kEntryGroup) {
    launch_short_row_plan_of<T, 512>(a, rows, k, k_stride, gain, tau, bit_span, nonfinite,
                                     norm_scale, usable, digits, smallest, stream);
  } else {
    launch_short_row_plan_of<T, kShortRowThreads>(a, rows, k, k_stride, gain, tau, bit_span,
                                                  nonfinite, norm_scale, usable, digits,
                                                  smallest, stream);
  }
}

}  // namespace ozaki::cuda
