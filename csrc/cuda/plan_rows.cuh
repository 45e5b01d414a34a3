// The per-row passes scheme II's plan reads, shared by ozaki::row_stats_with_norm_scales,
// ozaki::crt_row_bounds and ozaki::crt_magnitude (crt.cu) and by ozaki::crt_plan_reads and
// ozaki::crt_kept_plan_reads (plan_reads.cu), which add the estimate's magnitude digits to the first
// where rows are short; and the fixed-order lane sums of ozaki::sampled_magnitudes and
// ozaki::crt_entry_bound_sum (estimate.cu), which the kept reads share.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "../crt.h"
#include "launch.cuh"

namespace ozaki::cuda {

constexpr int kNormThreads = 256;

// row_stats_norm_kernel's After that does nothing: no third step.
struct NothingAfter {
  static constexpr bool kRuns = false;
  template <typename T>
  __device__ void operator()(int64_t, const T*, int64_t, int, int, bool) const {}
};

// Threads per block where row_stats_norm_kernel holds few rows at a time (row_pass_launch).
constexpr int kLongRowThreads = 1024;
// The L2 that the rows of row_stats_norm_kernel's resident blocks may fill where it sweeps each
// row three times, so that the later sweeps read L2 rather than memory (OZAKI_ROW_PASS_L2_MB
// overrides it, in MiB; 0: no limit, a block per row).
constexpr int64_t kRowPassL2Bytes = int64_t(64) << 20;

// kRowPassL2Bytes, or OZAKI_ROW_PASS_L2_MB's value (read once; an integer from 0 to 2^20).
inline int64_t row_pass_l2_budget() {
  static const int64_t budget = [] {
    const char* given = std::getenv("OZAKI_ROW_PASS_L2_MB");
    if (given == nullptr || *given == '\0') return kRowPassL2Bytes;
    char* end = nullptr;
    const long long mib = std::strtoll(given, &end, 10);
    TORCH_CHECK(*end == '\0' && mib >= 0 && mib <= (1 << 20),
                "OZAKI_ROW_PASS_L2_MB must be an integer from 0 to 1048576 (MiB), got '", given,
                "'");
    return int64_t(mib) << 20;
  }();
  return budget;
}

// row_stats_norm_kernel's grid and block for `rows` rows of row_bytes each: a block of
// kNormThreads per row where rows need not stay in L2 (keep_rows false: two sweeps, which read
// long rows twice from memory faster than fewer blocks read them once) or where the rows of all
// the blocks a GPU keeps resident (2048 / kNormThreads per multiprocessor) fit in the L2 budget.
// Else blocks of kLongRowThreads, one or two per multiprocessor (as many as the budget holds rows
// of, at least one), each looping over rows: as many loads in flight, a quarter of the rows
// resident.
struct RowPassLaunch {
  int64_t blocks;
  int threads;
};
inline RowPassLaunch row_pass_launch(int64_t rows, int64_t row_bytes, bool keep_rows) {
  const int64_t budget = row_pass_l2_budget();
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  if (!keep_rows || budget <= 0 || sms * (2048 / kNormThreads) * row_bytes <= budget) {
    return {row_blocks(rows), kNormThreads};
  }
  const int64_t per_sm =
      std::clamp<int64_t>(budget / (sms * row_bytes), 1, 2048 / kLongRowThreads);
  return {std::max<int64_t>(1, std::min(rows, sms * per_sm)), kLongRowThreads};
}

// Whether one row per multiprocessor fits row_pass_launch's L2 budget: then every sweep after
// row_stats_norm_kernel's first reads its row from L2.
inline bool row_pass_keeps_rows(int64_t row_bytes) {
  const int64_t budget = row_pass_l2_budget();
  return budget > 0 &&
         int64_t(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * row_bytes <= budget;
}

// Blocks of Threads, a row at a time each (rows blockIdx.x, + gridDim.x, ...; row_pass_launch
// sizes the grid): row_stats_kernel's fold, then, with tau known, row_norm_kernel's sum over the
// same row, which the first sweep has just brought into L2 when the rows of the resident blocks
// fit there: then one read of the operand from memory instead of two. Several blocks per
// multiprocessor overlap their sweeps (one block per row and multiprocessor would leave memory
// idle during the reductions). Both reductions are exact and order-free (max/min, integer sums).
// Where After::kRuns, every thread then calls after(row, entries, k, tau, norm_code, usable) with
// the row's values (usable: a nonzero span and no NaN/Inf).
template <typename T, typename After, int Threads>
__global__ void __launch_bounds__(Threads)
    row_stats_norm_kernel(const T* a, int64_t rows, int64_t k, int* tau, int* bit_span,
                          bool* nonfinite, int* norm_scale, After after) {
  __shared__ int row_tau, row_norm;
  __shared__ bool row_usable;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* entries = a + row * k;
    RowStats stats;
    for_row_entries(entries, k, [&](T x) { stats.add(static_cast<double>(x)); });
    const RowStats total = block_row_stats<Threads>(stats);
    if (threadIdx.x == 0) {
      tau[row] = total.tau();
      bit_span[row] = total.bit_span();
      nonfinite[row] = total.nonfinite;
      row_tau = total.tau();
      row_usable = usable_row(total.bit_span(), total.nonfinite);
    }
    __syncthreads();
    const int t = row_tau;
    unsigned long long sum = 0;
    for_row_entries(entries, k, [&](T x) { sum += norm_square_units(static_cast<double>(x), t); });
    const unsigned long long square_sum = block_sum<Threads>(sum);
    if (threadIdx.x == 0) {
      row_norm = norm_scale_code(square_sum, t);
      norm_scale[row] = row_norm;
    }
    if constexpr (After::kRuns) {
      __syncthreads();
      after(row, entries, k, t, row_norm, row_usable);
    }
    __syncthreads();  // the next row rewrites the shared values
  }
}

// row_stats_norm_kernel over the (rows, k) rows of a on `stream`, launched by row_pass_launch
// (keep_rows: After sweeps the rows a third time).
template <typename T, typename After = NothingAfter>
void launch_row_stats_norm(const T* a, int64_t rows, int64_t k, int* tau, int* bit_span,
                           bool* nonfinite, int* norm_scale, cudaStream_t stream,
                           After after = {}, bool keep_rows = false) {
  const RowPassLaunch launch = row_pass_launch(rows, k * int64_t(sizeof(T)), keep_rows);
  const auto blocks = static_cast<unsigned>(launch.blocks);
  if (launch.threads == kLongRowThreads) {
    row_stats_norm_kernel<T, After, kLongRowThreads><<<blocks, kLongRowThreads, 0, stream>>>(
        a, rows, k, tau, bit_span, nonfinite, norm_scale, after);
  } else {
    row_stats_norm_kernel<T, After, kNormThreads><<<blocks, kNormThreads, 0, stream>>>(
        a, rows, k, tau, bit_span, nonfinite, norm_scale, after);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

constexpr int kRowBoundsThreads = 1024;

// By one block of kRowBoundsThreads: the largest bit_span and integer_norm_bound (usable rows)
// over all rows, a max in any order (exact), written to out[0] and out[1]. A row's values are
// read without a branch, so that the loads of successive rows overlap.
__device__ __forceinline__ void block_row_bounds(const int* tau, const int* bit_span,
                                                 const bool* nonfinite, const int* norm,
                                                 int64_t rows, double* out) {
  __shared__ double spans[kRowBoundsThreads], bounds[kRowBoundsThreads];
  double span = 0.0, bound = 0.0;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    const int row_span = bit_span[i];
    const bool usable = usable_row(row_span, nonfinite[i]);
    const double row_bound = integer_norm_bound(tau[i], row_span, norm[i]);
    span = fmax(span, static_cast<double>(row_span));
    bound = usable ? fmax(bound, row_bound) : bound;
  }
  spans[threadIdx.x] = span;
  bounds[threadIdx.x] = bound;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      spans[threadIdx.x] = fmax(spans[threadIdx.x], spans[threadIdx.x + half]);
      bounds[threadIdx.x] = fmax(bounds[threadIdx.x], bounds[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[0] = spans[0];
    out[1] = bounds[0];
  }
}

// By every thread of a block of at least kSampleLanes threads, after threads t < kSampleLanes
// wrote lanes[t]: the lanes added pairwise in csrc/scheme.h's order (the CPU's), the total returned
// to every thread.
__device__ __forceinline__ double lanes_added_pairwise(double* lanes) {
  __syncthreads();
  for (int stride = kSampleLanes / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) lanes[threadIdx.x] = lanes[threadIdx.x] + lanes[threadIdx.x + stride];
    __syncthreads();
  }
  return lanes[0];
}

// By every thread of a block of at least kSampleLanes threads: exact scheme II's entry bound sum
// of the exponents exponent_of(l) = u_l + v_l, l < k, in csrc/crt.h's fixed order, returned to
// every thread.
template <typename ExponentOf>
__device__ __forceinline__ double block_entry_bound_sum(ExponentOf exponent_of, int64_t k) {
  __shared__ double lanes[kSampleLanes];
  __syncthreads();  // an earlier call's readers are done with lanes
  if (threadIdx.x < kSampleLanes) {
    lanes[threadIdx.x] = entry_bound_lane_sum(exponent_of, k, threadIdx.x, kSampleLanes);
  }
  return lanes_added_pairwise(lanes);
}

template <typename T>
__global__ void crt_magnitude_digits_kernel(const T* a, int64_t rows, int64_t k, int64_t k_stride,
                                            const int* tau, const int* norm, int gain,
                                            int8_t* out) {
  const int64_t total = rows * k_stride;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / k_stride, l = e - r * k_stride;
    out[e] = static_cast<int8_t>(
        l < k ? magnitude_digit(static_cast<double>(a[r * k + l]), tau[r], norm[r], gain) : 0);
  }
}

// The estimate's magnitude digits of every row of the flattened a (rows of all elements of a
// batch), int8 (rows, k_stride), zeros past k; tau and norm (the rows' norm scale codes) indexed
// alike; gain: crt_magnitude_gain.
template <typename T>
at::Tensor crt_magnitude_digit_rows(const at::Tensor& a, const at::Tensor& tau,
                                    const at::Tensor& norm, int gain, int64_t k_stride) {
  const int64_t k = a.size(-1), rows = a.numel() / k;
  at::Tensor digits = at::empty({rows, k_stride}, a.options().dtype(at::kChar));
  constexpr int threads = 256;
  crt_magnitude_digits_kernel<T><<<grid_for(rows * k_stride, threads), threads, 0,
                                   at::cuda::getCurrentCUDAStream()>>>(
      a.const_data_ptr<T>(), rows, k, k_stride, tau.const_data_ptr<int>(),
      norm.const_data_ptr<int>(), gain, digits.mutable_data_ptr<int8_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return digits;
}

}  // namespace ozaki::cuda
