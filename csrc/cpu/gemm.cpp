// CPU kernels of ozaki::gemm_slices, the bit-exact reference for every other backend, and of
// ozaki::slice_levels, its level sums for a k-shard (csrc/cpu/levels.cpp rounds them).
//
// Slices are split into float64 buffers (the same values the CUDA backend stores as FP16 or INT8
// digits), slice products come from float64 GEMMs (exact: every partial sum is an integer below
// 2^31 in units of 2^(-2 beta)), and each entry is summed by ozaki::sum_levels (or, for rounding="nearest",
// ozaki::nearest_from_levels), the code the CUDA backend runs.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "../checks.h"
#include "../exact.h"
#include "../workspace.h"
#include "ops.h"
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

// Per-row data of one operand (row_stats).
struct RowData {
  const int* tau;
  const int* span;
  const bool* nonfinite;
};

// Splits a and bt chunk by chunk (a chunk's slices and exact slice products fit the workspace
// budget) and hands each chunk's products to consume(products, layout, i0, j0): the chunk is
// layout.chunk_rows rows by layout.ld columns, and P(p, q) of chunk entry (i, j), i.e. of entry
// (i0 + i, j0 + j), is at layout.index(p, q, i, j). The digit width beta may be that of a larger
// inner dimension than a's (a k-shard): the products stay exact.
template <typename T, typename Consume>
void for_each_chunk_products(const at::Tensor& a, const at::Tensor& bt, const int* tau_a,
                             const int* tau_b, int slices, bool fast, int beta,
                             int64_t workspace_bytes, Consume consume) {
  const int64_t m = a.size(0), k = a.size(1), n = bt.size(0);
  const T* a_data = a.const_data_ptr<T>();
  const T* b_data = bt.const_data_ptr<T>();
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
      consume(products.const_data_ptr<double>(), layout, i0, j0);
    }
  }
}

// gemm_slices of one 2-D product: each chunk's entries summed (sum_levels) or correctly rounded
// (nearest_from_levels), rows and columns with NaN/Inf given their IEEE value.
template <typename T>
void gemm_chunks(const at::Tensor& a, const at::Tensor& bt, RowData rows_a, RowData rows_b,
                 int slices, bool fast, bool nearest, int beta, int64_t workspace_bytes,
                 at::Tensor& out) {
  const int64_t k = a.size(1), n = bt.size(0);
  const int* tau_a = rows_a.tau;
  const int* tau_b = rows_b.tau;
  const T* a_data = a.const_data_ptr<T>();
  const T* b_data = bt.const_data_ptr<T>();
  T* out_data = out.mutable_data_ptr<T>();
  const auto round_chunk = [&](const double* product_data, const PairLayout& layout, int64_t i0,
                               int64_t j0) {
    at::parallel_for(0, layout.chunk_rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        for (int64_t j = 0; j < layout.ld; ++j) {
          const int64_t gi = i0 + i, gj = j0 + j;
          const auto load = [&](int64_t index, double* v) { v[0] = product_data[index]; };
          const int tau_sum = wrapping_add(tau_a[gi], tau_b[gj]);
          double value;
          if (rows_a.nonfinite[gi] || rows_b.nonfinite[gj]) {
            value = nonfinite_dot(a_data + gi * k, b_data + gj * k, k);
          } else if (nearest) {
            bool undecided;
            const DroppedBound dropped =
                dropped_bound(layout, beta, k, rows_a.span[gi], rows_b.span[gj]);
            value = nearest_from_levels(load, layout, i, j, beta, tau_sum, dropped, format_of<T>(),
                                        &undecided);
            if (undecided) {
              value = exact_dot_rounded(a_data + gi * k, b_data + gj * k, k, format_of<T>());
            }
          } else {
            sum_levels<1>(load, layout, i, j, beta, &tau_sum, &value);
          }
          out_data[gi * n + gj] = static_cast<T>(value);
        }
      }
    });
  };
  for_each_chunk_products<T>(a, bt, tau_a, tau_b, slices, fast, beta, workspace_bytes, round_chunk);
}

}  // namespace

at::Tensor gemm_slices(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                       const at::Tensor& tau_b, const at::Tensor& span_a, const at::Tensor& span_b,
                       const at::Tensor& nonfinite_a, const at::Tensor& nonfinite_b, int64_t slices,
                       bool fast, bool nearest, bool int8, int64_t workspace_bytes) {
  constexpr const char* op = "ozaki::gemm_slices";
  const ProductShape shape = check_gemm_slices_arguments(a, bt, tau_a, tau_b, span_a, span_b,
                                                         nonfinite_a, nonfinite_b, slices, op);
  const int64_t m = shape.m, k = shape.k, n = shape.n;
  if (shape.batch == 0 || m == 0 || n == 0 || k == 0) return at::zeros(shape.out_sizes(), a.options());
  const int beta = slice_digit_bits_checked(k, int8, op);
  at::Tensor out = at::empty(shape.out_sizes(), a.options());
  const int64_t budget = workspace_bytes > 0 ? workspace_bytes : kDefaultWorkspaceBytes;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    // Element by element: each gets exactly the bits of its own 2-D product.
    for (int64_t e = 0; e < shape.batch; ++e) {
      const RowData rows_a{tau_a.const_data_ptr<int>() + e * m, span_a.const_data_ptr<int>() + e * m,
                           nonfinite_a.const_data_ptr<bool>() + e * m};
      const RowData rows_b{tau_b.const_data_ptr<int>() + e * n, span_b.const_data_ptr<int>() + e * n,
                           nonfinite_b.const_data_ptr<bool>() + e * n};
      at::Tensor out_e = batch_element(out, shape.batched, e);
      gemm_chunks<scalar_t>(batch_element(a, shape.batched, e), batch_element(bt, shape.batched, e),
                            rows_a, rows_b, static_cast<int>(slices), fast, nearest, beta, budget,
                            out_e);
    }
  });
  return out;
}

// Level sums of a k-shard (docs/distributed.md): level l of entry (i, j) is pair_level_sum, the
// value sum_levels weighs by 2^(-l w), so shards' outputs add up to the whole product's levels.
at::Tensor slice_levels(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                        const at::Tensor& tau_b, int64_t slices, bool fast, bool int8,
                        int64_t total_k, int64_t workspace_bytes) {
  constexpr const char* op = "ozaki::slice_levels";
  const ProductShape shape = check_slice_levels_arguments(a, bt, tau_a, tau_b, slices, total_k, op);
  const int64_t m = shape.m, k = shape.k, n = shape.n;
  const int64_t levels = level_count(slices, fast);
  const auto f64 = a.options().dtype(at::kDouble);
  if (m == 0 || n == 0 || k == 0) return at::zeros({levels, m, n}, f64);
  const int beta = total_k_digit_bits_checked(total_k, int8, op);
  at::Tensor out = at::empty({levels, m, n}, f64);
  double* out_data = out.mutable_data_ptr<double>();
  const int64_t budget = workspace_bytes > 0 ? workspace_bytes : kDefaultWorkspaceBytes;
  const auto write_levels = [&](const double* product_data, const PairLayout& layout, int64_t i0,
                                int64_t j0) {
    at::parallel_for(0, layout.chunk_rows, 1, [&](int64_t begin, int64_t end) {
      const auto load = [&](int64_t index, double* v) { v[0] = product_data[index]; };
      for (int64_t i = begin; i < end; ++i) {
        for (int64_t j = 0; j < layout.ld; ++j) {
          double* entry = out_data + (i0 + i) * n + j0 + j;
          for (int level = 0; level < levels; ++level) {
            pair_level_sum<1>(load, layout, i, j, level, entry + level * m * n);
          }
        }
      }
    });
  };
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    for_each_chunk_products<scalar_t>(a, bt, tau_a.const_data_ptr<int>(),
                                      tau_b.const_data_ptr<int>(), static_cast<int>(slices), fast,
                                      beta, budget, write_levels);
  });
  return out;
}

}  // namespace ozaki::cpu
