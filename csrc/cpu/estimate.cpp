// CPU kernels of ozaki::magnitude_product: an exact lower bound of (|A||B|)_ij
// 2^-(tau_a_i + tau_b_j) in float64, from which the automatic slice count is planned
// (docs/accuracy.md); of ozaki::sampled_magnitudes, the fixed-count check's sample; and of
// ozaki::crt_entry_bound_sum, exact scheme II's entry bound.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "../checks.h"
#include "ops.h"

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

}  // namespace

at::Tensor magnitude_product(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                             const at::Tensor& tau_b, int64_t total_k) {
  constexpr const char* op = "ozaki::magnitude_product";
  const ProductShape shape = check_magnitude_arguments(a, bt, tau_a, tau_b, op);
  const int grid_bits = magnitude_grid_bits_checked(shape.k, total_k, op);
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

namespace {

// The kSampleLanes lane sums lane_sum(t), added pairwise in csrc/scheme.h's order, as the CUDA
// kernels add them.
template <typename LaneSum>
double lanes_added_pairwise(LaneSum lane_sum) {
  double lanes[kSampleLanes];
  for (int t = 0; t < kSampleLanes; ++t) lanes[t] = lane_sum(t);
  for (int stride = kSampleLanes / 2; stride > 0; stride /= 2) {
    for (int t = 0; t < stride; ++t) lanes[t] = lanes[t] + lanes[t + stride];
  }
  return lanes[0];
}

template <typename T>
double sampled_magnitude(const T* a_row, int tau_a, const T* b_row, int tau_b, int64_t k) {
  return lanes_added_pairwise(
      [&](int t) { return sampled_lane_sum(a_row, tau_a, b_row, tau_b, k, t); });
}

}  // namespace

at::Tensor sampled_magnitudes(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                              const at::Tensor& tau_b, const at::Tensor& usable_a,
                              const at::Tensor& usable_b, const at::Tensor& rows_a,
                              const at::Tensor& rows_b, int64_t m, int64_t n,
                              const std::optional<at::Tensor>& norm_a,
                              const std::optional<at::Tensor>& norm_b) {
  constexpr const char* op = "ozaki::sampled_magnitudes";
  check_sampled_magnitudes_arguments(a, bt, tau_a, tau_b, usable_a, usable_b, rows_a, rows_b, m,
                                     n, norm_a, norm_b, op);
  const int64_t count_a = rows_a.size(0), count_b = rows_b.size(0), k = a.size(1);
  const int64_t* index_a = rows_a.const_data_ptr<int64_t>();
  const int64_t* index_b = rows_b.const_data_ptr<int64_t>();
  for (int64_t r = 0; r < count_a; ++r) {
    TORCH_CHECK(index_a[r] >= 0 && index_a[r] < a.size(0), op, ": rows_a[", r, "] = ", index_a[r],
                " is not a row of a (", a.size(0), " rows)");
  }
  for (int64_t c = 0; c < count_b; ++c) {
    TORCH_CHECK(index_b[c] >= 0 && index_b[c] < bt.size(0), op, ": rows_b[", c, "] = ",
                index_b[c], " is not a row of bt (", bt.size(0), " rows)");
  }
  const SampledRows rows = sampled_rows(tau_a, tau_b, usable_a, usable_b, m, n, norm_a, norm_b);
  at::Tensor out = at::empty({count_a, count_b}, a.options().dtype(at::kDouble));
  double* out_data = out.mutable_data_ptr<double>();
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    const scalar_t* a_data = a.const_data_ptr<scalar_t>();
    const scalar_t* b_data = bt.const_data_ptr<scalar_t>();
    at::parallel_for(0, count_a * count_b, 1, [&](int64_t begin, int64_t end) {
      for (int64_t pair = begin; pair < end; ++pair) {
        const int64_t i = index_a[pair / count_b], j = index_b[pair % count_b];
        const double sum = sampled_magnitude(a_data + i * k, rows.tau_a[i], b_data + j * k,
                                             rows.tau_b[j], k);
        out_data[pair] = sampled_entry(sum, i, j, rows);
      }
    });
  });
  return out;
}

at::Tensor crt_entry_bound_sum(const at::Tensor& exponents_a, const at::Tensor& exponents_b) {
  constexpr const char* op = "ozaki::crt_entry_bound_sum";
  const auto [elements, k] = check_entry_bound_sum_arguments(exponents_a, exponents_b, op);
  double largest = 0.0;
  const auto each_element = [&](const auto* u, const auto* v) {
    for (int64_t e = 0; e < elements; ++e) {
      const auto exponent_of = [&](int64_t l) {
        return static_cast<double>(u[e * k + l]) + static_cast<double>(v[e * k + l]);
      };
      const double sum = lanes_added_pairwise(
          [&](int t) { return entry_bound_lane_sum(exponent_of, k, t, kSampleLanes); });
      largest = e == 0 ? sum : std::max(largest, sum);
    }
  };
  if (exponents_a.scalar_type() == at::kLong) {
    each_element(exponents_a.const_data_ptr<int64_t>(), exponents_b.const_data_ptr<int64_t>());
  } else {
    each_element(exponents_a.const_data_ptr<double>(), exponents_b.const_data_ptr<double>());
  }
  return at::scalar_tensor(largest, exponents_a.options().dtype(at::kDouble));
}

}  // namespace ozaki::cpu
