// CPU kernel of ozaki::magnitude_product: an exact lower bound of (|A||B|)_ij 2^-(tau_a_i + tau_b_j)
// in float64, from which the automatic slice count is planned (docs/accuracy.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <utility>

#include "../checks.h"

namespace ozaki::cpu {
namespace {

// The two magnitude digits of every entry (csrc/scheme.h, magnitude_digits) in float64, which holds
// them exactly; a's shape, tau indexed by the rows of the flattened a.
template <typename T>
std::pair<at::Tensor, at::Tensor> magnitude_digit_rows(const at::Tensor& a, const int* tau,
                                                      int grid_bits) {
  const int64_t k = a.size(-1), rows = k == 0 ? 0 : a.numel() / k;  // rows of the flattened a
  at::Tensor high = at::empty(a.sizes(), a.options().dtype(at::kDouble));
  at::Tensor low = at::empty(a.sizes(), a.options().dtype(at::kDouble));
  const T* in = a.const_data_ptr<T>();
  double* high_data = high.mutable_data_ptr<double>();
  double* low_data = low.mutable_data_ptr<double>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin * k; e < end * k; ++e) {
      magnitude_digits(static_cast<double>(in[e]), tau[e / k], grid_bits, high_data + e, low_data + e);
    }
  });
  return {high, low};
}

at::Tensor magnitude_product(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                             const at::Tensor& tau_b, int64_t total_k) {
  constexpr const char* op = "ozaki::magnitude_product";
  const ProductShape shape = check_magnitude_arguments(a, bt, tau_a, tau_b, op);
  const int grid_bits = magnitude_grid_bits(grid_inner_checked(shape.k, total_k, op));
  std::pair<at::Tensor, at::Tensor> da, db;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    da = magnitude_digit_rows<scalar_t>(a, tau_a.const_data_ptr<int>(), grid_bits);
    db = magnitude_digit_rows<scalar_t>(bt, tau_b.const_data_ptr<int>(), grid_bits);
  });
  // Every partial sum is an integer below 2^24 units of 2^(-2 grid_bits), so each product is exact
  // in any order (as the FP16 GEMMs of the CUDA kernel are), and so is their combination; a batch
  // gives each element the bits of its own 2-D product.
  const auto product = [&](const at::Tensor& x, const at::Tensor& y) {
    return shape.batched ? at::bmm(x, y.transpose(1, 2)) : at::mm(x, y.t());
  };
  const at::Tensor high_high = product(da.first, db.first);
  const at::Tensor cross = product(da.first, db.second).add_(product(da.second, db.first));
  return high_high.add_(cross.mul_(pow2(-grid_bits)));
}

}  // namespace

TORCH_LIBRARY_IMPL(ozaki, CPU, m) { m.impl("magnitude_product", &magnitude_product); }

}  // namespace ozaki::cpu
