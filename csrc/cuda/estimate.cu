// CUDA kernels of ozaki::magnitude_product: an exact lower bound of
// (|A||B|)_ij 2^-(tau_a_i + tau_b_j) in float64, from which the automatic slice count is planned
// (docs/accuracy.md). Magnitudes are floored onto a grid that keeps the FP16 GEMMs exact, so the
// result is bit-identical to the CPU kernel's. And of ozaki::sampled_magnitudes, the fixed-count
// check's sample (bt's rows or B's columns in place), and ozaki::crt_entry_bound_sum, exact scheme
// II's entry bound, both summed in the CPU kernel's order.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "../checks.h"
#include "../workspace.h"
#include "batch.cuh"
#include "bt_layout.cuh"
#include "half_gemm.cuh"
#include "launch.cuh"
#include "ops.h"
#include "plan_rows.cuh"

namespace ozaki::cuda {
namespace {

// The two magnitude digits of every entry (csrc/scheme.h, magnitude_digits) as FP16, rows padded
// to k_stride with zeros.
template <typename T>
__global__ void magnitude_digits_kernel(const T* a, int64_t rows, int64_t k, int64_t k_stride,
                                        const int* tau, int grid_bits, __half* high, __half* low) {
  const int64_t total = rows * k_stride;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / k_stride, l = e - r * k_stride;
    double h = 0.0, w = 0.0;
    if (l < k) magnitude_digits(static_cast<double>(a[r * k + l]), tau[r], grid_bits, &h, &w);
    high[e] = __double2half(h);
    low[e] = __double2half(w);
  }
}

// Digits of every row of the flattened a (rows of all elements of a batch), tau indexed alike.
template <typename T>
std::pair<at::Tensor, at::Tensor> magnitude_digit_rows(const at::Tensor& a, const at::Tensor& tau,
                                                      int grid_bits) {
  const int64_t k = a.size(-1), rows = a.numel() / k, k_stride = padded_inner(k);
  at::Tensor high = at::empty({rows, k_stride}, a.options().dtype(at::kHalf));
  at::Tensor low = at::empty({rows, k_stride}, a.options().dtype(at::kHalf));
  const int64_t total = rows * k_stride;
  constexpr int threads = 256;
  magnitude_digits_kernel<T><<<grid_for(total, threads), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      a.const_data_ptr<T>(), rows, k, k_stride, tau.const_data_ptr<int>(), grid_bits,
      reinterpret_cast<__half*>(high.mutable_data_ptr<at::Half>()),
      reinterpret_cast<__half*>(low.mutable_data_ptr<at::Half>()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {high, low};
}

// Exact FP32 x_e (m, k_stride) * y_e (n, k_stride)^T of FP16 digit rows for every element e: one
// strided batched GEMM over the elements (pairs of rows of the same element only).
at::Tensor digit_product(const at::Tensor& x, const at::Tensor& y, const ProductShape& shape) {
  const int64_t m = shape.m, n = shape.n, k_stride = x.size(1);
  at::Tensor out = at::empty(shape.out_sizes(), x.options().dtype(at::kFloat));
  exact_half_gemm_batched(at::cuda::getCurrentCUDABlasHandle(),
                          reinterpret_cast<const __half*>(y.const_data_ptr<at::Half>()),
                          reinterpret_cast<const __half*>(x.const_data_ptr<at::Half>()), n, m,
                          k_stride, out.mutable_data_ptr<float>(), n,
                          GemmBatch{shape.batch, n * k_stride, m * k_stride, m * n});
  return out;
}

}  // namespace

at::Tensor magnitude_product(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                             const at::Tensor& tau_b, int64_t total_k) {
  constexpr const char* op = "ozaki::magnitude_product";
  const ProductShape shape = check_magnitude_arguments(a, bt, tau_a, tau_b, op);
  check_same_device(a, {&bt, &tau_a, &tau_b}, op);
  const int64_t m = shape.m, k = shape.k, n = shape.n;
  const c10::cuda::CUDAGuard guard(a.device());
  const int grid_bits = magnitude_grid_bits_checked(k, total_k, op);  // as the CPU's, empty or not
  if (shape.batch == 0 || m == 0 || n == 0 || k == 0) {
    return at::zeros(shape.out_sizes(), a.options().dtype(at::kDouble));
  }
  TORCH_CHECK(m < (int64_t(1) << 31) && n < (int64_t(1) << 31), op, ": m and n must be below 2^31");
  std::pair<at::Tensor, at::Tensor> da, db;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    da = magnitude_digit_rows<scalar_t>(a, tau_a, grid_bits);
    db = magnitude_digit_rows<scalar_t>(bt, tau_b, grid_bits);
  });
  // Three exact GEMMs, combined exactly in float64 in the CPU kernel's order.
  const at::Tensor high_high = digit_product(da.first, db.first, shape).to(at::kDouble);
  const at::Tensor cross = digit_product(da.first, db.second, shape).to(at::kDouble)
                               .add_(digit_product(da.second, db.first, shape).to(at::kDouble));
  return high_high.add_(cross.mul_(pow2(-grid_bits)));
}

namespace {

// One block of kSampleLanes threads per entry (r, c) of ozaki::sampled_magnitudes: thread t sums
// lane t, then the lanes are added pairwise in csrc/scheme.h's order (the CPU kernel's) and the
// sum goes through sampled_entry. An index outside its operand gives NaN. bt_gathered: bt's row
// rows_b[c] is row c of bt (gather_sampled_columns), else row rows_b[c].
template <typename T>
__global__ void sampled_magnitudes_kernel(const T* a, int64_t rows_a_total, const T* bt,
                                          bool bt_gathered, int64_t rows_b_total, int64_t k,
                                          SampledRows rows, const int64_t* rows_a,
                                          const int64_t* rows_b, int64_t count_b, double* out) {
  __shared__ double lanes[kSampleLanes];
  const int64_t pair = blockIdx.x;
  const int64_t i = rows_a[pair / count_b], j = rows_b[pair % count_b];
  if (i < 0 || i >= rows_a_total || j < 0 || j >= rows_b_total) {
    if (threadIdx.x == 0) out[pair] = quiet_nan();
    return;
  }
  const int t = threadIdx.x;
  const T* b_row = bt + (bt_gathered ? pair % count_b : j) * k;
  lanes[t] = sampled_lane_sum(a + i * k, rows.tau_a[i], b_row, rows.tau_b[j], k, t);
  const double total = lanes_added_pairwise(lanes);
  if (t == 0) out[pair] = sampled_entry(total, i, j, rows);
}

constexpr int kGatherThreads = 256;
constexpr int kMostGatherBlocksY = 65535;

// Row c of out (count_b, k) = row rows_b[c] of bt, B's columns in place (layout): each sampled
// column read once from B, for sampled_magnitudes_kernel's contiguous reads, instead of at B's
// stride by every lane of every pair. Rows outside bt are left unwritten (their pairs give NaN).
template <typename T>
__global__ void gather_sampled_columns_kernel(const T* b, BtLayout layout, int64_t rows_total,
                                              int64_t k, const int64_t* rows_b, int64_t count_b,
                                              T* out) {
  for (int64_t c = blockIdx.y; c < count_b; c += gridDim.y) {
    const int64_t j = rows_b[c];
    if (j < 0 || j >= rows_total) continue;
    const T* column = b + layout.start(j, k);
    for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < k;
         l += int64_t(gridDim.x) * blockDim.x) {
      out[c * k + l] = column[l * layout.step()];
    }
  }
}

// One block of kSampleLanes threads: crt_entry_bound_sum of each element's exponents in turn, the
// largest written to *out.
template <typename E>
__global__ void entry_bound_sum_kernel(const E* u, const E* v, int64_t elements, int64_t k,
                                       double* out) {
  double largest = 0.0;
  for (int64_t e = 0; e < elements; ++e) {
    const double sum = block_entry_bound_sum(
        [&](int64_t l) {
          return static_cast<double>(u[e * k + l]) + static_cast<double>(v[e * k + l]);
        },
        k);
    largest = e == 0 ? sum : fmax(largest, sum);
  }
  if (threadIdx.x == 0) *out = largest;
}

}  // namespace

at::Tensor sampled_magnitudes(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                              const at::Tensor& tau_b, const at::Tensor& usable_a,
                              const at::Tensor& usable_b, const at::Tensor& rows_a,
                              const at::Tensor& rows_b, int64_t m, int64_t n,
                              const std::optional<at::Tensor>& norm_a,
                              const std::optional<at::Tensor>& norm_b) {
  constexpr const char* op = "ozaki::sampled_magnitudes";
  const int64_t rows_bt = check_sampled_magnitudes_arguments(
      a, bt, tau_a, tau_b, usable_a, usable_b, rows_a, rows_b, m, n, norm_a, norm_b, op,
      /*bt_columns=*/true);
  check_same_device(a, {&bt, &tau_a, &tau_b, &usable_a, &usable_b, &rows_a, &rows_b}, op);
  if (norm_a.has_value()) check_same_device(a, {&*norm_a, &*norm_b}, op);
  const c10::cuda::CUDAGuard guard(a.device());
  const int64_t count_a = rows_a.size(0), count_b = rows_b.size(0);
  at::Tensor out = at::empty({count_a, count_b}, a.options().dtype(at::kDouble));
  if (count_a == 0 || count_b == 0) return out;
  TORCH_CHECK(count_a * count_b < (int64_t(1) << 31), op, ": at most 2^31 - 1 entries, got ",
              count_a, " x ", count_b);
  const SampledRows rows = sampled_rows(tau_a, tau_b, usable_a, usable_b, m, n, norm_a, norm_b);
  const int64_t k = a.size(1);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // B's columns in place: the sampled ones gathered into rows first
  const bool gathered = is_column_view(bt);
  const at::Tensor bt_rows = gathered ? at::empty({count_b, k}, bt.options()) : bt;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    if (gathered && k > 0) {
      const dim3 grid(static_cast<unsigned>(std::min<int64_t>(ceil_div(k, kGatherThreads), 64)),
                      static_cast<unsigned>(std::min<int64_t>(count_b, kMostGatherBlocksY)));
      gather_sampled_columns_kernel<scalar_t><<<grid, kGatherThreads, 0, stream>>>(
          bt.const_data_ptr<scalar_t>(), bt_layout_of(bt), rows_bt, k,
          rows_b.const_data_ptr<int64_t>(), count_b, bt_rows.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    sampled_magnitudes_kernel<scalar_t>
        <<<static_cast<unsigned>(count_a * count_b), kSampleLanes, 0, stream>>>(
            a.const_data_ptr<scalar_t>(), a.size(0), bt_rows.const_data_ptr<scalar_t>(), gathered,
            rows_bt, k, rows, rows_a.const_data_ptr<int64_t>(), rows_b.const_data_ptr<int64_t>(),
            count_b, out.mutable_data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

at::Tensor crt_entry_bound_sum(const at::Tensor& exponents_a, const at::Tensor& exponents_b) {
  constexpr const char* op = "ozaki::crt_entry_bound_sum";
  const auto [elements, k] = check_entry_bound_sum_arguments(exponents_a, exponents_b, op);
  check_same_device(exponents_a, {&exponents_b}, op);
  const c10::cuda::CUDAGuard guard(exponents_a.device());
  at::Tensor out = at::empty({}, exponents_a.options().dtype(at::kDouble));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (exponents_a.scalar_type() == at::kLong) {
    entry_bound_sum_kernel<int64_t><<<1, kSampleLanes, 0, stream>>>(
        exponents_a.const_data_ptr<int64_t>(), exponents_b.const_data_ptr<int64_t>(), elements, k,
        out.mutable_data_ptr<double>());
  } else {
    entry_bound_sum_kernel<double><<<1, kSampleLanes, 0, stream>>>(
        exponents_a.const_data_ptr<double>(), exponents_b.const_data_ptr<double>(), elements, k,
        out.mutable_data_ptr<double>());
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace ozaki::cuda
