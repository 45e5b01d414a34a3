// Chunking of the product over rows of A and columns of B so the slices and the exact slice
// products of one chunk fit a workspace budget. Chunking never changes the bits: every entry is
// computed from the same slices in the same order whatever the chunk (docs/algorithm.md, "Sum").
#pragma once

#include <algorithm>
#include <cstdint>

namespace ozaki {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

struct ChunkPlan {
  int64_t rows;  // rows of A (and C) per chunk
  int64_t cols;  // columns of B (and C) per chunk
};

struct WorkspaceShape {
  int64_t k_stride;       // padded inner dimension of the stored slices
  int slices;
  int64_t pair_blocks;    // PairLayout::total_blocks()
  int64_t slice_bytes;    // bytes per stored slice digit
  int64_t product_bytes;  // bytes per exact slice-product entry
  int64_t col_align;      // leading dimension of the products is a multiple of this

  // A chunk whose slices hold slice_rows rows of A and cols rows of B, and whose products hold
  // product_rows rows (fewer where the GEMMs run a chunk's rows in several launches).
  int64_t bytes_for(int64_t slice_rows, int64_t product_rows, int64_t cols) const {
    const int64_t slices_bytes = slices * (slice_rows + cols) * k_stride * slice_bytes;
    const int64_t products = pair_blocks * product_rows * round_up(cols, col_align) * product_bytes;
    return slices_bytes + products;
  }
  int64_t bytes_for(int64_t rows, int64_t cols) const { return bytes_for(rows, rows, cols); }
};

// Halves the larger chunk side until the workspace fits the budget (or both sides reach the
// minimum that keeps the slice GEMMs efficient; the budget is then exceeded rather than failing).
inline ChunkPlan plan_chunks(int64_t m, int64_t n, const WorkspaceShape& shape, int64_t budget_bytes) {
  constexpr int64_t kMinSide = 256;
  constexpr int64_t kAlign = 64;
  auto side = [&](int64_t extent, int64_t parts) {
    return std::min(extent, round_up(ceil_div(extent, parts), kAlign));
  };
  int64_t row_parts = 1, col_parts = 1;
  ChunkPlan plan{m, n};
  while (shape.bytes_for(plan.rows, plan.cols) > budget_bytes &&
         (plan.rows > kMinSide || plan.cols > kMinSide)) {
    if (plan.rows >= plan.cols) row_parts *= 2; else col_parts *= 2;
    plan = ChunkPlan{side(m, row_parts), side(n, col_parts)};
  }
  plan.rows = std::max<int64_t>(plan.rows, 1);
  plan.cols = std::max<int64_t>(plan.cols, 1);
  return plan;
}

// All m rows in every chunk and the columns in equal chunks (multiples of 64), when all rows fit
// the budget with at least min_columns columns (narrower GEMMs lose speed); plan_chunks otherwise.
// Scheme II prefers it: its INT8 GEMMs then keep every row and the operand whose residues stay
// whole is converted once (docs/benchmarks.md).
constexpr int64_t kMinColumns = 2048;
inline ChunkPlan plan_column_chunks(int64_t m, int64_t n, const WorkspaceShape& shape,
                                    int64_t budget_bytes, int64_t min_columns = kMinColumns) {
  constexpr int64_t kAlign = 64;
  // bytes_for(m, c) <= fixed + c * per_column (the products' padding to col_align counted in full)
  const int64_t per_column = shape.slices * shape.k_stride * shape.slice_bytes +
                             shape.pair_blocks * m * shape.product_bytes;
  const int64_t fixed = shape.slices * m * shape.k_stride * shape.slice_bytes +
                        shape.pair_blocks * m * (shape.col_align - 1) * shape.product_bytes;
  const int64_t room = std::max<int64_t>(budget_bytes - fixed, 0);
  const int64_t widest = room / std::max<int64_t>(per_column, 1) / kAlign * kAlign;
  if (widest < std::min(n, min_columns)) return plan_chunks(m, n, shape, budget_bytes);
  const int64_t cols = round_up(ceil_div(n, ceil_div(n, widest)), kAlign);  // at most widest
  return ChunkPlan{std::max<int64_t>(m, 1), std::max<int64_t>(1, std::min(n, cols))};
}

// Chunking of a batch of (m, n) products. When one whole element fits the budget, a chunk holds as
// many whole elements as fit, so many small products share each launch (split, batched GEMMs,
// summation); a larger element is chunked within itself by plan_chunks (plan_column_chunks with
// keep_rows), one element at a time.
struct BatchChunkPlan {
  int64_t elements;  // whole elements per chunk (1 when an element is chunked within itself)
  ChunkPlan within;  // rows and columns of one element per chunk: (m, n) when elements > 1
};

// Whole elements of element_bytes each that fit the budget, at least 1 and at most batch.
inline int64_t elements_per_chunk(int64_t batch, int64_t element_bytes, int64_t budget_bytes) {
  const int64_t fitting = budget_bytes / std::max<int64_t>(element_bytes, 1);
  return std::max<int64_t>(1, std::min(batch, fitting));
}

inline BatchChunkPlan plan_batch_chunks(int64_t batch, int64_t m, int64_t n,
                                        const WorkspaceShape& shape, int64_t budget_bytes,
                                        bool keep_rows = false,
                                        int64_t min_columns = kMinColumns) {
  const int64_t element_bytes = shape.bytes_for(m, n);
  if (element_bytes <= budget_bytes) {
    return BatchChunkPlan{elements_per_chunk(batch, element_bytes, budget_bytes),
                          ChunkPlan{std::max<int64_t>(m, 1), std::max<int64_t>(n, 1)}};
  }
  return BatchChunkPlan{1, keep_rows ? plan_column_chunks(m, n, shape, budget_bytes, min_columns)
                                     : plan_chunks(m, n, shape, budget_bytes)};
}

}  // namespace ozaki
