// CPU kernels of ozaki::row_stats and ozaki::split_rows.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "../checks.h"
#include "../row_stats_output.h"
#include "ops.h"
#include "rows.h"

namespace ozaki::cpu {

std::tuple<at::Tensor, at::Tensor, at::Tensor> row_stats(const at::Tensor& a) {
  check_matrix(a, "ozaki::row_stats", "a");
  const int64_t rows = a.size(0), k = a.size(1);
  const RowStatsOutput out(rows, a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "ozaki::row_stats", [&] {
    const scalar_t* data = a.const_data_ptr<scalar_t>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out.write(i, row_stats_of(data + i * k, k));
    });
  });
  return {out.tau, out.bit_span, out.nonfinite};
}

at::Tensor split_rows(const at::Tensor& a, const at::Tensor& tau, int64_t slices) {
  check_matrix(a, "ozaki::split_rows", "a");
  check_slices(slices, "ozaki::split_rows");
  const int64_t rows = a.size(0), k = a.size(1);
  check_row_vector(tau, rows, at::kInt, "ozaki::split_rows", "tau");
  const int beta = digit_bits_checked(k, "ozaki::split_rows");
  auto out = at::empty({slices, rows, k}, a.options().dtype(at::kHalf));
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "ozaki::split_rows", [&] {
    const scalar_t* data = a.const_data_ptr<scalar_t>();
    const int* tau_in = tau.const_data_ptr<int>();
    at::Half* out_data = out.mutable_data_ptr<at::Half>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        split_row(data + i * k, k, k, tau_in[i], static_cast<int>(slices), beta, out_data + i * k,
                  rows * k);
      }
    });
  });
  return out;
}

}  // namespace ozaki::cpu
