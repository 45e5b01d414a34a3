// CUDA kernels of Ozaki scheme II (csrc/crt.h): ozaki::row_norm_scales (alone or with row_stats),
// ozaki::crt_row_scales, crt_wide_exponents, crt_magnitude and gemm_crt, and the k-shard operators
// row_norm_square_sums, crt_magnitude_digits, crt_residue_products and crt_round.
//
// Per chunk of rows of A and columns of B: one pass over each operand writes all its INT8 residues
// (one read of the input), one exact INT8 GEMM per modulus, and one pass that reads every
// modulus's INT32 result once, rebuilds the exact integer and writes C. A batch of small products
// puts several whole elements in one chunk (batch.cuh): every pass covers them all and each
// modulus's GEMM is one strided batched GEMM over them. Exactness makes the result independent of
// chunking, batching, GEMM algorithm and stream, and equal to the CPU kernel's.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "../checks.h"
#include "../crt.h"
#include "../crt_exact.h"
#include "../graph_result.h"
#include "../row_stats_output.h"
#include "../tile_waves.h"
#include "../workspace.h"
#include "batch.cuh"
#include "bt_layout.cuh"
#include "crt_fused.cuh"
#include "int8_gemm.cuh"
#include "launch.cuh"
#include "ops.h"
#include "plan_columns.cuh"
#include "plan_rows.cuh"
#include "reduced_gemm.cuh"
#include "tma.cuh"

namespace ozaki::cuda {
namespace {

// Default workspace budget when the caller passes 0 (docs/api.md, "Workspace"): at 16384^3 with 15
// moduli it holds half of C's INT32 residue products, so A's residues are computed once.
constexpr int64_t kDefaultWorkspaceBytes = int64_t(16) << 30;
// Exact scheme II's default budget: at 16384^3 with 23 moduli it holds A's residues and the
// INT32 products of chunks of 3328 columns; narrower column chunks are allowed than scheme II's,
// so that A's residues are still computed once.
constexpr int64_t kDefaultExactWorkspaceBytes = int64_t(12) << 30;
constexpr int64_t kExactMinColumns = 1024;
// The reduced GEMMs run every modulus of a chunk in one launch, so column chunks as narrow as one
// 256-wide tile keep the GPU busy: A's residues are then computed once within their budget.
constexpr int64_t kReducedMinColumns = 256;
// INT8 operand rows and INT32 result rows are padded to 16 bytes, and so are the reduced GEMMs'
// rows of byte results (16 entries).
constexpr int64_t kInnerAlign = kResidueRowAlign;
constexpr int64_t kResultAlign = 4;
constexpr int64_t kReducedResultAlign = 16;

// Notes, once per kernel, that Kernel writes the product's result through its argument number
// `argument` (a plain T*): a replayed graph may then move that argument to a fresh result
// (csrc/graph_result.h).
template <auto Kernel>
void note_writer(int argument) {
  static const bool noted =
      (note_result_writer(reinterpret_cast<const void*>(Kernel), argument), true);
  (void)noted;
}

// ---- row_norm_scales, row_norm_square_sums ----------------------------------------------------

// What the per-row reduction writes: the norm scale's code (row_norm_scales) or the sum itself (a
// k-shard's, row_norm_square_sums).
struct WriteNormScale {
  int* scales;
  __device__ void operator()(int64_t row, uint64_t sum, int tau) const {
    scales[row] = norm_scale_code(sum, tau);
  }
};
struct WriteNormSquareSum {
  int64_t* sums;
  __device__ void operator()(int64_t row, uint64_t sum, int) const {
    sums[row] = static_cast<int64_t>(sum);
  }
};

// A block per row (rows past the grid's blocks taken grid-stride): the sum of norm_square_units
// over the row, handed to write.
template <typename T, typename Write>
__global__ void row_norm_kernel(const T* a, int64_t rows, int64_t k, const int* tau, Write write) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int row_tau = tau[row];
    unsigned long long sum = 0;  // exact: integers, any order
    for_row_entries(a + row * k, k,
                    [&](T x) { sum += norm_square_units(static_cast<double>(x), row_tau); });
    const unsigned long long total = block_sum<kNormThreads>(sum);
    if (threadIdx.x == 0) write(row, total, row_tau);
    __syncthreads();  // thread 0 has read the block's partials before the next row's replace them
  }
}

// Checks a (rows, k) and tau, then runs row_norm_kernel into a fresh (rows,) tensor of out_dtype.
template <typename Write, typename Data>
at::Tensor row_norm_reduction(const at::Tensor& a, const at::Tensor& tau, at::ScalarType out_dtype,
                              const char* op) {
  check_matrix(a, op, "a");
  const int64_t rows = a.size(0), k = a.size(1);
  check_row_vector(tau, rows, at::kInt, op, "tau");
  check_same_device(a, {&tau}, op);
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor out = at::empty({rows}, tau.options().dtype(out_dtype));
  if (rows == 0) return out;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "ozaki row norm sums", [&] {
    row_norm_kernel<scalar_t, Write>
        <<<row_blocks(rows), kNormThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.const_data_ptr<scalar_t>(), rows, k, tau.const_data_ptr<int>(),
        Write{out.mutable_data_ptr<Data>()});
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace

at::Tensor row_norm_scales(const at::Tensor& a, const at::Tensor& tau) {
  return row_norm_reduction<WriteNormScale, int>(a, tau, at::kInt, "ozaki::row_norm_scales");
}

at::Tensor row_norm_square_sums(const at::Tensor& a, const at::Tensor& tau) {
  return row_norm_reduction<WriteNormSquareSum, int64_t>(a, tau, at::kLong,
                                                         "ozaki::row_norm_square_sums");
}

// ---- row_stats_with_norm_scales, crt_row_scales, crt_wide_exponents ----------------------------

// a's rows, or B's columns in place (check_row_operand), which column_plan_kernel reads without
// the digits: the same values.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> row_stats_with_norm_scales(
    const at::Tensor& a) {
  constexpr const char* op = "ozaki::row_stats_with_norm_scales";
  const int64_t rows = check_row_operand(a, op, "a", /*columns=*/true);
  const int64_t k = a.size(-1);
  const c10::cuda::CUDAGuard guard(a.device());
  const RowStatsOutput out(rows, a.options());
  at::Tensor scales = at::empty({rows}, a.options().dtype(at::kInt));
  if (rows > 0) {
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
      if (is_column_view(a)) {
        at::Tensor usable = at::empty({rows}, a.options().dtype(at::kBool));
        launch_column_plan(a.const_data_ptr<scalar_t>(), k, bt_layout_of(a), rows,
                           /*k_stride=*/0, /*gain=*/0, out.tau_data, out.bit_span_data,
                           out.nonfinite_data, scales.mutable_data_ptr<int>(),
                           usable.mutable_data_ptr<bool>(), /*digits=*/nullptr,
                           /*smallest=*/nullptr, stream);
      } else {
        launch_row_stats_norm(a.const_data_ptr<scalar_t>(), rows, k, out.tau_data,
                              out.bit_span_data, out.nonfinite_data,
                              scales.mutable_data_ptr<int>(), stream);
      }
    });
  }
  return {out.tau, out.bit_span, out.nonfinite, scales};
}

namespace {

__global__ void row_scales_kernel(const int* norm_scales, const int* tau, const int* bit_span,
                                  int64_t rows, int t, int* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = crt_row_scale_code(norm_scales[i], tau[i], bit_span[i], t);
  }
}

}  // namespace

at::Tensor crt_row_scales(const at::Tensor& norm_scales, const at::Tensor& tau,
                          const at::Tensor& bit_span, int64_t t) {
  constexpr const char* op = "ozaki::crt_row_scales";
  check_crt_row_scales_arguments(norm_scales, tau, bit_span, t, op);
  check_same_device(norm_scales, {&tau, &bit_span}, op);
  const c10::cuda::CUDAGuard guard(norm_scales.device());
  at::Tensor out = at::empty_like(norm_scales);
  const int64_t rows = out.size(0);
  if (rows == 0) return out;
  constexpr int threads = 256;
  row_scales_kernel<<<grid_for(rows, threads), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      norm_scales.const_data_ptr<int>(), tau.const_data_ptr<int>(), bit_span.const_data_ptr<int>(),
      rows, static_cast<int>(t), out.mutable_data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

namespace {

__global__ void wide_exponents_kernel(const int* norm_scales, const int* tau, const int* bit_span,
                                      const bool* usable, int64_t rows, int t, int* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = wide_row_exponent(norm_scales[i], tau[i], bit_span[i], usable[i], t);
  }
}

}  // namespace

at::Tensor crt_wide_exponents(const at::Tensor& norm_scales, const at::Tensor& tau,
                              const at::Tensor& bit_span, const at::Tensor& usable, int64_t t) {
  constexpr const char* op = "ozaki::crt_wide_exponents";
  check_crt_wide_exponents_arguments(norm_scales, tau, bit_span, usable, t, op);
  check_same_device(norm_scales, {&tau, &bit_span, &usable}, op);
  const c10::cuda::CUDAGuard guard(norm_scales.device());
  at::Tensor out = at::empty_like(norm_scales);
  const int64_t rows = out.size(0);
  if (rows == 0) return out;
  constexpr int threads = 256;
  wide_exponents_kernel<<<grid_for(rows, threads), threads, 0,
                          at::cuda::getCurrentCUDAStream()>>>(
      norm_scales.const_data_ptr<int>(), tau.const_data_ptr<int>(), bit_span.const_data_ptr<int>(),
      usable.const_data_ptr<bool>(), rows, static_cast<int>(t), out.mutable_data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

namespace {

// One block: block_row_bounds of all rows.
__global__ void row_bounds_kernel(const int* tau, const int* bit_span, const bool* nonfinite,
                                  const int* norm, int64_t rows, double* out) {
  block_row_bounds(tau, bit_span, nonfinite, norm, rows, out);
}

}  // namespace

at::Tensor crt_row_bounds(const at::Tensor& tau, const at::Tensor& bit_span,
                          const at::Tensor& nonfinite, const at::Tensor& norm_scales) {
  constexpr const char* op = "ozaki::crt_row_bounds";
  check_crt_row_bounds_arguments(tau, bit_span, nonfinite, norm_scales, op);
  check_same_device(tau, {&bit_span, &nonfinite, &norm_scales}, op);
  const c10::cuda::CUDAGuard guard(tau.device());
  at::Tensor out = at::empty({2}, tau.options().dtype(at::kDouble));
  row_bounds_kernel<<<1, kRowBoundsThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      tau.const_data_ptr<int>(), bit_span.const_data_ptr<int>(), nonfinite.const_data_ptr<bool>(),
      norm_scales.const_data_ptr<int>(), tau.size(0), out.mutable_data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// ---- crt_magnitude -------------------------------------------------------------------------------

// The digits of every entry as int8 (rows, k), contiguous for int8_matmul: its products of two of
// them are crt_magnitude's, and a k-shard's products add up to the whole rows'.
at::Tensor crt_magnitude_digits(const at::Tensor& a, const at::Tensor& tau, const at::Tensor& norm,
                                int64_t total_k) {
  constexpr const char* op = "ozaki::crt_magnitude_digits";
  const int gain = check_crt_magnitude_digits_arguments(a, tau, norm, total_k, op);
  const int64_t rows = a.size(0), k = a.size(1);
  check_same_device(a, {&tau, &norm}, op);
  const c10::cuda::CUDAGuard guard(a.device());
  if (rows == 0 || k == 0) return at::empty({rows, k}, a.options().dtype(at::kChar));
  at::Tensor digits;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    digits = crt_magnitude_digit_rows<scalar_t>(a, tau, norm, gain, k);  // k_stride = k: no padding
  });
  return digits;
}

namespace {

constexpr int kMinThreads = 256;

// Per block: min over the usable entries of a chunk of exact digit products (element e's rows at
// products + e * rows * ld), times scale = 2^(-2 g) as in csrc/cpu/crt.cpp (min is exact and
// order-free, so the result matches the CPU's).
__global__ void magnitude_min_kernel(const int32_t* products, int64_t ld, Chunk chunk, double scale,
                                     const bool* usable_a, const bool* usable_b,
                                     double* block_min) {
  double smallest = infinity();
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < chunk.entries();
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t e, i, j;
    chunk.entry(t, &e, &i, &j);
    const int64_t gi = chunk.a_row(e, i), gj = chunk.b_row(e, j);
    if (!usable_a[gi] || !usable_b[gj]) continue;
    const double value = static_cast<double>(products[(e * chunk.rows + i) * ld + j]) * scale;
    smallest = value < smallest ? value : smallest;
  }
  __shared__ double shared[kMinThreads];
  shared[threadIdx.x] = smallest;
  __syncthreads();
  for (int stride = kMinThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] = fmin(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x == 0) block_min[blockIdx.x] = shared[0];
}

// The least exact product of usable digit rows, times scale, with no product stored: one reduced
// GEMM over every element (magnitude_min_gemms), then the float64 value (+inf where no usable row
// meets a usable column).
__global__ void smallest_value_kernel(const int32_t* smallest, double scale, double* out) {
  *out = *smallest == INT_MAX ? infinity() : static_cast<double>(*smallest) * scale;
}

at::Tensor smallest_digit_product(const at::Tensor& da, const at::Tensor& db,
                                  const ProductShape& shape, const at::Tensor& usable_a,
                                  const at::Tensor& usable_b, double scale) {
  const int64_t k_stride = da.size(1);
  at::Tensor smallest = at::full({1}, INT_MAX, da.options().dtype(at::kInt));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  magnitude_min_gemms(MagnitudeMinGemm{da.const_data_ptr<int8_t>(), shape.m * k_stride,
                                       db.const_data_ptr<int8_t>(), shape.n * k_stride, shape.m,
                                       shape.n, k_stride, shape.batch,
                                       usable_a.const_data_ptr<bool>(),
                                       usable_b.const_data_ptr<bool>(),
                                       smallest.mutable_data_ptr<int32_t>()},
                      stream);
  at::Tensor out = at::empty({}, da.options().dtype(at::kDouble));
  smallest_value_kernel<<<1, 1, 0, stream>>>(smallest.const_data_ptr<int32_t>(), scale,
                                              out.mutable_data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

at::Tensor crt_magnitude(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                         const at::Tensor& tau_b, const at::Tensor& norm_a,
                         const at::Tensor& norm_b, const at::Tensor& usable_a,
                         const at::Tensor& usable_b) {
  constexpr const char* op = "ozaki::crt_magnitude";
  const ProductShape shape =
      check_crt_magnitude_arguments(a, bt, tau_a, tau_b, norm_a, norm_b, usable_a, usable_b, op);
  const int64_t batch = shape.batch, m = shape.m, k = shape.k, n = shape.n;
  check_same_device(a, {&bt, &tau_a, &tau_b, &norm_a, &norm_b, &usable_a, &usable_b}, op);
  const c10::cuda::CUDAGuard guard(a.device());
  if (batch == 0 || m == 0 || n == 0 || k == 0) {
    return at::scalar_tensor(INFINITY, a.options().dtype(at::kDouble));
  }
  const int64_t k_stride = round_up(k, kInnerAlign);
  const int gain = crt_magnitude_gain(k);
  at::Tensor da, db;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    da = crt_magnitude_digit_rows<scalar_t>(a, tau_a, norm_a, gain, k_stride);
    db = crt_magnitude_digit_rows<scalar_t>(bt, tau_b, norm_b, gain, k_stride);
  });
  if (reduced_gemm_available()) {
    return smallest_digit_product(da, db, shape, usable_a, usable_b, pow2(-2 * gain));
  }
  // Chunks keep the INT32 products near 1 GiB: columns of one element, or whole elements when one
  // fits, their GEMMs one strided batched GEMM (pairs of rows of the same element only).
  constexpr int64_t kProductEntries = int64_t(1) << 28;
  const int64_t ld_full = round_up(n, kResultAlign);
  const int64_t chunk = std::max<int64_t>(kResultAlign, std::min(ld_full, round_up(kProductEntries / m, kResultAlign)));
  const int64_t chunk_elements = chunk >= n ? elements_per_chunk(batch, m * chunk, kProductEntries) : 1;
  at::Tensor products = at::empty({chunk_elements * m * chunk}, a.options().dtype(at::kInt));
  std::vector<at::Tensor> minima;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  for (int64_t e0 = 0; e0 < batch; e0 += chunk_elements) {
    const int64_t elements = std::min(chunk_elements, batch - e0);
    for (int64_t j0 = 0; j0 < n; j0 += chunk) {
      const Chunk part{e0, elements, 0, m, j0, std::min(chunk, n - j0), m, n};
      const int64_t ld = round_up(part.cols, kResultAlign);
      exact_int8_gemm_batched(at::cuda::getCurrentCUDABlasHandle(),
                              db.const_data_ptr<int8_t>() + part.b_row(0, 0) * k_stride,
                              da.const_data_ptr<int8_t>() + part.a_row(0, 0) * k_stride, part.cols,
                              m, k_stride, products.mutable_data_ptr<int32_t>(), ld,
                              GemmBatch{elements, n * k_stride, m * k_stride, m * ld});
      const int blocks = grid_for(part.entries(), kMinThreads);
      at::Tensor block_min = at::empty({blocks}, a.options().dtype(at::kDouble));
      magnitude_min_kernel<<<blocks, kMinThreads, 0, stream>>>(
          products.const_data_ptr<int32_t>(), ld, part, pow2(-2 * gain),
          usable_a.const_data_ptr<bool>(), usable_b.const_data_ptr<bool>(),
          block_min.mutable_data_ptr<double>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      minima.push_back(block_min);
    }
  }
  return at::cat(minima).min();
}

namespace {

// ---- gemm_crt ------------------------------------------------------------------------------------

template <typename T>
struct CrtOperands {
  const T* a;
  const T* bt;
  int64_t k;
  const int* scale_a;  // the rows' scale codes (gemm_crt) or exponents (gemm_crt_exact)
  const int* scale_b;
  const bool* nonfinite_a;
  const bool* nonfinite_b;
  BtLayout bt_layout{};  // where bt's rows lie (gemm_crt reads B's columns in place)
};

constexpr int kResidueGroup = kEntryGroup;  // entries per thread of the residues kernel
constexpr int kResidueThreads = 256;

// The groups of kResidueGroup entries a thread of a residue kernel owns (row_launch: rows along
// grid y and the threads' y, groups along grid x and the threads' x, no per-group index division):
// for each row, state = row_state(row) (the operand's row index), then group(state, row_out, l0)
// for each of its groups, entries l0.. of the row, whose modulus-i residues go to
// row_out + i * blocks.count * k_stride + l0 (rows of element e of the blocks at
// out[((e * moduli + i) * blocks.count + r) * k_stride]).
template <typename RowState, typename Group>
__device__ __forceinline__ void for_each_residue_group(const RowBlocks& blocks, int64_t k_stride,
                                                       int moduli, int8_t* out,
                                                       RowState row_state, Group group) {
  const int64_t groups_per_row = k_stride / kResidueGroup;
  for (int64_t block_row = blockIdx.y * int64_t(blockDim.y) + threadIdx.y;
       block_row < blocks.total(); block_row += int64_t(gridDim.y) * blockDim.y) {
    const int64_t e = element_of(block_row, blocks.count, blocks.elements);
    const int64_t r = block_row - e * blocks.count;
    const auto state = row_state(blocks.row(e, r));
    int8_t* row_out = out + (e * moduli * blocks.count + r) * k_stride;
    for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups_per_row;
         g += int64_t(gridDim.x) * blockDim.x) {
      group(state, row_out, g * kResidueGroup);
    }
  }
}

// Each thread turns 8 consecutive entries of a row into their N residues and stores each
// modulus's 8 residues with one 8-byte store: row r of element e of the blocks at
// out[((e * N + i) * blocks.count + r) * k_stride + l]. Rows go along grid y and the threads' y,
// groups of entries along grid x and the threads' x (row_launch; no per-group index division).
template <int N, bool weighted, bool aligned, typename T>
__global__ void residues_kernel(const T* a, int64_t k, RowBlocks blocks, int64_t k_stride,
                                const int* scale, int8_t* out) {
  struct Row {
    RowScaler scaler;
    const T* entries;
  };
  const auto row_state = [&](int64_t row) { return Row{row_scaler<T>(scale[row]), a + row * k}; };
  for_each_residue_group(blocks, k_stride, N, out, row_state, [&](const Row& row, int8_t* row_out,
                                                                  int64_t l0) {
    double x[kResidueGroup];
    load_entry_group<aligned>(row.entries, l0, k, x);
    __align__(8) int8_t residues[N][kResidueGroup];
#pragma unroll
    for (int c = 0; c < kResidueGroup; ++c) {
      residues_of<N, weighted>(x[c], row.scaler,
                               [&](int i, int residue) { residues[i][c] = static_cast<int8_t>(residue); });
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
      *reinterpret_cast<uint2*>(row_out + i * blocks.count * k_stride + l0) =
          *reinterpret_cast<const uint2*>(residues[i]);
    }
  });
}

template <int N, bool weighted, typename T>
void launch_residues(const T* a, int64_t k, const RowBlocks& blocks, int64_t k_stride,
                     const int* scale, int8_t* out, cudaStream_t stream) {
  if (blocks.total() == 0) return;
  const RowLaunch launch = row_launch(blocks.total(), k_stride / kResidueGroup, kResidueThreads);
  const bool aligned = entry_groups_aligned(a, k);
  if (aligned) {
    residues_kernel<N, weighted, true, T>
        <<<launch.grid, launch.block, 0, stream>>>(a, k, blocks, k_stride, scale, out);
  } else {
    residues_kernel<N, weighted, false, T>
        <<<launch.grid, launch.block, 0, stream>>>(a, k, blocks, k_stride, scale, out);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// launch_residues for bt = B's columns read in place (BtLayout): a block of 256 threads turns a
// tile of 32 columns by 64 entries of B into residues, 8 entries of one column per thread (a
// warp's loads read 32 consecutive entries of a row of B), and transposes them through shared
// memory so that each modulus's bytes of a column leave as one 64-byte row segment. Shared memory
// holds N planes of 32 rows of 64 bytes; 8-byte slot s of row r sits at slot s ^ ((r / 2) % 8),
// so that the 4-byte stores of a warp (32 rows) meet at most two to a bank and its 16-byte loads
// (8 rows) not at all. The same residues, in the same layout, as residues_kernel over the copied
// rows.
constexpr int kColumnTileRows = 32;     // bt rows (B's columns) per block
constexpr int kColumnTileEntries = 64;  // entries of each, kResidueGroup per thread
constexpr int kColumnThreads = kColumnTileRows * kColumnTileEntries / kResidueGroup;

__device__ __forceinline__ int column_tile_slot(int row, int slot) {
  return row * kColumnTileEntries + (slot ^ ((row >> 1) & 7)) * 8;
}

template <int N, typename T>
__global__ void __launch_bounds__(kColumnThreads, 3)
    column_residues_kernel(const T* b, int64_t k, BtLayout layout, RowBlocks blocks,
                           int64_t k_stride, const int* scale, int8_t* out) {
  extern __shared__ __align__(16) uint8_t planes[];
  constexpr int kPlane = kColumnTileRows * kColumnTileEntries;
  const int r = threadIdx.x % kColumnTileRows, slot = threadIdx.x / kColumnTileRows;
  const int64_t l0 = int64_t(blockIdx.x) * kColumnTileEntries;
  const int64_t tiles = (blocks.count + kColumnTileRows - 1) / kColumnTileRows;
  for (int64_t e = blockIdx.z, column_tile = blockIdx.y; e < blocks.elements;) {
    const int64_t row = column_tile * kColumnTileRows + r;
    const bool in_rows = row < blocks.count;
    const int64_t g = in_rows ? blocks.row(e, row) : 0;
    const T* entries = b + layout.start(g, k);
    const int64_t step = layout.step();
    double x[kResidueGroup];
#pragma unroll
    for (int c = 0; c < kResidueGroup; ++c) {
      const int64_t l = l0 + slot * kResidueGroup + c;
      x[c] = in_rows && l < k ? static_cast<double>(entries[l * step]) : 0.0;
    }
    const RowScaler scaler = row_scaler<T>(in_rows ? scale[g] : 0);
    // Four entries at a time (a 4-byte store per modulus), which keeps three blocks resident.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const double four[4] = {x[4 * half], x[4 * half + 1], x[4 * half + 2], x[4 * half + 3]};
      weighted_residues_by_modulus<N>(four, scaler, [&](int i, const int8_t (&bytes)[4]) {
        *reinterpret_cast<uint32_t*>(planes + i * kPlane + column_tile_slot(r, slot) + 4 * half) =
            *reinterpret_cast<const uint32_t*>(bytes);
      });
    }
    __syncthreads();
    // Thread t stores 16 bytes (slots 2q, 2q + 1, q = t % 4) of tile row (t / 4) % 32 of planes
    // t / 128, + 2, ...
    const int out_row = (threadIdx.x / 4) % kColumnTileRows, pair = threadIdx.x % 4;
    const int64_t g_row = column_tile * kColumnTileRows + out_row;
    const int64_t l = l0 + pair * 16;
    if (g_row < blocks.count && l < k_stride) {
      int8_t* row_out = out + (e * N * blocks.count + g_row) * k_stride + l;
      const int swizzle = (out_row >> 1) & 7;
      const int at = out_row * kColumnTileEntries + ((2 * pair) ^ (swizzle & 6)) * 8;
#pragma unroll
      for (int i = threadIdx.x / (4 * kColumnTileRows); i < N;
           i += kColumnThreads / (4 * kColumnTileRows)) {
        uint4 bytes = *reinterpret_cast<const uint4*>(planes + i * kPlane + at);
        if (swizzle & 1) bytes = uint4{bytes.z, bytes.w, bytes.x, bytes.y};
        *reinterpret_cast<uint4*>(row_out + i * blocks.count * k_stride) = bytes;
      }
    }
    __syncthreads();  // the tile is read before the next tile's residues
    column_tile += gridDim.y;
    if (column_tile >= tiles) {
      column_tile = blockIdx.y;
      e += gridDim.z;
    }
  }
}

template <int N, typename T>
void launch_column_residues(const T* b, int64_t k, const BtLayout& layout, const RowBlocks& blocks,
                            int64_t k_stride, const int* scale, int8_t* out, cudaStream_t stream) {
  if (blocks.total() == 0) return;
  constexpr int kBytes = N * kColumnTileRows * kColumnTileEntries;
  static_assert(kBytes <= 48 * 1024, "the default dynamic shared memory limit");
  // Tiles along k go along grid x, so that consecutive blocks write the adjacent pieces of the
  // same rows of the planes (L2 merges them into whole lines); grid y (column tiles) and z
  // (elements): the kernel loops past them.
  constexpr int64_t kMaxGridSide = 65535;
  const dim3 grid(static_cast<unsigned>(ceil_div(k_stride, kColumnTileEntries)),
                  static_cast<unsigned>(std::min(ceil_div(blocks.count, kColumnTileRows),
                                                 kMaxGridSide)),
                  static_cast<unsigned>(std::min(blocks.elements, kMaxGridSide)));
  column_residues_kernel<N, T>
      <<<grid, kColumnThreads, kBytes, stream>>>(b, k, layout, blocks, k_stride, scale, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Entry (gi, gj) of the product (rows of the flattened a and bt) from the N INT32 residue sums of
// its exact integer (any representatives, see crt_reconstruct), rounded once; rows or columns with
// NaN/Inf get the IEEE answer.
// reduced: the results are residues in [0, p_i) already (the reduced GEMMs' bytes).
template <int N, bool reduced, typename T>
__device__ __forceinline__ T rounded_entry(const CrtOperands<T>& in, int64_t gi, int64_t gj,
                                           const int32_t (&residues)[N]) {
  if (in.nonfinite_a[gi] || in.nonfinite_b[gj]) {
    return static_cast<T>(nonfinite_dot(in.a + gi * in.k, in.bt + in.bt_layout.start(gj, in.k),
                                        in.k, in.bt_layout.step()));
  }
  return static_cast<T>(crt_reconstruct<N, reduced>(residues, row_scale(in.scale_a[gi]),
                                                    row_scale(in.scale_b[gj]), format_of<T>()));
}

// Entries per thread of the reconstruction: 4 consecutive columns, so each modulus's results come
// in one load (result rows are padded to kResultAlign = 4 entries, and so aligned).
constexpr int kReconstructColumns = 4;  // FourEntries and for_each_warp_tile
constexpr int kReconstructThreads = 256;

// The N results of each entry (e, i, j) rebuilt into the exact integer and rounded once; rows or
// columns with NaN/Inf get the IEEE answer. Modulus i's results of element e are the plane
// products + (e * N + i) * rows * ld: INT32 sums (P = int32_t) or reduced residues (uint8_t).
// Each warp takes tiles of 128 columns of a row (for_each_warp_tile, a 1-D grid), each lane four
// neighbouring columns, whose results come in one load per modulus; the warp then passes its 128
// values through shared memory so that each store writes 32 consecutive entries (four columns per
// lane stored directly would touch four times the sectors of L2). Reduced residues of up to
// kLoadedAheadModuli moduli (N 4-byte words per lane) are loaded a tile ahead, within 80
// registers (three blocks per multiprocessor): the next tile's loads overlap the current tile's
// arithmetic. INT32 sums (N 16-byte words) and 16 moduli (whose loads ahead would spill at 80
// registers) load in turn.
constexpr int kLoadedAheadModuli = 15;
template <int N, typename P>
constexpr bool kReconstructsAhead = std::is_same_v<P, uint8_t> && N <= kLoadedAheadModuli;
template <int N, typename P, typename T>
__global__ void __launch_bounds__(kReconstructThreads, kReconstructsAhead<N, P> ? 3 : 1)
    reconstruct_kernel(const P* products, int64_t ld, Chunk chunk, CrtOperands<T> in, T* out) {
  static_assert(kResultAlign % kReconstructColumns == 0);
  static_assert(kWarpTileColumns == 32 * kReconstructColumns);
  __shared__ T staged[kReconstructThreads / 32][kWarpTileColumns];
  T* const tile_values = staged[threadIdx.x / 32];
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t plane = chunk.rows * ld;
  const int64_t rows = chunk.elements * chunk.rows;
  const auto load = [&](int64_t row, int64_t j0) {
    const int64_t e = element_of(row, chunk.rows, chunk.elements);
    // lanes past the row's last group load that group again (unused)
    const int64_t loaded_j0 = j0 < ld ? j0 : ld - kReconstructColumns;
    return FourEntriesOf<N, P>(products + e * N * plane + (row - e * chunk.rows) * ld + loaded_j0,
                               plane);
  };
  const auto rebuild = [&](int64_t row, int64_t j0, const FourEntriesOf<N, P>& loaded) {
    const int64_t e = element_of(row, chunk.rows, chunk.elements);
    const int64_t i = row - e * chunk.rows;
    const int64_t gi = chunk.a_row(e, i);
#pragma unroll
    for (int c = 0; c < kReconstructColumns; ++c) {
      const int64_t j = j0 + c;
      if (j >= chunk.cols) break;
      int32_t residues[N];
      loaded.of_entry(c, residues);
      tile_values[kReconstructColumns * lane + c] =
          rounded_entry<N, std::is_same_v<P, uint8_t>>(in, gi, chunk.b_row(e, j), residues);
    }
    __syncwarp();
    const int64_t first = j0 - kReconstructColumns * lane;  // the tile's first column
#pragma unroll
    for (int c = 0; c < kReconstructColumns; ++c) {
      const int t = 32 * c + lane;
      if (first + t < chunk.cols) out[chunk.out_index(e, i, first + t)] = tile_values[t];
    }
    __syncwarp();  // the values are read before the next tile's are written
  };
  const int64_t tiles = (chunk.cols + kWarpTileColumns - 1) / kWarpTileColumns;
  for_each_warp_tile<kReconstructsAhead<N, P>>(rows, tiles, load, rebuild);
}

// The scale codes of bt's rows g0 .. g0 + 3, and in bit c of `nonfinite` whether row g0 + c holds
// NaN or Inf, for those below g0 + count (the others: code 0, bit clear): one 16-byte and one
// 4-byte load where both lie aligned.
struct FourColumns {
  int code[kReconstructColumns];
  uint32_t nonfinite;
};
__device__ __forceinline__ FourColumns four_columns(const int* scale, const bool* nonfinite,
                                                    int64_t g0, int64_t count) {
  static_assert(kReconstructColumns == 4);
  FourColumns columns{{0, 0, 0, 0}, 0};
  if (count >= 4 && reinterpret_cast<uintptr_t>(scale + g0) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(nonfinite + g0) % 4 == 0) {
    const int4 codes = __ldg(reinterpret_cast<const int4*>(scale + g0));
    const uint32_t flags = __ldg(reinterpret_cast<const unsigned int*>(nonfinite + g0));
    columns = {{codes.x, codes.y, codes.z, codes.w},
               ((flags & 0xffu) != 0 ? 1u : 0u) | ((flags & 0xff00u) != 0 ? 2u : 0u) |
                   ((flags & 0xff0000u) != 0 ? 4u : 0u) | ((flags >> 24) != 0 ? 8u : 0u)};
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (c < count) {
        columns.code[c] = scale[g0 + c];
        if (nonfinite[g0 + c]) columns.nonfinite |= 1u << c;
      }
    }
  }
  return columns;
}

// reconstruct_kernel for the reduced GEMMs' bytes, fed by the tensor memory accelerator: each
// block takes tiles of kPlaneTileRows rows x kWarpTileColumns columns of the chunk's elements in
// turn, and one 3-D tensor copy brings a tile's N planes into shared memory (kPlaneSlots slots,
// each completed on its mbarrier and refilled kPlaneSlots tiles ahead once every warp has read
// it and fenced its reads against the copy), so the loads stay in flight whatever the warps
// compute and hold no registers. Warp w
// rebuilds row w of the tile, each lane four neighbouring columns, with rounded_entry's
// arithmetic (the same bits): the row's scale and NaN/Inf flag are read once per tile, the four
// columns' in one load each. direct_stores (outputs whose groups of four lie 16-byte aligned):
// each lane stores its four values at once; otherwise the warp passes its 128 values through
// shared memory so that each store writes 32 consecutive entries. Copies past the chunk's rows
// (and the rows' padding) read zeros, left unused.
constexpr int kPlaneTileRows = kReconstructThreads / 32;
constexpr int kPlaneSlots = 2;

// Tile t of a chunk's reconstruction, t = (e * row_tiles + row_tile) * col_tiles + col_tile, kept
// as its digits and stepped by a fixed stride without dividing (the stride's digits added with a
// carry each: every digit of the stride is below its radix). 32-bit: launch_reconstruct_planes
// takes chunks of fewer than 2^29 tiles, so that a tile index plus two strides (each at most the
// tile count) stays below 2^31.
struct PlaneTile {
  int t, e, row_tile, col_tile;
};
constexpr int64_t kMaxPlaneTiles = int64_t(1) << 29;
struct PlaneTiles {
  int row_tiles, col_tiles;
  __device__ PlaneTile at(int t) const {
    const int per_element = row_tiles * col_tiles;
    const int e = t / per_element, rest = t - e * per_element;
    const int row_tile = rest / col_tiles;
    return PlaneTile{t, e, row_tile, rest - row_tile * col_tiles};
  }
  __device__ void advance(PlaneTile& tile, const PlaneTile& stride) const {
    tile.t += stride.t;
    tile.e += stride.e;
    tile.row_tile += stride.row_tile;
    tile.col_tile += stride.col_tile;
    if (tile.col_tile >= col_tiles) {
      tile.col_tile -= col_tiles;
      ++tile.row_tile;
    }
    if (tile.row_tile >= row_tiles) {
      tile.row_tile -= row_tiles;
      ++tile.e;
    }
  }
};
template <int N>
constexpr int kPlaneSlotBytes = N * kPlaneTileRows * kWarpTileColumns;
template <int N, typename T>
__global__ void __launch_bounds__(kReconstructThreads)
    reconstruct_planes_kernel(const __grid_constant__ CUtensorMap planes, Chunk chunk,
                              CrtOperands<T> in, T* out, bool direct_stores) {
  static_assert(kWarpTileColumns == 32 * kReconstructColumns);
  extern __shared__ __align__(128) uint8_t slots[];  // [kPlaneSlots][N][kPlaneTileRows][128]
  __shared__ __align__(8) uint64_t full[kPlaneSlots];
  __shared__ T staged[kPlaneTileRows][kWarpTileColumns];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  T* const tile_values = staged[warp];
  const PlaneTiles grid{static_cast<int>((chunk.rows + kPlaneTileRows - 1) / kPlaneTileRows),
                        static_cast<int>((chunk.cols + kWarpTileColumns - 1) / kWarpTileColumns)};
  const int tiles = static_cast<int>(chunk.elements) * grid.row_tiles * grid.col_tiles;
  const PlaneTile stride = grid.at(static_cast<int>(gridDim.x));
  const auto load = [&](int slot, const PlaneTile& tile) {
    copy_box_3d(slots + slot * kPlaneSlotBytes<N>, planes,
                static_cast<int>(tile.col_tile * kWarpTileColumns),
                static_cast<int>(tile.row_tile * kPlaneTileRows), static_cast<int>(tile.e * N),
                &full[slot], kPlaneSlotBytes<N>);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kPlaneSlots; ++s) barrier_init(&full[s]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int s = 0; s < kPlaneSlots; ++s) {
      const int t = static_cast<int>(blockIdx.x + s * gridDim.x);
      if (t < tiles) load(s, grid.at(t));
    }
  }
  int pass = 0;
  for (PlaneTile tile = grid.at(static_cast<int>(blockIdx.x)); tile.t < tiles;
       grid.advance(tile, stride), ++pass) {
    const int slot = pass % kPlaneSlots;
    barrier_wait(&full[slot], (pass / kPlaneSlots) & 1);
    uint32_t words[N];
    const uint8_t* mine = slots + slot * kPlaneSlotBytes<N> + warp * kWarpTileColumns +
                          kReconstructColumns * lane;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      words[i] = *reinterpret_cast<const uint32_t*>(mine + i * kPlaneTileRows * kWarpTileColumns);
    }
    fence_shared_before_copies();
    __syncthreads();  // every warp has read the slot: refill it, kPlaneSlots tiles ahead
    if (threadIdx.x == 0) {
      const int next = tile.t + kPlaneSlots * stride.t;
      if (next < tiles) load(slot, grid.at(next));
    }
    const int64_t e = tile.e, first = tile.col_tile * kWarpTileColumns;
    const int64_t i = tile.row_tile * kPlaneTileRows + warp;
    if (i >= chunk.rows) continue;
    const int64_t gi = chunk.a_row(e, i);
    const bool row_nonfinite = in.nonfinite_a[gi];
    const RowScale c_a = row_scale(in.scale_a[gi]);
    const int64_t j0 = first + kReconstructColumns * lane;
    const int64_t g0 = chunk.b_row(e, j0);
    const FourColumns columns = four_columns(in.scale_b, in.nonfinite_b, g0, chunk.cols - j0);
    T values[kReconstructColumns];
#pragma unroll
    for (int c = 0; c < kReconstructColumns; ++c) {
      int32_t residues[N];
#pragma unroll
      for (int m = 0; m < N; ++m) {
        residues[m] = static_cast<int32_t>(__byte_perm(words[m], 0, 0x4440 + c));
      }
      values[c] = static_cast<T>(crt_reconstruct<N, true>(residues, c_a, row_scale(columns.code[c]),
                                                          format_of<T>()));
    }
    if (direct_stores) {
      T* to = out + chunk.out_index(e, i, j0);
      if (j0 + kReconstructColumns <= chunk.cols) {
        if constexpr (sizeof(T) == 8) {
          reinterpret_cast<double2*>(to)[0] = make_double2(values[0], values[1]);
          reinterpret_cast<double2*>(to)[1] = make_double2(values[2], values[3]);
        } else {
          *reinterpret_cast<float4*>(to) = make_float4(values[0], values[1], values[2], values[3]);
        }
      } else {
#pragma unroll
        for (int c = 0; c < kReconstructColumns; ++c) {
          if (j0 + c < chunk.cols) to[c] = values[c];
        }
      }
    } else {
#pragma unroll
      for (int c = 0; c < kReconstructColumns; ++c) {
        tile_values[kReconstructColumns * lane + c] = values[c];
      }
      __syncwarp();
#pragma unroll
      for (int c = 0; c < kReconstructColumns; ++c) {
        const int v = 32 * c + lane;
        if (first + v < chunk.cols) out[chunk.out_index(e, i, first + v)] = tile_values[v];
      }
      __syncwarp();  // the values are stored (and read) before any lane patches or rewrites them
    }
    // Where the row or a column holds NaN or Inf, the IEEE answer overwrites the value stored
    // (rare; one loop, not unrolled, after the reconstruction's registers are free).
    const int64_t valid = chunk.cols - j0;
    const uint32_t in_chunk =
        valid >= kReconstructColumns ? 0xfu : (valid > 0 ? (1u << valid) - 1 : 0u);
    const uint32_t patched = (row_nonfinite ? 0xfu : columns.nonfinite) & in_chunk;
    if (patched != 0) {
#pragma unroll 1
      for (int c = 0; c < kReconstructColumns; ++c) {
        if ((patched >> c) & 1u) {
          out[chunk.out_index(e, i, j0 + c)] = static_cast<T>(
              nonfinite_dot(in.a + gi * in.k, in.bt + in.bt_layout.start(g0 + c, in.k), in.k,
                            in.bt_layout.step()));
        }
      }
    }
  }
}

// Launches reconstruct_planes_kernel on a chunk of reduced products (planes of rows of ld bytes,
// element e's modulus i at (e * N + i) * chunk.rows * ld); false, launching nothing, where their
// tensor map cannot be made or the chunk has kMaxPlaneTiles tiles or more (the caller then runs
// reconstruct_kernel: the same bits).
template <int N, typename T>
bool launch_reconstruct_planes(const uint8_t* products, int64_t ld, const Chunk& chunk,
                               const CrtOperands<T>& in, T* out, cudaStream_t stream) {
  CUtensorMap planes;
  const uint64_t dims[3] = {static_cast<uint64_t>(ld), static_cast<uint64_t>(chunk.rows),
                            static_cast<uint64_t>(chunk.elements * N)};
  const uint64_t strides[2] = {static_cast<uint64_t>(ld), static_cast<uint64_t>(chunk.rows * ld)};
  const uint32_t box[3] = {kWarpTileColumns, kPlaneTileRows, N};
  if (!encode_byte_map(&planes, products, dims, strides, box)) return false;
  constexpr auto kernel = reconstruct_planes_kernel<N, T>;
  constexpr int shared = kPlaneSlots * kPlaneSlotBytes<N>;
  static const int per_sm = [] {
    int blocks = 0;
    C10_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, reconstruct_planes_kernel<N, T>,
                                                      kReconstructThreads, shared));
    return std::max(blocks, 1);
  }();
  const int64_t tiles = chunk.elements * ceil_div(chunk.rows, kPlaneTileRows) *
                        ceil_div(chunk.cols, kWarpTileColumns);
  if (tiles >= kMaxPlaneTiles) return false;
  const int64_t resident =
      int64_t(per_sm) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const auto blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min(tiles, resident)));
  // each lane's four outputs 16-byte aligned: the output, its rows and the chunk's first column
  constexpr int64_t kVector = 16 / sizeof(T);
  const bool direct_stores = reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                             chunk.n % kVector == 0 && chunk.first_col % kVector == 0;
  note_writer<reconstruct_planes_kernel<N, T>>(3);
  kernel<<<blocks, kReconstructThreads, shared, stream>>>(planes, chunk, in, out, direct_stores);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

// Whether the reduced GEMMs' chunks follow the wave plan (csrc/tile_waves.h): OZAKI_TILE_WAVES
// unset, empty or 1; 0 chunks by the workspace alone (read at every call of the reduced path;
// never changes the bits).
inline bool tile_waves_enabled() {
  const char* value = std::getenv("OZAKI_TILE_WAVES");
  if (value == nullptr || *value == '\0') return true;
  const std::string given(value);
  TORCH_CHECK(given == "0" || given == "1", "OZAKI_TILE_WAVES must be 0 or 1, got '", given, "'");
  return given == "1";
}

// A chunk's INT8 residue buffers, launch_residues' layout: N planes of a_rows rows of A (none where
// the caller reads prepared residues instead) and of b_rows of B's columns, per element, k_stride
// bytes a row.
struct ChunkResidues {
  at::Tensor a, b;
  ChunkResidues(int64_t elements, int64_t N, int64_t a_rows, int64_t b_rows, int64_t k_stride,
                const at::TensorOptions& options)
      : a(at::empty({elements * N * a_rows * k_stride}, options.dtype(at::kChar))),
        b(at::empty({elements * N * b_rows * k_stride}, options.dtype(at::kChar))) {}
};

// The exact residue GEMMs of the product (or batch of products) for `moduli` moduli, chunk by
// chunk within the workspace budget: residues(data, blocks, out, weighted, stream) writes the
// residues of rows `blocks` of in.a or in.bt (weighted: bt's) as launch_residues lays them out;
// finish(products, ld, chunk, stream) consumes each chunk's results (modulus i's of element e in
// the plane products + (e * moduli + i) * chunk.rows * ld, row r at + r * ld) before the next
// chunk's GEMMs overwrite them on the same stream. prepared_a: a's residues of every element
// (crt_left_residues' layout), read instead of computed; nullptr computes them. reduced_moduli:
// the moduli's values, for one reduced GEMM launch per chunk (reduced_gemm.cuh) whose results are
// bytes (products a const uint8_t*); nullptr: one cuBLAS INT8 GEMM per modulus, INT32 results.
template <typename T, typename Residues, typename Finish>
void residue_product_chunks(const CrtOperands<T>& in, const ProductShape& product, int moduli,
                            int64_t budget, const at::TensorOptions& options, Residues residues,
                            Finish finish, int64_t min_columns = kMinColumns,
                            const int8_t* prepared_a = nullptr,
                            const int* reduced_moduli = nullptr) {
  const int64_t batch = product.batch, m = product.m, n = product.n;
  const int64_t N = moduli;
  const int64_t k_stride = round_up(in.k, kInnerAlign);
  // Finish accepts reduced products only where the caller can pass reduced_moduli.
  constexpr bool kTakesReduced =
      std::is_invocable_v<Finish, const uint8_t*, int64_t, const Chunk&, cudaStream_t>;
  const bool reduced = kTakesReduced && reduced_moduli != nullptr;
  const int64_t product_bytes = reduced ? 1 : 4;
  // Reduced rows 16-byte aligned: TMA stores the reduced GEMMs' tiles (16-byte strides).
  const int64_t result_align = reduced ? kReducedResultAlign : kResultAlign;
  const WorkspaceShape shape{k_stride, moduli, N, 1, product_bytes, result_align};
  BatchChunkPlan plan =
      plan_batch_chunks(batch, m, n, shape, budget, /*keep_rows=*/true, min_columns);
  // cuBLAS takes int sizes.
  constexpr int64_t kMaxSide = int64_t(1) << 30;
  if (plan.within.rows > kMaxSide || plan.within.cols > kMaxSide) {
    plan = BatchChunkPlan{1, ChunkPlan{std::min(plan.within.rows, kMaxSide),
                                       std::min(plan.within.cols, kMaxSide)}};
  }
  const int64_t chunk_elements = plan.elements, chunk_rows = plan.within.rows;
  const bool single_row_chunk = chunk_rows >= m;
  // Rows per GEMM launch: a row chunk's, or, where the reduced GEMMs take A's residues whole in
  // column chunks, those of the wave plan (csrc/tile_waves.h) with its chunk width.
  int64_t chunk_cols = plan.within.cols, launch_rows = chunk_rows;
  const bool wave_plan = reduced && tile_waves_enabled();
  if (wave_plan && chunk_elements == 1 && single_row_chunk && chunk_cols < n &&
      chunk_cols >= kWideTileColumns) {
    const TileWaves waves{N, kWideTileRows, kWideTileColumns, kWideTileRows * kWideClusterRows,
                          at::cuda::getCurrentDeviceProperties()->multiProcessorCount, k_stride};
    const WavePlan wave =
        plan_tile_waves(waves, m, n, WavePlan{chunk_cols, m}, budget,
                        [&](int64_t rows, int64_t cols) { return shape.bytes_for(m, rows, cols); });
    chunk_cols = wave.cols;
    launch_rows = wave.rows;
  }
  const int64_t ld = round_up(chunk_cols, result_align);
  const bool compute_a = prepared_a == nullptr;
  ChunkResidues buffers(chunk_elements, N, compute_a ? chunk_rows : 0, chunk_cols, k_stride,
                        options);
  at::Tensor products = at::empty({chunk_elements * N * launch_rows * ld * product_bytes},
                                  options.dtype(at::kByte));
  int8_t* a_res = buffers.a.mutable_data_ptr<int8_t>();
  int8_t* b_res = buffers.b.mutable_data_ptr<int8_t>();
  void* product_data = products.mutable_data_ptr();
  ReducedGemm reduced_gemm{};
  if (reduced) {
    reduced_gemm.moduli = moduli;
    for (int i = 0; i < moduli; ++i) {
      reduced_gemm.divisors[i] =
          ModulusDivisor::of(static_cast<uint32_t>(reduced_moduli[i]), k_stride);
    }
  }
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  const bool a_whole = single_row_chunk || !compute_a;  // A's residues of all m rows at hand
  for (int64_t e0 = 0; e0 < batch; e0 += chunk_elements) {
    const int64_t elements = std::min(chunk_elements, batch - e0);
    if (compute_a && single_row_chunk) {
      residues(in.a, RowBlocks{e0 * m, m, elements, m}, a_res, false, stream);
    }
    for (int64_t j0 = 0; j0 < n; j0 += chunk_cols) {
      const int64_t cols = std::min(chunk_cols, n - j0);
      residues(in.bt, RowBlocks{e0 * n + j0, cols, elements, n}, b_res, true, stream);
      for (int64_t i0 = 0; i0 < m; i0 += launch_rows) {
        const int64_t rows = std::min(launch_rows, m - i0);
        if (compute_a && !single_row_chunk) {
          residues(in.a, RowBlocks{e0 * m + i0, rows, elements, m}, a_res, false, stream);
        }
        // The chunk's residues of a: modulus planes of `rows` rows computed just now, or rows
        // i0.. of the m rows of all of A's (computed once, or prepared).
        const int8_t* whole_a = compute_a ? a_res : prepared_a + e0 * N * m * k_stride;
        const int8_t* a_chunk = a_whole ? whole_a + i0 * k_stride : a_res;
        const int64_t a_plane = (a_whole ? m : rows) * k_stride;
        // Element e's residues and results of every modulus follow element e - 1's.
        const Chunk chunk{e0, elements, i0, rows, j0, cols, m, n};
        if constexpr (kTakesReduced) {
          if (reduced) {
            ReducedGemm& g = reduced_gemm;
            g.a = a_chunk;
            g.a_plane = a_plane;
            g.b = b_res;
            g.b_plane = cols * k_stride;
            g.out = static_cast<uint8_t*>(product_data);
            g.out_plane = rows * ld;
            g.ld = ld;
            g.rows = rows;
            g.cols = cols;
            g.k_stride = k_stride;
            g.planes = elements * N;
            reduced_residue_gemms(g, stream);
            finish(static_cast<const uint8_t*>(product_data), ld, chunk, stream);
            continue;
          }
        }
        // One cuBLAS call per modulus: a single strided-batched call over the moduli is slower
        // (docs/benchmarks.md).
        int32_t* sums = static_cast<int32_t*>(product_data);
        const GemmBatch per_element{elements, N * cols * k_stride, N * a_plane, N * rows * ld};
        for (int64_t i = 0; i < N; ++i) {
          exact_int8_gemm_batched(handle, b_res + i * cols * k_stride, a_chunk + i * a_plane,
                                  cols, rows, k_stride, sums + i * rows * ld, ld, per_element);
        }
        finish(static_cast<const int32_t*>(sums), ld, chunk, stream);
      }
    }
  }
}

// residue_product_chunks' residues for scheme II with N moduli and the rows' scale codes.
template <int N, typename T>
auto truncated_residues(const CrtOperands<T>& in) {
  const int64_t k_stride = round_up(in.k, kInnerAlign);
  return [=](const T* data, const RowBlocks& blocks, int8_t* out, bool weighted,
             cudaStream_t stream) {
    if (weighted && in.bt_layout.columns()) {
      launch_column_residues<N>(data, in.k, in.bt_layout, blocks, k_stride, in.scale_b, out,
                                stream);
    } else if (weighted) {
      launch_residues<N, true>(data, in.k, blocks, k_stride, in.scale_b, out, stream);
    } else {
      launch_residues<N, false>(data, in.k, blocks, k_stride, in.scale_a, out, stream);
    }
  };
}

// gemm_crt's chunks: each rebuilt and rounded into out (prepared_a: residue_product_chunks';
// reduced: its GEMMs are the reduced ones).
template <int N, typename T>
void gemm_crt_chunks(const CrtOperands<T>& in, const ProductShape& product, int64_t budget, T* out,
                     const at::TensorOptions& options, const int8_t* prepared_a, bool reduced) {
  const auto round_chunk = [&](const auto* products, int64_t ld, const Chunk& chunk,
                               cudaStream_t stream) {
    using P = std::remove_cv_t<std::remove_pointer_t<decltype(products)>>;
    if constexpr (std::is_same_v<P, uint8_t>) {
      if (launch_reconstruct_planes<N, T>(products, ld, chunk, in, out, stream)) return;
    }
    const int64_t tiles = ceil_div(chunk.cols, kWarpTileColumns);
    const int blocks = grid_for(chunk.elements * chunk.rows * tiles * 32, kReconstructThreads);
    note_writer<reconstruct_kernel<N, P, T>>(4);
    reconstruct_kernel<N, P, T>
        <<<blocks, kReconstructThreads, 0, stream>>>(products, ld, chunk, in, out);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  residue_product_chunks(in, product, N, budget, options, truncated_residues<N>(in), round_chunk,
                         reduced ? kReducedMinColumns : kMinColumns, prepared_a,
                         reduced ? kModuli : nullptr);
}

// ---- gemm_crt, fused path ------------------------------------------------------------------------

// One block per tile of each element of the chunk (column tiles along grid x, row tiles along y
// and elements along z, looping past the grid's limits): the residue products kept on chip
// (crt_fused.cuh), then each entry rebuilt and rounded as reconstruct_kernel does.
template <int N, typename Tile, typename T>
__global__ void __launch_bounds__(Tile::kThreads)
    fused_crt_kernel(ResidueRows a_residues, ResidueRows b_residues, int64_t k_stride, Chunk chunk,
                     CrtOperands<T> in, T* out) {
  extern __shared__ __align__(128) uint8_t shared[];
  constexpr int Rows = Tile::kRows, Cols = Tile::kCols;
  const int64_t col0 = int64_t(blockIdx.x) * Cols;
  const int64_t row_tiles = (chunk.rows + Rows - 1) / Rows;
  for (int64_t e = blockIdx.z; e < chunk.elements; e += gridDim.z) {
    for (int64_t row_tile = blockIdx.y; row_tile < row_tiles; row_tile += gridDim.y) {
      const int64_t row0 = row_tile * Rows;
      const uint8_t* kept =
          fused_residue_tile<N, Tile>(a_residues, b_residues, k_stride, e, row0, col0, shared);
      for (int t = threadIdx.x; t < Rows * Cols; t += Tile::kThreads) {
        const int r = t / Cols, c = t % Cols;
        if (row0 + r >= chunk.rows || col0 + c >= chunk.cols) continue;
        int32_t residues[N];
#pragma unroll
        for (int i = 0; i < N; ++i) residues[i] = kept[int64_t(i) * Rows * Cols + t];
        out[chunk.out_index(e, row0 + r, col0 + c)] =
            rounded_entry<N, true>(in, chunk.a_row(e, row0 + r), chunk.b_row(e, col0 + c),
                                   residues);
      }
      __syncthreads();  // the kept residues are read before the next tile's products
    }
  }
}

template <int N, typename Tile, typename T>
void launch_fused_crt(const ResidueRows& a_residues, const ResidueRows& b_residues,
                      int64_t k_stride, const Chunk& chunk, const CrtOperands<T>& in, T* out,
                      cudaStream_t stream) {
  const auto kernel = fused_crt_kernel<N, Tile, T>;
  note_writer<fused_crt_kernel<N, Tile, T>>(5);
  const int64_t bytes = Tile::shared_bytes(N);
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  constexpr int64_t kMaxGridSide = 65535;  // grid y and z; the kernel loops past them
  const dim3 grid(static_cast<unsigned>(ceil_div(chunk.cols, Tile::kCols)),
                  static_cast<unsigned>(std::min(ceil_div(chunk.rows, Tile::kRows), kMaxGridSide)),
                  static_cast<unsigned>(std::min(chunk.elements, kMaxGridSide)));
  kernel<<<grid, Tile::kThreads, bytes, stream>>>(a_residues, b_residues, k_stride, chunk, in, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The fused path keeps only the residues in the workspace (no INT32 products), chunk by chunk
// within this budget by default.
constexpr int64_t kDefaultFusedWorkspaceBytes = int64_t(4) << 30;

// The fused path's tile: 128 x 64 outputs, 8 warps of 32 x 32, 128-byte k stages, 3 buffers
// (the fastest of the shapes scripts/probes/fused_tiles.cu compares).
using CrtTile = FusedTile<128, 64>;

// gemm_crt on the fused path: per chunk, the residues of its rows of A (unless prepared_a holds
// them, in crt_left_residues' layout) and columns of B (once per element group when one chunk
// holds all of B's columns), then one fused kernel that writes the chunk's entries of out.
template <int N, typename T>
void gemm_crt_fused_chunks(const CrtOperands<T>& in, const ProductShape& product, int64_t budget,
                           T* out, const at::TensorOptions& options, const int8_t* prepared_a) {
  const int64_t batch = product.batch, m = product.m, n = product.n;
  const int64_t k_stride = round_up(in.k, kInnerAlign);
  const WorkspaceShape shape{k_stride, N, 0, 1, 0, 1};
  const BatchChunkPlan plan = plan_batch_chunks(batch, m, n, shape, budget);
  const int64_t chunk_elements = plan.elements, chunk_rows = plan.within.rows;
  const int64_t chunk_cols = plan.within.cols;
  const bool compute_a = prepared_a == nullptr;
  ChunkResidues buffers(chunk_elements, N, compute_a ? chunk_rows : 0, chunk_cols, k_stride,
                        options);
  int8_t* a_res = buffers.a.mutable_data_ptr<int8_t>();
  int8_t* b_res = buffers.b.mutable_data_ptr<int8_t>();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const auto residues = truncated_residues<N>(in);
  const bool whole_b = chunk_cols >= n;
  for (int64_t e0 = 0; e0 < batch; e0 += chunk_elements) {
    const int64_t elements = std::min(chunk_elements, batch - e0);
    if (whole_b) residues(in.bt, RowBlocks{e0 * n, n, elements, n}, b_res, true, stream);
    for (int64_t i0 = 0; i0 < m; i0 += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, m - i0);
      if (compute_a) {
        residues(in.a, RowBlocks{e0 * m + i0, rows, elements, m}, a_res, false, stream);
      }
      const ResidueRows a_chunk =
          compute_a ? ResidueRows{a_res, rows, rows}
                    : ResidueRows{prepared_a + (e0 * N * m + i0) * k_stride, rows, m};
      for (int64_t j0 = 0; j0 < n; j0 += chunk_cols) {
        const int64_t cols = std::min(chunk_cols, n - j0);
        if (!whole_b) {
          residues(in.bt, RowBlocks{e0 * n + j0, cols, elements, n}, b_res, true, stream);
        }
        const Chunk chunk{e0, elements, i0, rows, j0, cols, m, n};
        launch_fused_crt<N, CrtTile>(a_chunk, ResidueRows{b_res, cols, cols}, k_stride, chunk, in,
                                     out, stream);
      }
    }
  }
}

// The reduced GEMMs' products take a byte per entry and modulus: within this budget by default,
// the 16384^3 product with 15 moduli stays below 6 GiB beyond A and B, its result included.
constexpr int64_t kDefaultReducedWorkspaceBytes = int64_t(4) << 30;

// How gemm_crt computes the residue products (docs/algorithm.md, "Scheme II paths").
enum class CrtPath { cublas, fused, reduced };

// Whether the fused kernel's shared memory for `moduli` moduli fits a block of the current device
// (Hopper's 227 KiB hold its 16; an A100's 163 KiB 11, sm_86/89's 99 KiB 3).
inline bool fused_fits(int64_t moduli) {
  return CrtTile::shared_bytes(static_cast<int>(moduli)) <=
         static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin);
}

// OZAKI_CRT_PATH = cublas, fused or reduced (read at every call), else the rule, by what
// measured fastest on the H100 (docs/algorithm.md, "Scheme II paths"): the reduced GEMMs wherever
// this build and device have them (from 1024^3 to 16384^3, skinny and k = 1024 products alike,
// within about 10% of the fastest path or faster, in a half to a third of the cuBLAS path's
// memory); else the fused kernel up to 2^31 multiply-adds per element (about 1290^3; exact scheme
// II has no fused kernel) where its shared memory fits a block, cuBLAS beyond.
inline CrtPath crt_path(int64_t m, int64_t n, int64_t k, int64_t moduli, bool exact) {
  const char* value = std::getenv("OZAKI_CRT_PATH");
  if (value != nullptr && *value != 0) {
    const std::string path(value);
    TORCH_CHECK(path == "cublas" || path == "fused" || path == "reduced",
                "OZAKI_CRT_PATH must be cublas, fused or reduced, got '", path, "'");
    TORCH_CHECK(path != "reduced" || reduced_gemm_available(),
                "OZAKI_CRT_PATH=reduced, but this build or device has no reduced residue GEMM ",
                "(built for sm_90a with the CUTLASS headers, run on compute capability 9.0)");
    if (path == "fused" && exact) return CrtPath::cublas;  // exact scheme II has no fused kernel
    TORCH_CHECK(path != "fused" || fused_fits(moduli), "OZAKI_CRT_PATH=fused, but the fused "
                "kernel's ", CrtTile::shared_bytes(static_cast<int>(moduli)), " bytes of shared "
                "memory for ", moduli, " moduli exceed this device's ",
                at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin, " per block");
    return path == "cublas" ? CrtPath::cublas
                            : (path == "fused" ? CrtPath::fused : CrtPath::reduced);
  }
  if (reduced_gemm_available()) return CrtPath::reduced;
  constexpr double kFusedUpTo = 2147483648.0;  // 2^31
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (!exact && work <= kFusedUpTo && fused_fits(moduli)) return CrtPath::fused;
  return CrtPath::cublas;
}

// What gemm_crt and gemm_crt_exact share: the arguments checked (as check_crt_product_arguments,
// and all on a's device), a's device made current, the result allocated (zeros when the product is
// empty, which leaves nothing to do), then run(call, in, out) once with the operands as the kernels
// read them and the result's data, in the operands' type.
struct CrtCall {
  CrtProductArguments args;
  CrtPath path;
};
template <typename Run>
at::Tensor crt_product(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& scale_a,
                       const at::Tensor& scale_b, const at::Tensor& nonfinite_a,
                       const at::Tensor& nonfinite_b, int64_t moduli,
                       const std::optional<at::Tensor>& residues_a, bool exact, const char* op,
                       Run run, bool bt_columns = false) {
  const CrtProductArguments args = check_crt_product_arguments(
      a, bt, scale_a, scale_b, nonfinite_a, nonfinite_b, moduli, residues_a, exact, op,
      bt_columns);
  check_same_device(a, {&bt, &scale_a, &scale_b, &nonfinite_a, &nonfinite_b}, op);
  const c10::cuda::CUDAGuard guard(a.device());
  const std::vector<int64_t> sizes = args.shape.out_sizes();
  if (args.empty) return at::zeros(sizes, a.options());
  at::Tensor out = at::empty(sizes, a.options());
  const CrtCall call{args, crt_path(args.shape.m, args.shape.n, args.shape.k, moduli, exact)};
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "ozaki::crt_product", [&] {
    const CrtOperands<scalar_t> in{a.const_data_ptr<scalar_t>(),    bt.const_data_ptr<scalar_t>(),
                                   a.size(-1),                      scale_a.const_data_ptr<int>(),
                                   scale_b.const_data_ptr<int>(),   nonfinite_a.const_data_ptr<bool>(),
                                   nonfinite_b.const_data_ptr<bool>(), bt_layout_of(bt)};
    run(call, in, out.mutable_data_ptr<scalar_t>());
  });
  return out;
}

}  // namespace

at::Tensor gemm_crt(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& scale_a,
                    const at::Tensor& scale_b, const at::Tensor& nonfinite_a,
                    const at::Tensor& nonfinite_b, int64_t moduli, int64_t workspace_bytes,
                    const std::optional<at::Tensor>& residues_a) {
  return crt_product(
      a, bt, scale_a, scale_b, nonfinite_a, nonfinite_b, moduli, residues_a, /*exact=*/false,
      "ozaki::gemm_crt", [&](const CrtCall& call, const auto& in, auto* result) {
        using T = std::remove_pointer_t<decltype(result)>;
        const CrtPath path = call.path;
        const int64_t budget =
            workspace_bytes > 0
                ? workspace_bytes
                : (path == CrtPath::fused
                       ? kDefaultFusedWorkspaceBytes
                       : (path == CrtPath::reduced ? kDefaultReducedWorkspaceBytes
                                                   : kDefaultWorkspaceBytes));
        const int8_t* prepared_a = call.args.prepared_a.data;
        with_moduli_count(static_cast<int>(moduli), [&](auto count) {
          constexpr int N = decltype(count)::value;
          if (path == CrtPath::fused) {
            gemm_crt_fused_chunks<N, T>(in, call.args.shape, budget, result, a.options(),
                                        prepared_a);
          } else {
            gemm_crt_chunks<N, T>(in, call.args.shape, budget, result, a.options(), prepared_a,
                                  path == CrtPath::reduced);
          }
        });
      },
      /*bt_columns=*/true);
}

namespace {

// ---- gemm_crt_exact --------------------------------------------------------------------------

// The tables of exact_table_entry: A's (unweighted) at table, B's at table + entries.
__global__ void exact_table_kernel(ExactCrt crt, uint8_t* table) {
  const int entries = exact_table_bytes(crt.moduli);
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < 2 * entries; t += gridDim.x * blockDim.x) {
    table[t] = exact_table_entry(crt, t >= entries, t % entries);
  }
}

// signed_power for shifts past the table (rows the planner does not send to exact scheme II, or
// finite entries of rows holding NaN/Inf): out of line, so the hot loop stays small.
__device__ __noinline__ uint32_t power_past_the_table(int s, bool negative, bool weighted,
                                                      ExactModulus modulus) {
  return signed_power(s, negative, weighted, modulus);
}

// Moduli counts up to this get their moduli as compile-time constants in exact_residues_kernel
// (faster alone and in the product: docs/benchmarks.md, "Exact and wide scheme II"); larger counts
// keep a run-time loop, whose body stays small.
constexpr int kExactFixedModuli = 24;

// residues_kernel for exact scheme II: rows scaled by 2^exponent. N > 0: N moduli known at compile
// time, every modulus unrolled and its remainders by immediates (exact_residue_of), in few enough
// registers for three blocks per multiprocessor; N = 0: crt.moduli at run time, one modulus per
// iteration (an unrolled body of every modulus outgrew the instruction cache), its constants read
// from the parameter bank by index. Each block first copies its table of signed powers
// (+-W 2^s) mod p into shared memory, one byte each. The same residues either way. Blocks of grid
// z take the moduli [z per_slice, (z + 1) per_slice) (exact_residue_slice: operands of few rows
// would otherwise leave most of the GPU idle while each thread works through every modulus).
template <int N, typename T>
__global__ void __launch_bounds__(kResidueThreads, N > 0 ? 3 : 1)
    exact_residues_kernel(const T* a, int64_t k, RowBlocks blocks, int64_t k_stride,
                          const int* exponent, ExactCrt crt, const uint8_t* table, bool weighted,
                          bool aligned, int per_slice, int8_t* out) {
  constexpr int kWords = exact_table_bytes(N > 0 ? N : kExactMaxModuli) / 4;
  __shared__ uint32_t table_words[kWords];
  const int moduli = N > 0 ? N : crt.moduli;
  const int first = static_cast<int>(blockIdx.z) * per_slice;
  const int last = min(first + per_slice, moduli);
  for (int t = threadIdx.y * blockDim.x + threadIdx.x; t < exact_table_bytes(moduli) / 4;
       t += blockDim.x * blockDim.y) {
    table_words[t] = reinterpret_cast<const uint32_t*>(table)[t];
  }
  __syncthreads();
  const uint8_t* powers = reinterpret_cast<const uint8_t*>(table_words);
  struct Row {
    int exponent;
    const T* entries;
  };
  const auto row_state = [&](int64_t row) {
    return Row{exact_scale_exponent(exponent[row]), a + row * k};
  };
  for_each_residue_group(blocks, k_stride, moduli, out, row_state, [&](const Row& row,
                                                                       int8_t* row_out, int64_t l0) {
    double x[kResidueGroup];
    if (aligned) {
      load_entry_group<true>(row.entries, l0, k, x);
    } else {
      load_entry_group<false>(row.entries, l0, k, x);
    }
    ExactEntry parts[kResidueGroup];
    int first_power[kResidueGroup];  // the entry's table index for modulus 0
#pragma unroll
    for (int c = 0; c < kResidueGroup; ++c) {
      parts[c] = exact_entry(x[c], row.exponent);
      first_power[c] = exact_table_index(moduli, parts[c].negative, 0,
                                         parts[c].s < kExactTableShifts ? parts[c].s : 0);
    }
    // modulus i's residues of the group, through remainder(part, power) = W x mod p
    const auto write_modulus = [&](int i, auto remainder) {
      __align__(8) int8_t residues[kResidueGroup];
#pragma unroll
      for (int c = 0; c < kResidueGroup; ++c) {
        const int s = parts[c].s;
        const uint32_t power =
            s < kExactTableShifts
                ? powers[first_power[c] + i * kExactTableShifts]
                : power_past_the_table(s, parts[c].negative, weighted, crt.modulus[i]);
        residues[c] = static_cast<int8_t>(remainder(parts[c], power));
      }
      *reinterpret_cast<uint2*>(row_out + i * blocks.count * k_stride + l0) =
          *reinterpret_cast<const uint2*>(residues);
    };
    if constexpr (N > 0) {
      for_each_modulus<N>([&](auto index) {
        constexpr int i = decltype(index)::value;
        if (i < first || i >= last) return;
        write_modulus(i, [](const ExactEntry& x, uint32_t power) {
          return exact_residue_of<i>(x, power);
        });
      });
    } else {
#pragma unroll 1
      for (int i = first; i < last; ++i) {
        const ExactModulus modulus = crt.modulus[i];
        write_modulus(i, [&](const ExactEntry& x, uint32_t power) {
          return exact_residue(x, power, modulus);
        });
      }
    }
  });
}

// Moduli per thread of exact_residues_kernel for `threads` threads of groups (one per group of
// kResidueGroup entries): all of them where those threads fill the GPU, else as few as give about
// a thousand threads per multiprocessor (the right-hand sides of a skinny product: 16 columns of
// 6000 entries are 12000 threads, each through 18 moduli one after another).
inline int exact_residue_slice(int64_t threads, int moduli) {
  const int64_t wanted = int64_t(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 1024;
  const int64_t slices = std::clamp<int64_t>(wanted / std::max<int64_t>(threads, 1), 1, moduli);
  return static_cast<int>((moduli + slices - 1) / slices);
}

// residue_product_chunks' residues for exact scheme II (tables: exact_table_kernel's).
template <typename T>
auto exact_residues(const CrtOperands<T>& in, const ExactCrt& crt, const uint8_t* tables) {
  const int64_t k_stride = round_up(in.k, kInnerAlign);
  return [=](const T* data, const RowBlocks& blocks, int8_t* out, bool weighted,
             cudaStream_t stream) {
    if (blocks.total() == 0) return;
    const int64_t groups = k_stride / kResidueGroup;
    RowLaunch launch = row_launch(blocks.total(), groups, kResidueThreads);
    const int per_slice = exact_residue_slice(blocks.total() * groups, crt.moduli);
    launch.grid.z = static_cast<unsigned>((crt.moduli + per_slice - 1) / per_slice);
    const bool aligned = entry_groups_aligned(data, in.k);
    const int* exponent = weighted ? in.scale_b : in.scale_a;
    const uint8_t* table = tables + (weighted ? exact_table_bytes(crt.moduli) : 0);
    if (crt.moduli <= kExactFixedModuli) {
      with_constant<1, kExactFixedModuli>(crt.moduli, [&](auto count) {
        constexpr int N = decltype(count)::value;
        exact_residues_kernel<N, T><<<launch.grid, launch.block, 0, stream>>>(
            data, in.k, blocks, k_stride, exponent, crt, table, weighted, aligned, per_slice,
            out);
      });
    } else {
      exact_residues_kernel<0, T><<<launch.grid, launch.block, 0, stream>>>(
          data, in.k, blocks, k_stride, exponent, crt, table, weighted, aligned, per_slice, out);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
}

// exact_residues' tables on the current stream: A's, then B's.
at::Tensor exact_tables(const ExactCrt& crt, const at::TensorOptions& options) {
  at::Tensor tables = at::empty({2 * exact_table_bytes(crt.moduli)}, options.dtype(at::kByte));
  exact_table_kernel<<<grid_for(tables.numel(), 256), 256, 0,
                       at::cuda::getCurrentCUDAStream()>>>(crt, tables.mutable_data_ptr<uint8_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return tables;
}

// reconstruct_kernel for exact scheme II: two consecutive columns per thread (one 8-byte load per
// modulus; the per-modulus constants read once for both), the (row, column pair) items of the
// chunk numbered flat so every thread has work whatever the chunk's width, and registers capped
// so that three blocks share a multiprocessor (latency hiding). in.scale_a and in.scale_b hold
// the rows' exponents. Two groups of moduli at a time, their loads issued before any is used.
constexpr int kExactColumns = 2;

// One modulus's products of two neighbouring entries: INT32 sums (one 8-byte load) or reduced
// residues (one 2-byte load).
__device__ __forceinline__ int2 load_entry_pair(const int32_t* first) {
  return __ldg(reinterpret_cast<const int2*>(first));
}
__device__ __forceinline__ int2 load_entry_pair(const uint8_t* first) {
  const unsigned pair = __ldg(reinterpret_cast<const unsigned short*>(first));
  return make_int2(static_cast<int>(pair & 255u), static_cast<int>(pair >> 8));
}

template <int L, typename P, typename T>
__global__ void __launch_bounds__(kReconstructThreads, 3)
    exact_reconstruct_kernel(const P* products, int64_t ld, Chunk chunk, CrtOperands<T> in,
                             ExactCrt crt, T* out) {
  static_assert(kResultAlign % kExactColumns == 0 && kExactGroupSize == 3);
  constexpr int kGroupBatch = 2;  // groups whose loads are issued together
  const int64_t plane = chunk.rows * ld;
  const int64_t pairs = ld / kExactColumns;  // column pairs per row
  const int64_t items = chunk.elements * chunk.rows * pairs;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < items;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = t / pairs;
    const int64_t j0 = (t - row * pairs) * kExactColumns;
    const int64_t e = element_of(row, chunk.rows, chunk.elements);
    const int64_t i = row - e * chunk.rows;
    const P* entry = products + e * crt.moduli * plane + i * ld + j0;
    ExactSum<L> sums[kExactColumns];
#pragma unroll
    for (int c = 0; c < kExactColumns; ++c) sums[c].clear();
    for (int g0 = 0; g0 < crt.groups; g0 += kGroupBatch) {
      int2 loaded[kGroupBatch][kExactGroupSize];
#pragma unroll
      for (int b = 0; b < kGroupBatch; ++b) {
#pragma unroll
        for (int r = 0; r < kExactGroupSize; ++r) {
          const int modulus = (g0 + b) * kExactGroupSize + r;
          loaded[b][r] =
              modulus < crt.moduli ? load_entry_pair(entry + modulus * plane) : make_int2(0, 0);
        }
      }
#pragma unroll
      for (int b = 0; b < kGroupBatch; ++b) {
        if (g0 + b < crt.groups) {
          const int2* q = loaded[b];
          constexpr bool reduced = std::is_same_v<P, uint8_t>;
          sums[0].template add_group<reduced>(crt, g0 + b, {q[0].x, q[1].x, q[2].x});
          sums[1].template add_group<reduced>(crt, g0 + b, {q[0].y, q[1].y, q[2].y});
        }
      }
    }
    const int64_t gi = chunk.a_row(e, i);
    const int64_t exponent_a = in.scale_a[gi];
#pragma unroll
    for (int c = 0; c < kExactColumns; ++c) {
      const int64_t j = j0 + c;
      if (j >= chunk.cols) break;
      const int64_t gj = chunk.b_row(e, j);
      const double value =
          in.nonfinite_a[gi] || in.nonfinite_b[gj]
              ? nonfinite_dot(in.a + gi * in.k, in.bt + gj * in.k, in.k)
              : sums[c].rounded(crt, -(exponent_a + in.scale_b[gj]), format_of<T>());
      out[chunk.out_index(e, i, j)] = static_cast<T>(value);
    }
  }
}

}  // namespace

at::Tensor gemm_crt_exact(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& exponent_a,
                          const at::Tensor& exponent_b, const at::Tensor& nonfinite_a,
                          const at::Tensor& nonfinite_b, int64_t moduli, int64_t workspace_bytes,
                          const std::optional<at::Tensor>& residues_a) {
  const auto run = [&](const CrtCall& call, const auto& in, auto* out_data) {
    using T = std::remove_pointer_t<decltype(out_data)>;
    // Exact scheme II's moduli (up to 40) take the exact budget on either path, so that A's
    // residues are computed once.
    const int64_t budget = workspace_bytes > 0 ? workspace_bytes : kDefaultExactWorkspaceBytes;
    const bool reduced = call.path == CrtPath::reduced;
    const ExactCrt crt = exact_crt(static_cast<int>(moduli));
    const at::Tensor tables = exact_tables(crt, a.options());
    const uint8_t* table_data = tables.const_data_ptr<uint8_t>();
    const auto round_chunk = [&](const auto* products, int64_t ld, const Chunk& chunk,
                                 cudaStream_t chunk_stream) {
      using P = std::remove_cv_t<std::remove_pointer_t<decltype(products)>>;
      const int blocks =
          grid_for(chunk.elements * chunk.rows * (ld / kExactColumns), kReconstructThreads);
      with_limb_count(crt, [&](auto limbs) {
        note_writer<exact_reconstruct_kernel<decltype(limbs)::value, P, T>>(5);
        exact_reconstruct_kernel<decltype(limbs)::value, P, T>
            <<<blocks, kReconstructThreads, 0, chunk_stream>>>(products, ld, chunk, in, crt,
                                                               out_data);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    };
    residue_product_chunks(in, call.args.shape, static_cast<int>(moduli), budget, a.options(),
                           exact_residues(in, crt, table_data), round_chunk,
                           reduced ? kReducedMinColumns : kExactMinColumns,
                           call.args.prepared_a.data, reduced ? kExactModuli : nullptr);
  };
  return crt_product(a, bt, exponent_a, exponent_b, nonfinite_a, nonfinite_b, moduli, residues_a,
                     /*exact=*/true, "ozaki::gemm_crt_exact", run);
}

at::Tensor crt_left_residues(const at::Tensor& a, const at::Tensor& scale, int64_t moduli,
                             bool exact) {
  constexpr const char* op = "ozaki::crt_left_residues";
  check_crt_left_residues_arguments(a, scale, moduli, exact, op);
  check_same_device(a, {&scale}, op);
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor out = at::empty(left_residue_sizes(a, moduli), a.options().dtype(at::kChar));
  const bool batched = a.dim() == 3;
  const int64_t batch = batched ? a.size(0) : 1, m = a.size(-2), k = a.size(-1);
  if (out.numel() == 0) return out;
  const RowBlocks rows{0, m, batch, m};
  int8_t* out_data = out.mutable_data_ptr<int8_t>();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    const CrtOperands<scalar_t> in{a.const_data_ptr<scalar_t>(), nullptr, k,
                                   scale.const_data_ptr<int>(), nullptr, nullptr, nullptr};
    if (exact) {
      const ExactCrt crt = exact_crt(static_cast<int>(moduli));
      const at::Tensor tables = exact_tables(crt, a.options());
      exact_residues(in, crt, tables.const_data_ptr<uint8_t>())(
          in.a, rows, out_data, false, stream);
    } else {
      with_moduli_count(static_cast<int>(moduli), [&](auto count) {
        truncated_residues<decltype(count)::value>(in)(in.a, rows, out_data, false, stream);
      });
    }
  });
  return out;
}

// ---- k-shard operators: crt_residue_products, crt_round --------------------------------------

// gemm_crt's INT32 GEMM results of a 2-D k-shard, int32 (moduli, m, n): each chunk's modulus-i
// plane (leading dimension ld) is copied into out[i][i0 : i0 + rows][j0 : j0 + cols]. Summed over
// the shards they are the whole product's (exact integers), which crt_round turns into gemm_crt's
// bits.
at::Tensor crt_residue_products(const at::Tensor& a, const at::Tensor& bt,
                                const at::Tensor& scale_a, const at::Tensor& scale_b,
                                int64_t moduli, int64_t workspace_bytes) {
  constexpr const char* op = "ozaki::crt_residue_products";
  const ProductShape shape =
      check_crt_residue_products_arguments(a, bt, scale_a, scale_b, moduli, op);
  check_same_device(a, {&bt, &scale_a, &scale_b}, op);
  const c10::cuda::CUDAGuard guard(a.device());
  const int64_t m = shape.m, k = shape.k, n = shape.n;
  if (m == 0 || n == 0 || k == 0) return at::zeros({moduli, m, n}, a.options().dtype(at::kInt));
  at::Tensor out = at::empty({moduli, m, n}, a.options().dtype(at::kInt));
  int32_t* out_data = out.mutable_data_ptr<int32_t>();
  const int64_t budget = workspace_bytes > 0 ? workspace_bytes : kDefaultWorkspaceBytes;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    const CrtOperands<scalar_t> in{a.const_data_ptr<scalar_t>(), bt.const_data_ptr<scalar_t>(), k,
                                   scale_a.const_data_ptr<int>(), scale_b.const_data_ptr<int>(),
                                   nullptr, nullptr};
    with_moduli_count(static_cast<int>(moduli), [&](auto count) {
      constexpr int N = decltype(count)::value;
      // 2-D: every chunk is one element's (e = 0), modulus i's plane at products + i * rows * ld.
      const auto copy_chunk = [&](const int32_t* products, int64_t ld, const Chunk& chunk,
                                  cudaStream_t stream) {
        for (int i = 0; i < N; ++i) {
          C10_CUDA_CHECK(cudaMemcpy2DAsync(
              out_data + (i * m + chunk.first_row) * n + chunk.first_col, n * sizeof(int32_t),
              products + i * chunk.rows * ld, ld * sizeof(int32_t), chunk.cols * sizeof(int32_t),
              chunk.rows, cudaMemcpyDeviceToDevice, stream));
        }
      };
      residue_product_chunks(in, shape, N, budget, a.options(), truncated_residues<N>(in),
                             copy_chunk);
    });
  });
  return out;
}

namespace {

// One entry per thread: products (N, m, n), summed over the shards, rebuilt and rounded as
// reconstruct_kernel does.
template <int N, typename T>
__global__ void round_products_kernel(const int32_t* products, int64_t m, int64_t n,
                                      const int* scale_a, const int* scale_b, T* out) {
  const int64_t entries = m * n;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < entries;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / n, j = t - i * n;
    int32_t residues[N];
#pragma unroll
    for (int modulus = 0; modulus < N; ++modulus) residues[modulus] = __ldg(products + modulus * entries + t);
    out[t] = static_cast<T>(
        crt_reconstruct<N>(residues, row_scale(scale_a[i]), row_scale(scale_b[j]), format_of<T>()));
  }
}

}  // namespace

at::Tensor crt_round(const at::Tensor& products, const at::Tensor& scale_a,
                     const at::Tensor& scale_b, at::ScalarType dtype) {
  constexpr const char* op = "ozaki::crt_round";
  check_crt_round_arguments(products, scale_a, scale_b, dtype, op);
  check_same_device(products, {&scale_a, &scale_b}, op);
  const c10::cuda::CUDAGuard guard(products.device());
  const int64_t m = products.size(1), n = products.size(2);
  at::Tensor out = at::empty({m, n}, products.options().dtype(dtype));
  if (m == 0 || n == 0) return out;
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    with_moduli_count(static_cast<int>(products.size(0)), [&](auto count) {
      constexpr int threads = 256;
      round_products_kernel<decltype(count)::value, scalar_t>
          <<<grid_for(m * n, threads), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
              products.const_data_ptr<int32_t>(), m, n, scale_a.const_data_ptr<int>(),
              scale_b.const_data_ptr<int>(), out.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return out;
}

}  // namespace ozaki::cuda
