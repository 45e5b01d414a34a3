// How the CUDA kernels address a batch of products a[e] @ bt[e].T (e < batch), each (m, n): the
// operands and their per-row vectors as the flattened a.reshape(batch * m, k) and
// bt.reshape(batch * n, k), the output (batch, m, n) as (batch * m, n). A 2-D product is the
// batch of one.
#pragma once

#include <cstdint>

namespace ozaki::cuda {

// The element holding flat index t of `elements` consecutive blocks of per_element items (no
// division for a single element: the 2-D product's kernels pay nothing for batching).
__host__ __device__ __forceinline__ int64_t element_of(int64_t t, int64_t per_element,
                                                       int64_t elements) {
  return elements == 1 ? 0 : t / per_element;
}

// Rows [first, first + count) of each of `elements` consecutive elements of element_rows rows: row
// r of element e is row first + e * element_rows + r of the flattened operand. Kernels that write
// per-row data (slices, residues) write element e's block right after element e - 1's, so each
// element's block is one operand of a strided batched GEMM.
struct RowBlocks {
  int64_t first, count, elements, element_rows;

  __host__ __device__ int64_t total() const { return elements * count; }
  __host__ __device__ int64_t row(int64_t e, int64_t r) const { return first + e * element_rows + r; }
};

// One chunk of the batch (csrc/workspace.h, BatchChunkPlan): rows [first_row, first_row + rows) and
// columns [first_col, first_col + cols) of elements [first_element, first_element + elements).
struct Chunk {
  int64_t first_element, elements, first_row, rows, first_col, cols, m, n;

  // Rows of the flattened a and bt for chunk entry (e, i, j), and its index in the output.
  __host__ __device__ int64_t a_row(int64_t e, int64_t i) const {
    return (first_element + e) * m + first_row + i;
  }
  __host__ __device__ int64_t b_row(int64_t e, int64_t j) const {
    return (first_element + e) * n + first_col + j;
  }
  __host__ __device__ int64_t out_index(int64_t e, int64_t i, int64_t j) const {
    return a_row(e, i) * n + first_col + j;
  }
  // The chunk's entries in one flat index t: element by element, row by row.
  __host__ __device__ int64_t entries() const { return elements * rows * cols; }
  __host__ __device__ void entry(int64_t t, int64_t* e, int64_t* i, int64_t* j) const {
    const int64_t per_element = rows * cols;
    *e = element_of(t, per_element, elements);
    const int64_t rest = t - *e * per_element;
    *i = rest / cols;
    *j = rest - *i * cols;
  }
};

// A strided batch of GEMMs: product e reads its operands at b + e * stride_b and a + e * stride_a
// and writes out + e * stride_out (strides in entries).
struct GemmBatch {
  int64_t count, stride_b, stride_a, stride_out;
};
constexpr GemmBatch kSingleGemm{1, 0, 0, 0};
// Products per cublasGemmStridedBatchedEx call: cuBLAS has failed on larger batches on some GPUs
// (pytorch/pytorch#45724), so those go in several calls.
constexpr int64_t kMaxGemmBatch = 65535;

}  // namespace ozaki::cuda
