// CUDA kernel of ozaki::gemm_slices (docs/algorithm.md): FP16 or INT8 slices, exact slice products
// through cublasGemmEx on the tensor cores, and the fixed-order FP64 sum of csrc/scheme.h.
//
// Per chunk of rows of A and columns of B: the A-slices are stacked into one (slices * rows, k)
// operand, so each B-slice q needs one GEMM that yields P(p, q) for every kept p at once (slices
// GEMMs per chunk instead of one per pair); then one pass reads each exact product once and writes
// C. A batch of small products puts several whole elements in one chunk (batch.cuh): each of those
// GEMMs is then one strided batched GEMM over the elements, and each pass covers them all.
// Exactness makes the result independent of chunking, batching, GEMM algorithm and stream.
// ozaki::slice_levels (a k-shard's level sums) runs the same chunks with a pass that writes each
// entry's level sums instead of C.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>
#include <c10/cuda/CUDAGuard.h>

#include <type_traits>

#include "../checks.h"
#include "../exact.h"
#include "../workspace.h"
#include "batch.cuh"
#include "half_gemm.cuh"
#include "int8_gemm.cuh"
#include "ops.h"
#include "split.cuh"

namespace ozaki::cuda {
namespace {

// Default workspace budget when the caller passes 0 (docs/api.md, "Workspace").
constexpr int64_t kDefaultWorkspaceBytes = int64_t(8) << 30;
// The products' leading dimension is padded to 32 bytes for the GEMM's output stores.
constexpr int64_t kProductColumnAlign = 8;

// What differs between FP16 and INT8 slices: the stored digit, the GEMM's output, and how an
// output converts to the value in units of 2^0 that csrc/scheme.h sums (FP16 digits are stored
// scaled by 2^-beta, INT8 digits as the integers themselves).
template <typename Digit>
struct SliceKind;
template <>
struct SliceKind<__half> {
  using Product = float;
  using Product4 = float4;
  static void gemm(cublasHandle_t handle, const __half* b, const __half* a, int64_t cols, int64_t rows,
                   int64_t k_stride, float* out, int64_t ld, const GemmBatch& batch) {
    exact_half_gemm_batched(handle, b, a, cols, rows, k_stride, out, ld, batch);
  }
};
template <>
struct SliceKind<int8_t> {
  using Product = int32_t;
  using Product4 = int4;
  static void gemm(cublasHandle_t handle, const int8_t* b, const int8_t* a, int64_t cols,
                   int64_t rows, int64_t k_stride, int32_t* out, int64_t ld, const GemmBatch& batch) {
    exact_int8_gemm_batched(handle, b, a, cols, rows, k_stride, out, ld, batch);
  }
};

template <typename T>
struct Operands {
  const T* a;
  const T* bt;
  int64_t k;
  const int* tau_a;
  const int* tau_b;
  const int* span_a;
  const int* span_b;
  const bool* nonfinite_a;
  const bool* nonfinite_b;
};

// A product read as the value csrc/scheme.h sums: FP16 products are already in those units, INT8
// products are integers in units of 2^(-2 beta) (`unit`; the scaling is exact).
__device__ __forceinline__ double product_value(float p, double) { return p; }
__device__ __forceinline__ double product_value(int32_t p, double unit) { return static_cast<double>(p) * unit; }

// Sums entries (i, j .. j + N - 1) of element e of the chunk, whose exact products start at
// `products`; rows or columns with NaN/Inf get the IEEE answer.
template <int N, typename Digit, typename T>
__device__ __forceinline__ void accumulate_entries(const typename SliceKind<Digit>::Product* products, const PairLayout& layout,
                                                   const Chunk& chunk, int64_t e, int64_t i, int64_t j,
                                                   int beta, double unit, const Operands<T>& in, T* out) {
  const int64_t gi = chunk.a_row(e, i);
  bool nonfinite = in.nonfinite_a[gi];
  int tau_sums[N];
  for (int c = 0; c < N; ++c) {
    const int64_t gj = chunk.b_row(e, j + c);
    nonfinite = nonfinite || in.nonfinite_b[gj];
    tau_sums[c] = wrapping_add(in.tau_a[gi], in.tau_b[gj]);
  }
  double results[N];
  if (nonfinite) {
    for (int c = 0; c < N; ++c) {
      const int64_t gj = chunk.b_row(e, j + c);
      double value[1];
      if (in.nonfinite_a[gi] || in.nonfinite_b[gj]) {
        value[0] = nonfinite_dot(in.a + gi * in.k, in.bt + gj * in.k, in.k);
      } else {
        sum_levels<1>([&](int64_t index, double* v) { v[0] = product_value(products[index], unit); }, layout, i, j + c,
                      beta, &tau_sums[c], value);
      }
      results[c] = value[0];
    }
  } else if constexpr (N == 4) {
    sum_levels<4>(
        [&](int64_t index, double* v) {
          using Product4 = typename SliceKind<Digit>::Product4;
          const Product4 q = __ldg(reinterpret_cast<const Product4*>(products + index));
          v[0] = product_value(q.x, unit), v[1] = product_value(q.y, unit);
          v[2] = product_value(q.z, unit), v[3] = product_value(q.w, unit);
        },
        layout, i, j, beta, tau_sums, results);
  } else {
    sum_levels<N>([&](int64_t index, double* v) { for (int c = 0; c < N; ++c) v[c] = product_value(products[index + c], unit); },
                  layout, i, j, beta, tau_sums, results);
  }
  for (int c = 0; c < N; ++c) out[chunk.out_index(e, i, j + c)] = static_cast<T>(results[c]);
}

// The products of element e of a chunk follow those of element e - 1 (PairLayout per element).
__device__ __forceinline__ int64_t element_products(const PairLayout& layout) {
  return layout.total_blocks() * layout.chunk_rows * layout.ld;
}

// rounding="nearest": one entry per thread, summed exactly and rounded once; entries the kept
// slice products leave undecided (rare) are computed exactly from the inputs. blockIdx.y walks the
// rows of every element of the chunk.
template <typename P, typename T>
__global__ void nearest_kernel(const P* products, PairLayout layout, Chunk chunk, int beta,
                               double unit, Operands<T> in, T* out) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= chunk.cols) return;
  for (int64_t r = blockIdx.y; r < chunk.elements * chunk.rows; r += gridDim.y) {
    const int64_t e = element_of(r, chunk.rows, chunk.elements), i = r - e * chunk.rows;
    const P* element = products + e * element_products(layout);
    const int64_t gi = chunk.a_row(e, i), gj = chunk.b_row(e, j);
    const int tau_sum = wrapping_add(in.tau_a[gi], in.tau_b[gj]);
    double value;
    if (in.nonfinite_a[gi] || in.nonfinite_b[gj]) {
      value = nonfinite_dot(in.a + gi * in.k, in.bt + gj * in.k, in.k);
    } else {
      bool undecided;
      const DroppedBound dropped = dropped_bound(layout, beta, in.k, in.span_a[gi], in.span_b[gj]);
      value = nearest_from_levels([&](int64_t index, double* v) { v[0] = product_value(__ldg(element + index), unit); },
                                  layout, i, j, beta, tau_sum, dropped, format_of<T>(), &undecided);
      if (undecided) {
        value = exact_dot_rounded(in.a + gi * in.k, in.bt + gj * in.k, in.k, format_of<T>());
      }
    }
    out[chunk.out_index(e, i, j)] = static_cast<T>(value);
  }
}

// Each thread sums 4 consecutive entries of a row with 16-byte loads (the workspace's leading
// dimension is a multiple of 8 floats, so every group of 4 is aligned); a ragged tail of the row
// is summed one entry at a time. blockIdx.y walks the rows of every element of the chunk.
template <typename Digit, typename T>
__global__ void accumulate_kernel(const typename SliceKind<Digit>::Product* products,
                                  PairLayout layout, Chunk chunk, int beta, double unit,
                                  Operands<T> in, T* out) {
  const int64_t j = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * 4;
  if (j >= chunk.cols) return;
  for (int64_t r = blockIdx.y; r < chunk.elements * chunk.rows; r += gridDim.y) {
    const int64_t e = element_of(r, chunk.rows, chunk.elements), i = r - e * chunk.rows;
    const auto* element = products + e * element_products(layout);
    if (j + 4 <= chunk.cols) {
      accumulate_entries<4, Digit>(element, layout, chunk, e, i, j, beta, unit, in, out);
    } else {
      for (int64_t c = j; c < chunk.cols; ++c) {
        accumulate_entries<1, Digit>(element, layout, chunk, e, i, c, beta, unit, in, out);
      }
    }
  }
}

// Threads per block for `work` items along a row: up to 128, fewer (whole warps) for narrow rows
// so small elements do not leave most threads idle.
int row_threads(int64_t work) {
  return static_cast<int>(std::min<int64_t>(128, std::max<int64_t>(32, round_up(work, 32))));
}

// Splits and multiplies chunk by chunk: after the slice GEMMs of each chunk, epilogue(products,
// layout, chunk, unit, stream) launches the kernel that reads them (P(p, q) of chunk entry
// (e, i, j) at products + e * element_products(layout) + layout.index(p, q, i, j), read as
// product_value(P, unit)); stream order keeps the next chunk from overwriting them first. The
// digit width beta may be that of a larger inner dimension than in.k (a k-shard): the products
// stay exact.
template <typename Digit, typename T, typename Epilogue>
void for_each_chunk_products(const Operands<T>& in, const ProductShape& product, int slices,
                             bool fast, int beta, int64_t budget, const at::TensorOptions& options,
                             Epilogue epilogue) {
  using Product = typename SliceKind<Digit>::Product;
  constexpr bool int8 = std::is_same_v<Digit, int8_t>;
  const int64_t batch = product.batch, m = product.m, n = product.n;
  const double unit = int8 ? pow2(-2 * beta) : 1.0;
  // INT8 operands want rows of 16 bytes.
  const int64_t k_stride = int8 ? round_up(in.k, 16) : padded_inner(in.k);
  const PairLayout pairs_shape{slices, fast, 0, 0};
  const WorkspaceShape shape{k_stride, slices, pairs_shape.total_blocks(), sizeof(Digit), 4,
                             kProductColumnAlign};
  BatchChunkPlan plan = plan_batch_chunks(batch, m, n, shape, budget);
  // cuBLAS takes int sizes: the stacked operand must stay below 2^31 rows.
  const int64_t max_rows = (int64_t(1) << 31) / (slices + 1);
  if (plan.within.rows > max_rows) plan = BatchChunkPlan{1, ChunkPlan{max_rows, plan.within.cols}};
  const int64_t chunk_elements = plan.elements, chunk_rows = plan.within.rows;
  const int64_t chunk_cols = plan.within.cols;
  const int64_t ld = round_up(chunk_cols, kProductColumnAlign);

  const auto digit_dtype = int8 ? at::kChar : at::kHalf;
  at::Tensor a_slices =
      at::empty({chunk_elements * slices * chunk_rows * k_stride}, options.dtype(digit_dtype));
  at::Tensor b_slices =
      at::empty({chunk_elements * slices * chunk_cols * k_stride}, options.dtype(digit_dtype));
  at::Tensor products = at::empty({chunk_elements * pairs_shape.total_blocks() * chunk_rows * ld},
                                  options.dtype(int8 ? at::kInt : at::kFloat));
  auto* a_digits = static_cast<Digit*>(a_slices.mutable_data_ptr());
  auto* b_digits = static_cast<Digit*>(b_slices.mutable_data_ptr());
  auto* product_data = static_cast<Product*>(products.mutable_data_ptr());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  const bool single_row_chunk = chunk_rows >= m;

  for (int64_t e0 = 0; e0 < batch; e0 += chunk_elements) {
    const int64_t elements = std::min(chunk_elements, batch - e0);
    if (single_row_chunk) {
      launch_split_rows(in.a, in.k, RowBlocks{e0 * m, m, elements, m}, k_stride, in.tau_a, slices,
                        beta, a_digits, stream);
    }
    for (int64_t j0 = 0; j0 < n; j0 += chunk_cols) {
      const int64_t cols = std::min(chunk_cols, n - j0);
      launch_split_rows(in.bt, in.k, RowBlocks{e0 * n + j0, cols, elements, n}, k_stride, in.tau_b,
                        slices, beta, b_digits, stream);
      for (int64_t i0 = 0; i0 < m; i0 += chunk_rows) {
        const int64_t rows = std::min(chunk_rows, m - i0);
        if (!single_row_chunk) {
          launch_split_rows(in.a, in.k, RowBlocks{e0 * m + i0, rows, elements, m}, k_stride,
                            in.tau_a, slices, beta, a_digits, stream);
        }
        const Chunk chunk{e0, elements, i0, rows, j0, cols, m, n};
        const PairLayout layout{slices, fast, rows, ld};
        // Element e's stacked A-slices, B-slices and products follow element e - 1's.
        const GemmBatch per_element{elements, slices * cols * k_stride, slices * rows * k_stride,
                                    layout.total_blocks() * rows * ld};
        for (int q = 0; q < slices; ++q) {
          SliceKind<Digit>::gemm(handle, b_digits + q * cols * k_stride, a_digits, cols,
                                 layout.rows_for(q) * rows, k_stride,
                                 product_data + layout.block_start(q) * rows * ld, ld, per_element);
        }
        epilogue(static_cast<const Product*>(product_data), layout, chunk, unit, stream);
      }
    }
  }
}

// Blocks along the rows of a chunk's kernels: blockIdx.y walks the rows of every element.
unsigned grid_rows_for(const Chunk& chunk) {
  return static_cast<unsigned>(std::min<int64_t>(chunk.elements * chunk.rows, 65535));
}

// gemm_slices: each chunk's entries summed (accumulate_kernel) or correctly rounded
// (nearest_kernel) into out.
template <typename Digit, typename T>
void gemm_chunks(const Operands<T>& in, const ProductShape& product, int slices, bool fast,
                 bool nearest, int beta, int64_t budget, T* out, const at::TensorOptions& options) {
  using Product = typename SliceKind<Digit>::Product;
  const auto round_chunk = [&](const Product* products, const PairLayout& layout,
                               const Chunk& chunk, double unit, cudaStream_t stream) {
    const int64_t cols = chunk.cols;
    if (nearest) {
      const int threads = row_threads(cols);
      const dim3 grid(static_cast<unsigned>(ceil_div(cols, threads)), grid_rows_for(chunk));
      nearest_kernel<Product, T><<<grid, threads, 0, stream>>>(products, layout, chunk, beta, unit,
                                                               in, out);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    const int threads = row_threads(ceil_div(cols, 4));
    const dim3 grid(static_cast<unsigned>(ceil_div(ceil_div(cols, 4), threads)),
                    grid_rows_for(chunk));
    accumulate_kernel<Digit, T><<<grid, threads, 0, stream>>>(products, layout, chunk, beta, unit,
                                                              in, out);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  for_each_chunk_products<Digit>(in, product, slices, fast, beta, budget, options, round_chunk);
}

// slice_levels: level l of chunk entry (e, i, j) is pair_level_sum, the value sum_levels weighs by
// 2^(-l w), written to out[l * level_stride + chunk.out_index(e, i, j)]. One entry per thread,
// all its levels; blockIdx.y walks the rows of every element of the chunk.
template <typename P>
__global__ void level_sums_kernel(const P* products, PairLayout layout, Chunk chunk, double unit,
                                  int64_t level_stride, double* out) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= chunk.cols) return;
  for (int64_t r = blockIdx.y; r < chunk.elements * chunk.rows; r += gridDim.y) {
    const int64_t e = element_of(r, chunk.rows, chunk.elements), i = r - e * chunk.rows;
    const P* element = products + e * element_products(layout);
    const auto load = [&](int64_t index, double* v) {
      v[0] = product_value(__ldg(element + index), unit);
    };
    double* entry = out + chunk.out_index(e, i, j);
    for (int level = 0; level <= layout.top_level(); ++level) {
      double level_sum[1];
      pair_level_sum<1>(load, layout, i, j, level, level_sum);
      entry[level * level_stride] = level_sum[0];
    }
  }
}

// slice_levels of a (batch of) k-shard(s): out (levels, batch * m, n).
template <typename Digit, typename T>
void level_chunks(const Operands<T>& in, const ProductShape& product, int slices, bool fast,
                  int beta, int64_t budget, double* out, const at::TensorOptions& options) {
  using Product = typename SliceKind<Digit>::Product;
  const int64_t level_stride = product.batch * product.m * product.n;
  const auto write_levels = [&](const Product* products, const PairLayout& layout,
                                const Chunk& chunk, double unit, cudaStream_t stream) {
    const int threads = row_threads(chunk.cols);
    const dim3 grid(static_cast<unsigned>(ceil_div(chunk.cols, threads)), grid_rows_for(chunk));
    level_sums_kernel<Product><<<grid, threads, 0, stream>>>(products, layout, chunk, unit,
                                                             level_stride, out);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  for_each_chunk_products<Digit>(in, product, slices, fast, beta, budget, options, write_levels);
}

}  // namespace

at::Tensor gemm_slices(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                       const at::Tensor& tau_b, const at::Tensor& span_a, const at::Tensor& span_b,
                       const at::Tensor& nonfinite_a, const at::Tensor& nonfinite_b, int64_t slices,
                       bool fast, bool nearest, bool int8, int64_t workspace_bytes) {
  constexpr const char* op = "ozaki::gemm_slices";
  const ProductShape shape = check_gemm_slices_arguments(a, bt, tau_a, tau_b, span_a, span_b,
                                                         nonfinite_a, nonfinite_b, slices, op);
  check_same_device(a, {&bt, &tau_a, &tau_b, &span_a, &span_b, &nonfinite_a, &nonfinite_b}, op);
  const int64_t m = shape.m, k = shape.k, n = shape.n;
  const c10::cuda::CUDAGuard guard(a.device());
  if (shape.batch == 0 || m == 0 || n == 0 || k == 0) return at::zeros(shape.out_sizes(), a.options());
  const int beta = slice_digit_bits_checked(k, int8, op);
  at::Tensor out = at::empty(shape.out_sizes(), a.options());
  const int64_t budget = workspace_bytes > 0 ? workspace_bytes : kDefaultWorkspaceBytes;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    const Operands<scalar_t> in{a.const_data_ptr<scalar_t>(), bt.const_data_ptr<scalar_t>(), k,
                                tau_a.const_data_ptr<int>(), tau_b.const_data_ptr<int>(),
                                span_a.const_data_ptr<int>(), span_b.const_data_ptr<int>(),
                                nonfinite_a.const_data_ptr<bool>(), nonfinite_b.const_data_ptr<bool>()};
    if (int8) {
      gemm_chunks<int8_t, scalar_t>(in, shape, static_cast<int>(slices), fast, nearest, beta, budget,
                                    out.mutable_data_ptr<scalar_t>(), a.options());
    } else {
      gemm_chunks<__half, scalar_t>(in, shape, static_cast<int>(slices), fast, nearest, beta, budget,
                                    out.mutable_data_ptr<scalar_t>(), a.options());
    }
  });
  return out;
}

// Level sums of a k-shard (docs/distributed.md); csrc/cuda/levels.cu rounds their sum over the
// shards.
at::Tensor slice_levels(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                        const at::Tensor& tau_b, int64_t slices, bool fast, bool int8,
                        int64_t total_k, int64_t workspace_bytes) {
  constexpr const char* op = "ozaki::slice_levels";
  const ProductShape shape = check_slice_levels_arguments(a, bt, tau_a, tau_b, slices, total_k, op);
  check_same_device(a, {&bt, &tau_a, &tau_b}, op);
  const int64_t m = shape.m, k = shape.k, n = shape.n;
  const c10::cuda::CUDAGuard guard(a.device());
  const int64_t levels = level_count(slices, fast);
  const auto f64 = a.options().dtype(at::kDouble);
  if (m == 0 || n == 0 || k == 0) return at::zeros({levels, m, n}, f64);
  const int beta = total_k_digit_bits_checked(total_k, int8, op);
  at::Tensor out = at::empty({levels, m, n}, f64);
  const int64_t budget = workspace_bytes > 0 ? workspace_bytes : kDefaultWorkspaceBytes;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    // Spans and NaN/Inf flags are not read: non-finite entries split as zero.
    const Operands<scalar_t> in{a.const_data_ptr<scalar_t>(), bt.const_data_ptr<scalar_t>(), k,
                                tau_a.const_data_ptr<int>(), tau_b.const_data_ptr<int>(),
                                nullptr, nullptr, nullptr, nullptr};
    if (int8) {
      level_chunks<int8_t, scalar_t>(in, shape, static_cast<int>(slices), fast, beta, budget,
                                     out.mutable_data_ptr<double>(), a.options());
    } else {
      level_chunks<__half, scalar_t>(in, shape, static_cast<int>(slices), fast, beta, budget,
                                     out.mutable_data_ptr<double>(), a.options());
    }
  });
  return out;
}

}  // namespace ozaki::cuda
