// row_stats_norm_kernel with WriteDigits (plan_reads.cu) for bt = B's columns read in place
// (BtLayout): the statistics, norm scales, usable flags and (for the default plan's reads) the
// magnitude digits of each column of a row-major B, the same values as the pass over B's columns
// copied into rows (docs/algorithm.md, "B's columns in place").
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <iterator>

#include "../crt.h"
#include "bt_layout.cuh"
#include "plan_rows.cuh"

namespace ozaki::cuda {

// The pass's configurations: a block reads Group columns at a time (consecutive rows of the
// flattened bt), Threads / Group threads (phases) along each, so a warp's loads read 32 / Group
// rows of B, 8 Group bytes of each in float64. Four columns per block where few columns or long
// ones leave no other choice (32-byte pieces of B's lines); eight or sixteen (64 or 128 bytes, a
// whole line) where every multiprocessor gets a group and one group per multiprocessor stays in
// L2: whole lines take fewer L2 requests and DRAM bursts per byte.
struct ColumnPassConfig {
  int group;    // columns per block at a time
  int threads;  // per block
};
constexpr ColumnPassConfig kNarrowColumnPass{4, 512};
constexpr ColumnPassConfig kWideColumnPasses[] = {{16, 1024}, {8, 1024}};
// Digits go through shared memory 8 consecutive ones per thread at a time.
constexpr int kDigitsPerThread = 8;
// Loads in flight per thread in the first two sweeps.
constexpr int kColumnLoadsAhead = 8;

// L2 bytes the pass keeps resident at one block per multiprocessor: the columns of one group of
// `group` on every multiprocessor.
inline int64_t column_pass_footprint(int group, int64_t k, int64_t entry_bytes) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return sms * group * k * entry_bytes;
}

// Whether the pass keeps its columns in L2 with one block per multiprocessor (its three sweeps
// over a group of columns then read B from memory once), within row_pass_launch's L2 budget.
inline bool column_pass_keeps_columns(int64_t k, int64_t entry_bytes) {
  const int64_t budget = row_pass_l2_budget();
  return budget > 0 && column_pass_footprint(kNarrowColumnPass.group, k, entry_bytes) <= budget;
}

// The configuration for `rows` columns of k entries: the widest group of kWideColumnPasses whose
// groups number at least three quarters of the multiprocessors and whose columns fit the L2 budget
// at one block per multiprocessor, else kNarrowColumnPass. Where not even kNarrowColumnPass keeps
// its columns in L2 (column_pass_keeps_columns), every sweep reads B from memory: the widest group
// with enough groups then, whole lines taking the fewest DRAM bursts.
inline ColumnPassConfig column_pass_config(int64_t rows, int64_t k, int64_t entry_bytes) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const bool kept = column_pass_keeps_columns(k, entry_bytes);
  for (const ColumnPassConfig& config : kWideColumnPasses) {
    const int64_t groups = (rows + config.group - 1) / config.group;
    if (4 * groups >= 3 * sms &&
        (!kept || column_pass_footprint(config.group, k, entry_bytes) <= row_pass_l2_budget())) {
      return config;
    }
  }
  return kNarrowColumnPass;
}

// The column pass's blocks, looping over the groups: per multiprocessor as many as the L2 budget
// keeps the columns of (at least one, at most as many as its 2048 thread slots allow: one for
// blocks of 1024 threads).
inline int64_t column_pass_blocks(const ColumnPassConfig& config, int64_t rows, int64_t k,
                                  int64_t entry_bytes) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t resident =
      row_pass_l2_budget() / column_pass_footprint(config.group, k, entry_bytes);
  const int64_t per_sm = std::clamp<int64_t>(resident, 1, 2048 / config.threads);
  const int64_t groups = (rows + config.group - 1) / config.group;
  return std::max<int64_t>(1, std::min(groups, sms * per_sm));
}

// Totals of one value per thread over the Threads / Group threads of each column (threads c,
// c + Group, ...: the lanes of every warp equal to c modulo Group), handed to threads c < Group
// (the others get a partial). Combine(x, y) is exact and order-free, so the order does not
// matter: each warp folds its lanes, then warp 0's lanes fold the warps' parts.
template <int Group, int Threads, typename V, typename Combine>
__device__ __forceinline__ V column_total(V value, V (*warp_parts)[Group], Combine combine) {
  const auto fold_lanes = [&](V x) {
#pragma unroll
    for (int offset = Group; offset < 32; offset *= 2) {
      x = combine(x, __shfl_xor_sync(0xffffffffu, x, offset));
    }
    return x;
  };
  value = fold_lanes(value);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane < Group) warp_parts[warp][lane] = value;
  __syncthreads();
  if (warp == 0) {
    // lane folds the parts of warps lane / Group, + 32 / Group, ... of column lane % Group
    constexpr int kWarps = Threads / 32, kLanesPerColumn = 32 / Group;
    const int c = lane % Group;
    int w = lane / Group;  // below kWarps (the kernel's static_assert)
    V part = warp_parts[w][c];
    for (w += kLanesPerColumn; w < kWarps; w += kLanesPerColumn) {
      part = combine(part, warp_parts[w][c]);
    }
    value = fold_lanes(part);
  }
  return value;
}

// Blocks of Threads, a group of Group columns at a time (groups blockIdx.x, + gridDim.x, ...):
// each column's RowStats, then its norm sum with tau known, then, where digits is not nullptr,
// its magnitude digits into row g of digits (k_stride bytes, zeros past k). Column g < rows of
// the flattened bt gets tau, bit_span, nonfinite, norm_scale and usable at [g]; the block of group
// 0 sets *smallest to INT_MAX for the minimum epilogue (nullptr: not).
template <typename T, int Group, int Threads>
__global__ void __launch_bounds__(Threads)
    column_plan_kernel(const T* b, int64_t k, BtLayout layout, int64_t rows, int64_t k_stride,
                       int gain, int* tau, int* bit_span, bool* nonfinite, int* norm_scale,
                       bool* usable, int8_t* digits, int32_t* smallest) {
  static_assert(32 % Group == 0 && Threads % 32 == 0 && Threads / 32 >= 32 / Group);
  constexpr int kColumnPhases = Threads / Group;
  constexpr int kDigitChunk = kDigitsPerThread * kColumnPhases;
  // Digit rows padded so that the 8-byte stores of a half warp (Group columns, 16 / Group phases)
  // meet in as few banks as 16-byte aligned rows allow (none for 4 and 8 columns, two for 16).
  constexpr int kDigitRowBytes = kDigitChunk + (128 / Group > 16 ? 128 / Group : 16);
  __shared__ int max_parts[Threads / 32][Group];
  __shared__ int low_parts[Threads / 32][Group];
  __shared__ int flag_parts[Threads / 32][Group];
  __shared__ unsigned long long sum_parts[Threads / 32][Group];
  __shared__ int column_tau[Group], column_norm[Group];
  __shared__ __align__(16) uint8_t chunk[Group * kDigitRowBytes];
  const int c = threadIdx.x % Group, phase = threadIdx.x / Group;
  const int64_t step = layout.step();
  const int64_t groups = (rows + Group - 1) / Group;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const int64_t g = group * Group + c;
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
    const int high = column_total<Group, Threads>(stats.max_exponent, max_parts,
                                                  [](int x, int y) { return x > y ? x : y; });
    const int low = column_total<Group, Threads>(stats.lowest_bit, low_parts,
                                                 [](int x, int y) { return x < y ? x : y; });
    const int flag = column_total<Group, Threads>(static_cast<int>(stats.nonfinite), flag_parts,
                                                  [](int x, int y) { return x | y; });
    if (threadIdx.x < Group) {
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
    sum = column_total<Group, Threads>(
        sum, sum_parts, [](unsigned long long x, unsigned long long y) { return x + y; });
    if (threadIdx.x < Group) {
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
        // Threads t below Group * kDigitChunk / 16: 16 bytes of column t / (kDigitChunk / 16) at
        // 16 (t % (kDigitChunk / 16)).
        constexpr int kPiecesPerColumn = kDigitChunk / 16;
        const int column_in_group = threadIdx.x / kPiecesPerColumn;
        const int at = 16 * (threadIdx.x % kPiecesPerColumn);
        const int64_t row = group * Group + column_in_group;
        if (column_in_group < Group && row < rows && l0 + at < k_stride) {
          *reinterpret_cast<uint4*>(digits + row * k_stride + l0 + at) =
              *reinterpret_cast<const uint4*>(chunk + column_in_group * kDigitRowBytes + at);
        }
        __syncthreads();
      }
    }
    __syncthreads();  // the next group rewrites the shared values
  }
}

// column_plan_kernel over the rows (= batch * n columns of B) of bt on `stream`, in the
// configuration column_pass_config picks.
template <typename T>
void launch_column_plan(const T* b, int64_t k, const BtLayout& layout, int64_t rows,
                        int64_t k_stride, int gain, int* tau, int* bit_span, bool* nonfinite,
                        int* norm_scale, bool* usable, int8_t* digits, int32_t* smallest,
                        cudaStream_t stream) {
  const ColumnPassConfig config = column_pass_config(rows, k, sizeof(T));
  const auto blocks = static_cast<unsigned>(column_pass_blocks(config, rows, k, sizeof(T)));
  const auto launch = [&](auto kernel) {
    kernel<<<blocks, config.threads, 0, stream>>>(b, k, layout, rows, k_stride, gain, tau,
                                                  bit_span, nonfinite, norm_scale, usable, digits,
                                                  smallest);
  };
  constexpr ColumnPassConfig kWidest = kWideColumnPasses[0], kWide = kWideColumnPasses[1];
  static_assert(std::size(kWideColumnPasses) == 2);
  if (config.group == kWidest.group) {
    launch(column_plan_kernel<T, kWidest.group, kWidest.threads>);
  } else if (config.group == kWide.group) {
    launch(column_plan_kernel<T, kWide.group, kWide.threads>);
  } else {
    launch(column_plan_kernel<T, kNarrowColumnPass.group, kNarrowColumnPass.threads>);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace ozaki::cuda
