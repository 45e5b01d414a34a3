// CPU kernel of ozaki::gemm_fp16: the bit-exact reference for every other backend.
//
// Slices are split into float64 buffers (the same values the CUDA backend stores as FP16), slice
// products come from float64 GEMMs (exact: every partial sum is an integer below 2^24 in units of
// 2^(-2 beta)), and each entry is summed by ozaki::sum_levels, the code the CUDA backend runs.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../checks.h"
#include "../workspace.h"
#include "rows.h"

namespace ozaki::cpu {
namespace {

// CPU default budget when the caller passes 0: small, because the CPU keeps products in float64.
constexpr int64_t kDefaultWorkspaceBytes = int64_t(256) << 20;

// Splits rows [first, first + count) of a (row-major, k columns) into out (slices, count, k).
template <typename T>
void split_chunk(const T* a, int64_t k, int64_t first, int64_t count, const int* tau, int slices,
                 int beta, at::Tensor& out) {
  double* out_data = out.mutable_data_ptr<double>();
  at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      split_row(a + (first + r) * k, k, k, tau[first + r], slices, beta, out_data + r * k, count * k);
    }
  });
}

template <typename T>
void gemm_chunks(const at::Tensor& a, const at::Tensor& bt, const int* tau_a, const int* tau_b,
                 const bool* nonfinite_a, const bool* nonfinite_b, int slices, bool fast, int beta,
                 int64_t workspace_bytes, at::Tensor& out) {
  const int64_t m = a.size(0), k = a.size(1), n = bt.size(0);
  const T* a_data = a.const_data_ptr<T>();
  const T* b_data = bt.const_data_ptr<T>();
  T* out_data = out.mutable_data_ptr<T>();
  const PairLayout pairs_shape{slices, fast, 0, 0};
  const WorkspaceShape shape{k, slices, pairs_shape.total_blocks(), 8, 8, 1};
  const ChunkPlan plan = plan_chunks(m, n, shape, workspace_bytes);
  const auto f64 = a.options().dtype(at::kDouble);

  for (int64_t j0 = 0; j0 < n; j0 += plan.cols) {
    const int64_t cols = std::min(plan.cols, n - j0);
    at::Tensor b_slices = at::empty({slices, cols, k}, f64);
    split_chunk(b_data, k, j0, cols, tau_b, slices, beta, b_slices);
    for (int64_t i0 = 0; i0 < m; i0 += plan.rows) {
      const int64_t rows = std::min(plan.rows, m - i0);
      at::Tensor a_slices = at::empty({slices, rows, k}, f64);
      split_chunk(a_data, k, i0, rows, tau_a, slices, beta, a_slices);
      const PairLayout layout{slices, fast, rows, cols};
      at::Tensor products = at::empty({layout.total_blocks() * rows, cols}, f64);
      const at::Tensor a_stacked = a_slices.view({slices * rows, k});
      for (int q = 0; q < slices; ++q) {
        const int64_t stacked_rows = layout.rows_for(q) * rows;
        at::Tensor block = products.narrow(0, layout.block_start(q) * rows, stacked_rows);
        at::mm_out(block, a_stacked.narrow(0, 0, stacked_rows), b_slices[q].t());
      }
      const double* product_data = products.const_data_ptr<double>();
      at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t gi = i0 + i, gj = j0 + j;
            double value;
            if (nonfinite_a[gi] || nonfinite_b[gj]) {
              value = nonfinite_dot(a_data + gi * k, b_data + gj * k, k);
            } else {
              const int tau_sum = tau_a[gi] + tau_b[gj];
              sum_levels<1>([&](int64_t index, double* v) { v[0] = product_data[index]; }, layout,
                            i, j, beta, &tau_sum, &value);
            }
            out_data[gi * n + gj] = static_cast<T>(value);
          }
        }
      });
    }
  }
}

at::Tensor gemm_fp16(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                     const at::Tensor& tau_b, const at::Tensor& nonfinite_a,
                     const at::Tensor& nonfinite_b, int64_t slices, bool fast,
                     int64_t workspace_bytes) {
  constexpr const char* op = "ozaki::gemm_fp16";
  check_matrix(a, op, "a");
  check_matrix(bt, op, "bt");
  TORCH_CHECK(a.scalar_type() == bt.scalar_type(), op, ": a and bt must have the same dtype, got ",
              a.scalar_type(), " and ", bt.scalar_type());
  TORCH_CHECK(a.size(1) == bt.size(1), op, ": a and bt must have the same number of columns, got ",
              a.size(1), " and ", bt.size(1));
  check_slices(slices, op);
  const int64_t m = a.size(0), k = a.size(1), n = bt.size(0);
  check_row_vector(tau_a, m, at::kInt, op, "tau_a");
  check_row_vector(tau_b, n, at::kInt, op, "tau_b");
  check_row_vector(nonfinite_a, m, at::kBool, op, "nonfinite_a");
  check_row_vector(nonfinite_b, n, at::kBool, op, "nonfinite_b");
  if (m == 0 || n == 0 || k == 0) return at::zeros({m, n}, a.options());
  const int beta = digit_bits_checked(k, op);
  at::Tensor out = at::empty({m, n}, a.options());
  const int64_t budget = workspace_bytes > 0 ? workspace_bytes : kDefaultWorkspaceBytes;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    gemm_chunks<scalar_t>(a, bt, tau_a.const_data_ptr<int>(), tau_b.const_data_ptr<int>(),
                          nonfinite_a.const_data_ptr<bool>(), nonfinite_b.const_data_ptr<bool>(),
                          static_cast<int>(slices), fast, beta, budget, out);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(ozaki, CPU, m) { m.impl("gemm_fp16", &gemm_fp16); }

}  // namespace ozaki::cpu
