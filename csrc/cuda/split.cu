// CUDA kernels of the split (docs/algorithm.md, "Split") and the ozaki::row_stats and
// ozaki::split_rows operators. The per-entry arithmetic is csrc/scheme.h, shared with the CPU.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <type_traits>

#include "../checks.h"
#include "../row_stats_output.h"
#include "launch.cuh"
#include "ops.h"
#include "split.cuh"

namespace ozaki::cuda {
namespace {

constexpr int kStatsThreads = 256;

// A block per row (rows past the grid's blocks taken grid-stride): each thread folds a strided
// part of the row, then the block merges them.
template <typename T>
__global__ void row_stats_kernel(const T* a, int64_t rows, int64_t k, int* tau, int* bit_span,
                                 bool* nonfinite) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    RowStats stats;
    // max/min: order-free
    for_row_entries(a + row * k, k, [&](T x) { stats.add(static_cast<double>(x)); });
    const RowStats total = block_row_stats<kStatsThreads>(stats);
    if (threadIdx.x == 0) {
      tau[row] = total.tau();
      bit_span[row] = total.bit_span();
      nonfinite[row] = total.nonfinite;
    }
    __syncthreads();  // thread 0 has read the block's partials before the next row's replace them
  }
}

// A digit as stored: FP16 slices hold d * 2^-beta, INT8 slices the integer d (|d| <= 64).
__device__ __forceinline__ void store_digit(double scaled_digit, int, __half* out) {
  *out = __double2half(scaled_digit);
}
__device__ __forceinline__ void store_digit(double scaled_digit, int beta, int8_t* out) {
  *out = static_cast<int8_t>(scaled_digit * pow2(beta));
}

// Each thread splits 4 consecutive entries and writes each of their slices with one store.
template <typename T, typename Digit>
__global__ void split_rows_kernel(const T* a, int64_t k, RowBlocks blocks, int64_t k_stride,
                                  const int* tau, int slices, int beta, Digit* out) {
  using Group = std::conditional_t<sizeof(Digit) == 2, uint2, uint32_t>;
  const int64_t groups_per_row = k_stride / 4;
  const int64_t groups = blocks.total() * groups_per_row;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t block_row = g / groups_per_row;
    const int64_t l0 = (g - block_row * groups_per_row) * 4;
    const int64_t e = element_of(block_row, blocks.count, blocks.elements);
    const int64_t r = block_row - e * blocks.count;
    const int64_t row = blocks.row(e, r);
    const int row_tau = tau[row];
    const T* entries = a + row * k;
    double remainder[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t l = l0 + c;
      remainder[c] = scaled_entry(l < k ? static_cast<double>(entries[l]) : 0.0, row_tau);
    }
    Digit* element_out = out + e * slices * blocks.count * k_stride;
    for (int p = 0; p < slices; ++p) {
      __align__(8) Digit digits[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) store_digit(next_slice(&remainder[c], p, beta), beta, &digits[c]);
      *reinterpret_cast<Group*>(element_out + (p * blocks.count + r) * k_stride + l0) =
          *reinterpret_cast<const Group*>(digits);
    }
  }
}

}  // namespace

template <typename T>
void launch_row_stats(const T* a, int64_t rows, int64_t k, int* tau, int* bit_span, bool* nonfinite,
                      cudaStream_t stream) {
  if (rows == 0) return;
  row_stats_kernel<T><<<row_blocks(rows), kStatsThreads, 0, stream>>>(a, rows, k, tau, bit_span,
                                                                       nonfinite);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, typename Digit>
void launch_split_rows(const T* a, int64_t k, const RowBlocks& blocks, int64_t k_stride,
                       const int* tau, int slices, int beta, Digit* out, cudaStream_t stream) {
  TORCH_INTERNAL_ASSERT(k_stride % 4 == 0 && k_stride >= k);
  if (blocks.total() == 0 || k_stride == 0) return;
  constexpr int threads = 256;
  split_rows_kernel<T, Digit><<<grid_for(blocks.total() * (k_stride / 4), threads), threads, 0,
                                stream>>>(a, k, blocks, k_stride, tau, slices, beta, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template void launch_row_stats<float>(const float*, int64_t, int64_t, int*, int*, bool*, cudaStream_t);
template void launch_row_stats<double>(const double*, int64_t, int64_t, int*, int*, bool*, cudaStream_t);
template void launch_split_rows<float, __half>(const float*, int64_t, const RowBlocks&, int64_t,
                                               const int*, int, int, __half*, cudaStream_t);
template void launch_split_rows<double, __half>(const double*, int64_t, const RowBlocks&, int64_t,
                                                const int*, int, int, __half*, cudaStream_t);
template void launch_split_rows<float, int8_t>(const float*, int64_t, const RowBlocks&, int64_t,
                                               const int*, int, int, int8_t*, cudaStream_t);
template void launch_split_rows<double, int8_t>(const double*, int64_t, const RowBlocks&, int64_t,
                                                const int*, int, int, int8_t*, cudaStream_t);

std::tuple<at::Tensor, at::Tensor, at::Tensor> row_stats(const at::Tensor& a) {
  check_matrix(a, "ozaki::row_stats", "a");
  const c10::cuda::CUDAGuard guard(a.device());
  const int64_t rows = a.size(0), k = a.size(1);
  const RowStatsOutput out(rows, a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "ozaki::row_stats", [&] {
    launch_row_stats(a.const_data_ptr<scalar_t>(), rows, k, out.tau_data, out.bit_span_data,
                     out.nonfinite_data, at::cuda::getCurrentCUDAStream());
  });
  return {out.tau, out.bit_span, out.nonfinite};
}

at::Tensor split_rows(const at::Tensor& a, const at::Tensor& tau, int64_t slices) {
  check_matrix(a, "ozaki::split_rows", "a");
  check_slices(slices, "ozaki::split_rows");
  const c10::cuda::CUDAGuard guard(a.device());
  const int64_t rows = a.size(0), k = a.size(1);
  check_row_vector(tau, rows, at::kInt, "ozaki::split_rows", "tau");
  TORCH_CHECK(tau.device() == a.device(), "ozaki::split_rows: tau must be on ", a.device());
  const int beta = digit_bits_checked(k, "ozaki::split_rows");
  const int64_t k_stride = padded_inner(k);
  auto padded = at::empty({slices, rows, k_stride}, a.options().dtype(at::kHalf));
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "ozaki::split_rows", [&] {
    launch_split_rows(a.const_data_ptr<scalar_t>(), k, RowBlocks{0, rows, 1, rows}, k_stride,
                      tau.const_data_ptr<int>(), static_cast<int>(slices), beta,
                      reinterpret_cast<__half*>(padded.mutable_data_ptr<at::Half>()),
                      at::cuda::getCurrentCUDAStream());
  });
  return padded.narrow(2, 0, k).contiguous();
}

}  // namespace ozaki::cuda
