// CPU kernel of ozaki::magnitude_product: an exact lower bound of (|A||B|)_ij 2^-(tau_a_i + tau_b_j),
// from which the automatic slice count is planned (docs/accuracy.md, "Automatic slice count").
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../checks.h"

namespace ozaki::cpu {
namespace {

// min(|entry| 2^(shift - tau), 1) of every row, floored onto the estimate's grid (float64 holds
// them exactly).
template <typename T>
at::Tensor magnitude_floors(const at::Tensor& a, const int* tau, int shift, int grid_bits) {
  const int64_t rows = a.size(0), k = a.size(1);
  at::Tensor out = at::empty({rows, k}, a.options().dtype(at::kDouble));
  const T* in = a.const_data_ptr<T>();
  double* data = out.mutable_data_ptr<double>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t l = 0; l < k; ++l) {
        data[r * k + l] = magnitude_floor(static_cast<double>(in[r * k + l]), tau[r], shift, grid_bits);
      }
    }
  });
  return out;
}

at::Tensor magnitude_product(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                             const at::Tensor& tau_b) {
  constexpr const char* op = "ozaki::magnitude_product";
  check_matrix(a, op, "a");
  check_matrix(bt, op, "bt");
  check_same_operands(a, bt, op);
  const int64_t m = a.size(0), k = a.size(1), n = bt.size(0);
  check_row_vector(tau_a, m, at::kInt, op, "tau_a");
  check_row_vector(tau_b, n, at::kInt, op, "tau_b");
  digit_bits_checked(k, op);
  const int grid_bits = magnitude_grid_bits(k);
  at::Tensor bound;
  for (int pass = 0; pass < kMagnitudePasses; ++pass) {
    const int shift = pass * grid_bits;
    at::Tensor qa, qb;
    AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
      qa = magnitude_floors<scalar_t>(a, tau_a.const_data_ptr<int>(), shift, grid_bits);
      qb = magnitude_floors<scalar_t>(bt, tau_b.const_data_ptr<int>(), shift, grid_bits);
    });
    // Every partial sum is an integer below 2^24 units of 2^(-2 grid_bits): exact in any order,
    // and so is the power-of-two scaling back (the result stays far above float32's minimum).
    at::Tensor pass_bound = at::mm(qa, qb.t()).to(at::kFloat).mul_(pow2(-2 * shift));
    bound = pass == 0 ? pass_bound : at::maximum(bound, pass_bound);
  }
  return bound;
}

}  // namespace

TORCH_LIBRARY_IMPL(ozaki, CPU, m) { m.impl("magnitude_product", &magnitude_product); }

}  // namespace ozaki::cpu
