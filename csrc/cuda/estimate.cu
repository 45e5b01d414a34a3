// CUDA kernel of ozaki::magnitude_product: an exact lower bound of
// (|A||B|)_ij 2^-(tau_a_i + tau_b_j), planned from by the automatic slice count
// (docs/accuracy.md). Magnitudes are floored onto a grid that keeps one FP16 GEMM exact, so the
// result is bit-identical to the CPU kernel's.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../checks.h"
#include "../workspace.h"
#include "half_gemm.cuh"

namespace ozaki::cuda {
namespace {

// out[r * k_stride + l] = magnitude_floor(a[r][l]); the padding columns hold zeros.
template <typename T>
__global__ void magnitude_floor_kernel(const T* a, int64_t rows, int64_t k, int64_t k_stride,
                                       const int* tau, int shift, int grid_bits, __half* out) {
  const int64_t total = rows * k_stride;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / k_stride, l = e - r * k_stride;
    const double value = l < k ? magnitude_floor(static_cast<double>(a[r * k + l]), tau[r], shift, grid_bits)
                               : 0.0;
    out[e] = __double2half(value);
  }
}

template <typename T>
at::Tensor magnitude_floors(const at::Tensor& a, const at::Tensor& tau, int shift, int grid_bits) {
  const int64_t rows = a.size(0), k = a.size(1), k_stride = padded_inner(k);
  at::Tensor out = at::empty({rows, k_stride}, a.options().dtype(at::kHalf));
  const int64_t total = rows * k_stride;
  if (total == 0) return out;
  constexpr int threads = 256;
  const int64_t cap = int64_t(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 32;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min(ceil_div(total, threads), cap)));
  magnitude_floor_kernel<T><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      a.const_data_ptr<T>(), rows, k, k_stride, tau.const_data_ptr<int>(), shift, grid_bits,
      reinterpret_cast<__half*>(out.mutable_data_ptr<at::Half>()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor magnitude_product(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                             const at::Tensor& tau_b) {
  constexpr const char* op = "ozaki::magnitude_product";
  check_matrix(a, op, "a");
  check_matrix(bt, op, "bt");
  check_same_operands(a, bt, op);
  for (const at::Tensor* t : {&bt, &tau_a, &tau_b}) {
    TORCH_CHECK(t->device() == a.device(), op, ": every tensor must be on ", a.device(), ", got ",
                t->device());
  }
  const int64_t m = a.size(0), k = a.size(1), n = bt.size(0);
  check_row_vector(tau_a, m, at::kInt, op, "tau_a");
  check_row_vector(tau_b, n, at::kInt, op, "tau_b");
  const c10::cuda::CUDAGuard guard(a.device());
  digit_bits_checked(k, op);
  if (m == 0 || n == 0 || k == 0) return at::zeros({m, n}, a.options().dtype(at::kFloat));
  TORCH_CHECK(m < (int64_t(1) << 31) && n < (int64_t(1) << 31), op, ": m and n must be below 2^31");
  const int grid_bits = magnitude_grid_bits(k);
  at::Tensor bound;
  for (int pass = 0; pass < kMagnitudePasses; ++pass) {
    const int shift = pass * grid_bits;
    at::Tensor qa, qb;
    AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
      qa = magnitude_floors<scalar_t>(a, tau_a, shift, grid_bits);
      qb = magnitude_floors<scalar_t>(bt, tau_b, shift, grid_bits);
    });
    at::Tensor pass_bound = at::empty({m, n}, a.options().dtype(at::kFloat));
    exact_half_gemm(at::cuda::getCurrentCUDABlasHandle(),
                    reinterpret_cast<const __half*>(qb.const_data_ptr<at::Half>()),
                    reinterpret_cast<const __half*>(qa.const_data_ptr<at::Half>()), n, m, qa.size(1),
                    pass_bound.mutable_data_ptr<float>(), n);
    // Exact power-of-two scaling back to units of 2^(tau_a + tau_b), as on the CPU.
    pass_bound.mul_(pow2(-2 * shift));
    bound = pass == 0 ? pass_bound : at::maximum(bound, pass_bound);
  }
  return bound;
}

}  // namespace

TORCH_LIBRARY_IMPL(ozaki, CUDA, m) { m.impl("magnitude_product", &magnitude_product); }

}  // namespace ozaki::cuda
