// CPU kernel of ozaki::magnitude_product: an exact lower bound of (|A||B|)_ij 2^-(tau_a_i + tau_b_j),
// from which the automatic slice count is planned (docs/accuracy.md, "Automatic slice count").
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../checks.h"

namespace ozaki::cpu {
namespace {

// |entry| 2^-tau of every row, floored onto the estimate's grid (float64 holds them exactly).
template <typename T>
at::Tensor magnitude_floors(const at::Tensor& a, const int* tau, int grid_bits) {
  const int64_t rows = a.size(0), k = a.size(1);
  at::Tensor out = at::empty({rows, k}, a.options().dtype(at::kDouble));
  const T* in = a.const_data_ptr<T>();
  double* data = out.mutable_data_ptr<double>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t l = 0; l < k; ++l) {
        data[r * k + l] = magnitude_floor(static_cast<double>(in[r * k + l]), tau[r], grid_bits);
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
  at::Tensor qa, qb;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    qa = magnitude_floors<scalar_t>(a, tau_a.const_data_ptr<int>(), grid_bits);
    qb = magnitude_floors<scalar_t>(bt, tau_b.const_data_ptr<int>(), grid_bits);
  });
  // Every partial sum is an integer below 2^24 units of 2^(-2 grid_bits): exact in any order.
  return at::mm(qa, qb.t()).to(at::kFloat);
}

}  // namespace

TORCH_LIBRARY_IMPL(ozaki, CPU, m) { m.impl("magnitude_product", &magnitude_product); }

}  // namespace ozaki::cpu
