// CUDA kernel of ozaki::round_levels: gemm_slices' result from the summed level sums of a
// k-sharded product (csrc/levels.h), one entry per thread; the same code as the CPU kernel, so the
// same bits.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <tuple>
#include <utility>

#include "../checks.h"
#include "../levels.h"
#include "launch.cuh"
#include "ops.h"

namespace ozaki::cuda {
namespace {

// Entry e = i * n + j of C: level l at levels[l * m * n + e]; consecutive threads read consecutive
// entries of each level.
template <typename T>
__global__ void round_levels_kernel(const double* levels, int64_t m, int64_t n, const int* tau_a,
                                    const int* tau_b, const int* span_a, const int* span_b,
                                    LevelRounding how, T* out, bool* undecided) {
  const int64_t entries = m * n;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < entries;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / n, j = e - i * n;
    bool entry_undecided;
    const double value = round_entry_levels<T>(levels + e, entries, tau_a[i], tau_b[j], span_a[i],
                                               span_b[j], how, &entry_undecided);
    out[e] = static_cast<T>(value);
    undecided[e] = entry_undecided;
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> round_levels(const at::Tensor& levels, const at::Tensor& tau_a,
                                                const at::Tensor& tau_b, const at::Tensor& span_a,
                                                const at::Tensor& span_b, int64_t slices, bool fast,
                                                bool int8, int64_t total_k, bool nearest,
                                                at::ScalarType dtype) {
  constexpr const char* op = "ozaki::round_levels";
  const std::pair<int64_t, int64_t> size = check_round_levels_arguments(
      levels, tau_a, tau_b, span_a, span_b, slices, fast, total_k, dtype, op);
  check_same_device(levels, {&tau_a, &tau_b, &span_a, &span_b}, op);
  const int64_t m = size.first, n = size.second;
  const c10::cuda::CUDAGuard guard(levels.device());
  at::Tensor out = at::empty({m, n}, levels.options().dtype(dtype));
  at::Tensor undecided = at::empty({m, n}, levels.options().dtype(at::kBool));
  if (m == 0 || n == 0) return {out, undecided};
  const LevelRounding how{PairLayout{static_cast<int>(slices), fast, 0, 0},
                          total_k_digit_bits_checked(total_k, int8, op), total_k, nearest};
  // Fewer threads per block than elementwise kernels: the nearest path holds long integers.
  constexpr int threads = 128;
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    round_levels_kernel<scalar_t><<<grid_for(m * n, threads), threads, 0,
                                    at::cuda::getCurrentCUDAStream()>>>(
        levels.const_data_ptr<double>(), m, n, tau_a.const_data_ptr<int>(),
        tau_b.const_data_ptr<int>(), span_a.const_data_ptr<int>(), span_b.const_data_ptr<int>(),
        how, out.mutable_data_ptr<scalar_t>(), undecided.mutable_data_ptr<bool>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {out, undecided};
}

}  // namespace ozaki::cuda
