// CPU kernel of ozaki::round_levels: gemm_slices' result from the summed level sums of a k-sharded
// product (csrc/levels.h), entry by entry.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <tuple>
#include <utility>

#include "../checks.h"
#include "../levels.h"
#include "ops.h"

namespace ozaki::cpu {

std::tuple<at::Tensor, at::Tensor> round_levels(const at::Tensor& levels, const at::Tensor& tau_a,
                                                const at::Tensor& tau_b, const at::Tensor& span_a,
                                                const at::Tensor& span_b, int64_t slices, bool fast,
                                                bool int8, int64_t total_k, bool nearest,
                                                at::ScalarType dtype) {
  constexpr const char* op = "ozaki::round_levels";
  const std::pair<int64_t, int64_t> size = check_round_levels_arguments(
      levels, tau_a, tau_b, span_a, span_b, slices, fast, total_k, dtype, op);
  const int64_t m = size.first, n = size.second;
  at::Tensor out = at::empty({m, n}, levels.options().dtype(dtype));
  at::Tensor undecided = at::empty({m, n}, levels.options().dtype(at::kBool));
  if (m == 0 || n == 0) return {out, undecided};
  const LevelRounding how{PairLayout{static_cast<int>(slices), fast, 0, 0},
                          total_k_digit_bits_checked(total_k, int8, op), total_k, nearest};
  const double* level_data = levels.const_data_ptr<double>();
  const int* tau_a_data = tau_a.const_data_ptr<int>();
  const int* tau_b_data = tau_b.const_data_ptr<int>();
  const int* span_a_data = span_a.const_data_ptr<int>();
  const int* span_b_data = span_b.const_data_ptr<int>();
  bool* undecided_data = undecided.mutable_data_ptr<bool>();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, m, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const int64_t e = i * n + j;
          const double value = round_entry_levels<scalar_t>(
              level_data + e, m * n, tau_a_data[i], tau_b_data[j], span_a_data[i], span_b_data[j],
              how, &undecided_data[e]);
          out_data[e] = static_cast<scalar_t>(value);
        }
      }
    });
  });
  return {out, undecided};
}

}  // namespace ozaki::cpu
