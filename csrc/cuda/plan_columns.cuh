// row_stats_norm_kernel with WriteDigits (plan_reads.cu) for bt = B's columns read in place
// (BtLayout): the statistics, norm scales, usable flags and magnitude digits of each column of a
// row-major B, the same values as the pass over B's columns copied into rows (docs/algorithm.md,
// "B's columns in place").
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "../crt.h"
#include "bt_layout.cuh"
#include "plan_rows.cuh"

namespace ozaki::cuda {

// A block reads kColumnGroup columns at a time (consecutive rows of the flattened bt; a warp's
// loads read 8 rows of B, 32 bytes of each in float64), kColumnPassThreads / kColumnGroup threads
// (phases) along each.
constexpr int kColumnGroup = 4;
// Digits go through shared memory 8 consecutive ones per thread at a time, in rows padded to 32
// bytes past the chunk: the 8-byte stores of 16 threads (4 columns, 4 phases) meet in no bank.
constexpr int kDigitsPerThread = 8;
// Loads in flight per thread in the first two sweeps.
constexpr int kColumnLoadsAhead = 8;
// Threads per block: two blocks per multiprocessor (48 registers each in float64), whose
// reductions and barriers the other block's loads overlap.
constexpr int kColumnPassThreads = 512;

// Whether the pass keeps its columns in L2 with one block per multiprocessor (its three sweeps
// over a group of columns then read B from memory once), within row_pass_launch's L2 budget.
inline bool column_pass_keeps_columns(int64_t k, int64_t entry_bytes) {
  const int64_t budget = row_pass_l2_budget();
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return budget > 0 && sms * kColumnGroup * k * entry_bytes <= budget;
}

// The column pass's blocks, looping over the groups: per multiprocessor as many as the L2 budget
// keeps the columns of (at least one, at most as many as its threads allow).
inline int64_t column_pass_blocks(int64_t rows, int64_t k, int64_t entry_bytes) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t per_sm = std::clamp<int64_t>(
      row_pass_l2_budget() / (sms * kColumnGroup * k * entry_bytes), 1, 2048 / kColumnPassThreads);
  const int64_t groups = (rows + kColumnGroup - 1) / kColumnGroup;
  return std::max<int64_t>(1, std::min(groups, sms * per_sm));
}

// Sums of one value per thread over the kColumnPhases threads of each column (threads c,
// c + kColumnGroup, ...: the lanes of every warp equal to c modulo kColumnGroup), in a fixed
// order, handed to thread c < kColumnGroup (the others get their own partial). Combine(x, y) is
// exact and order-free.
template <typename V, typename Combine>
__device__ __forceinline__ V column_total(V value, V (*warp_parts)[kColumnGroup], Combine combine) {
#pragma unroll
  for (int offset = kColumnGroup; offset < 32; offset *= 2) {
    value = combine(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane < kColumnGroup) warp_parts[warp][lane] = value;
  __syncthreads();
  if (threadIdx.x < kColumnGroup) {
    for (int w = 1; w < kColumnPassThreads / 32; ++w) {
      value = combine(value, warp_parts[w][threadIdx.x]);
    }
  }
  return value;
}

// Blocks of kColumnPassThreads, a group of kColumnGroup columns at a time (groups blockIdx.x, +
// gridDim.x, ...): each column's RowStats, then its norm sum with tau known, then, where digits is
// not nullptr, its magnitude digits into row g of digits (k_stride bytes, zeros past k). Column g
// < rows of the flattened bt gets tau, bit_span, nonfinite, norm_scale and usable at [g]; the
// block of group 0 sets *smallest to INT_MAX for the minimum epilogue (nullptr: not).
template <typename T>
__global__ void __launch_bounds__(kColumnPassThreads)
    column_plan_kernel(const T* b, int64_t k, BtLayout layout, int64_t rows, int64_t k_stride,
                       int gain, int* tau, int* bit_span, bool* nonfinite, int* norm_scale,
                       bool* usable, int8_t* digits, int32_t* smallest) {
  constexpr int kColumnPhases = kColumnPassThreads / kColumnGroup;
  constexpr int kDigitChunk = kDigitsPerThread * kColumnPhases;
  constexpr int kDigitRowBytes = kDigitChunk + 32;
  __shared__ int max_parts[kColumnPassThreads / 32][kColumnGroup];
  __shared__ int low_parts[kColumnPassThreads / 32][kColumnGroup];
  __shared__ int flag_parts[kColumnPassThreads / 32][kColumnGroup];
  __shared__ unsigned long long sum_parts[kColumnPassThreads / 32][kColumnGroup];
  __shared__ int column_tau[kColumnGroup], column_norm[kColumnGroup];
  __shared__ __align__(16) uint8_t chunk[kColumnGroup * kDigitRowBytes];
  const int c = threadIdx.x % kColumnGroup, phase = threadIdx.x / kColumnGroup;
  const int64_t step = layout.step();
  const int64_t groups = (rows + kColumnGroup - 1) / kColumnGroup;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const int64_t g = group * kColumnGroup + c;
    const bool in_rows = g < rows;
    const T* column = b + layout.start(in_rows ? g : 0, k);
    // f(entry) for the entries phase, phase + kColumnPhases, ... of the column, with
    // kColumnLoadsAhead loads in flight.
    const auto for_column_entries = [&](auto f) {
      if (!in_rows) return;
      int64_t l = phase;
      for (; l + (kColumnLoadsAhead - 1) * kColumnPhases < k;
           l += kColumnLoadsAhead * kColumnPhases) {
        T v[kColumnLoadsAhead];
#pragma unroll
        for (int u = 0; u < kColumnLoadsAhead; ++u) v[u] = column[(l + u * kColumnPhases) * step];
#pragma unroll
        for (int u = 0; u < kColumnLoadsAhead; ++u) f(v[u]);
      }
      for (; l < k; l += kColumnPhases) f(column[l * step]);
    };
    RowStats stats;
    for_column_entries([&](T x) { stats.add(static_cast<double>(x)); });
    const int high = column_total(stats.max_exponent, max_parts,
                                  [](int x, int y) { return x > y ? x : y; });
    const int low = column_total(stats.lowest_bit, low_parts,
                                 [](int x, int y) { return x < y ? x : y; });
    const int flag = column_total(static_cast<int>(stats.nonfinite), flag_parts,
                                  [](int x, int y) { return x | y; });
    if (threadIdx.x < kColumnGroup) {
      RowStats total;
      total.merge(high, low, flag != 0);
      column_tau[c] = total.tau();
      if (in_rows) {
        tau[g] = total.tau();
        bit_span[g] = total.bit_span();
        nonfinite[g] = total.nonfinite;
        usable[g] = usable_row(total.bit_span(), total.nonfinite);
      }
      if (group == 0 && c == 0 && smallest != nullptr) *smallest = INT_MAX;
    }
    __syncthreads();
    const int t = column_tau[c];
    unsigned long long sum = 0;  // exact: integers, any order
    for_column_entries([&](T x) { sum += norm_square_units(static_cast<double>(x), t); });
    sum = column_total(sum, sum_parts,
                       [](unsigned long long x, unsigned long long y) { return x + y; });
    if (threadIdx.x < kColumnGroup) {
      column_norm[c] = norm_scale_code(sum, t);
      if (in_rows) norm_scale[g] = column_norm[c];
    }
    __syncthreads();
    if (digits != nullptr) {
      const int norm = column_norm[c];
      for (int64_t l0 = 0; l0 < k_stride; l0 += kDigitChunk) {
        const int64_t first = l0 + kDigitsPerThread * phase;
        T x[kDigitsPerThread];
#pragma unroll
        for (int q = 0; q < kDigitsPerThread; ++q) {
          x[q] = in_rows && first + q < k ? column[(first + q) * step] : T(0);
        }
        __align__(8) int8_t packed[kDigitsPerThread];
#pragma unroll
        for (int q = 0; q < kDigitsPerThread; ++q) {
          packed[q] = static_cast<int8_t>(
              first + q < k ? magnitude_digit(static_cast<double>(x[q]), t, norm, gain) : 0);
        }
        *reinterpret_cast<uint2*>(chunk + c * kDigitRowBytes + kDigitsPerThread * phase) =
            *reinterpret_cast<const uint2*>(packed);
        __syncthreads();
        // Threads t below kColumnGroup * kDigitChunk / 16: 16 bytes of column t / (kDigitChunk /
        // 16) at 16 (t % (kDigitChunk / 16)).
        constexpr int kPiecesPerColumn = kDigitChunk / 16;
        const int column_in_group = threadIdx.x / kPiecesPerColumn;
        const int at = 16 * (threadIdx.x % kPiecesPerColumn);
        const int64_t row = group * kColumnGroup + column_in_group;
        if (column_in_group < kColumnGroup && row < rows && l0 + at < k_stride) {
          *reinterpret_cast<uint4*>(digits + row * k_stride + l0 + at) =
              *reinterpret_cast<const uint4*>(chunk + column_in_group * kDigitRowBytes + at);
        }
        __syncthreads();
      }
    }
    __syncthreads();  // the next group rewrites the shared values
  }
}

// column_plan_kernel over the rows (= batch * n columns of B) of bt on `stream`.
template <typename T>
void launch_column_plan(const T* b, int64_t k, const BtLayout& layout, int64_t rows,
                        int64_t k_stride, int gain, int* tau, int* bit_span, bool* nonfinite,
                        int* norm_scale, bool* usable, int8_t* digits, int32_t* smallest,
                        cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(column_pass_blocks(rows, k, sizeof(T)));
  column_plan_kernel<T><<<blocks, kColumnPassThreads, 0, stream>>>(
      b, k, layout, rows, k_stride, gain, tau, bit_span, nonfinite, norm_scale, usable, digits,
      smallest);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace ozaki::cuda
