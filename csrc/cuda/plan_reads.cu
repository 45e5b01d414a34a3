// ozaki::crt_plan_reads on CUDA: the default scheme-II plan's device reads in four launches. Each
// operand's rows get their statistics, norm scales, usable flags and the estimate's magnitude
// digits in one pass (rows of up to 8192 entries held in registers, plan_short_rows.cuh; longer
// ones by row_stats_norm_kernel with a third sweep over the row, which the first two have brought
// into L2: a few rows at a time per multiprocessor, row_pass_launch; rows too long for L2 to keep
// one per multiprocessor get their digits from a pass of their own instead),
// the digits meet in the reduced GEMM's minimum epilogue, and one kernel turns the least digit
// product and the rows' bounds into the values.
// ozaki::crt_kept_plan_reads, for a prepared left operand, runs the same pass over bt alone and
// meets a's kept digits, plus a pass for bt's column exponents where exact scheme II's entry bound
// is asked for: three or four launches. The bits are those of the operators that compute each part
// alone (csrc/plan_reads.cpp), which this build runs instead where it has no reduced GEMM.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>

#include "../checks.h"
#include "../crt.h"
#include "../plan_reads.h"
#include "../row_stats_output.h"
#include "ops.h"
#include "plan_columns.cuh"
#include "plan_rows.cuh"
#include "plan_short_rows.cuh"
#include "reduced_gemm.cuh"

namespace ozaki::cuda {
namespace {

constexpr int kDigitGroup = 8;  // digits per thread and 8-byte store
// Rows up to this size, and rows that row_pass_launch keeps in L2, get their digits in the
// statistics pass: the resident blocks' rows then stay in L2 for the third sweep; other rows would
// be read again from memory, at the rate of the separate digit pass at best (docs/benchmarks.md,
// "Scheme II paths").
constexpr int64_t kDigitSweepRowBytes = int64_t(48) << 10;

// row_stats_norm_kernel's third step: the row's usable flag, and, where digits is not nullptr,
// its magnitude digits (magnitude_digit, as crt_magnitude_digits) written to digits + row *
// k_stride, zeros past k. The block of row 0 also sets *smallest to INT_MAX for the minimum
// epilogue (nullptr: not).
template <typename T>
struct WriteDigits {
  static constexpr bool kRuns = true;
  int8_t* digits;
  int64_t k_stride;
  int gain;
  bool* usable;
  int32_t* smallest;

  __device__ void operator()(int64_t row, const T* entries, int64_t k, int tau, int norm,
                             bool row_usable) const {
    if (threadIdx.x == 0) {
      usable[row] = row_usable;
      if (row == 0 && smallest != nullptr) *smallest = INT_MAX;
    }
    if (digits == nullptr) return;
    int8_t* out = digits + row * k_stride;
    for (int64_t l0 = threadIdx.x * int64_t(kDigitGroup); l0 < k_stride;
         l0 += int64_t(blockDim.x) * kDigitGroup) {
      __align__(8) int8_t group[kDigitGroup];
#pragma unroll
      for (int c = 0; c < kDigitGroup; ++c) {
        const int64_t l = l0 + c;
        group[c] = static_cast<int8_t>(
            l < k ? magnitude_digit(static_cast<double>(entries[l]), tau, norm, gain) : 0);
      }
      *reinterpret_cast<uint2*>(out + l0) = *reinterpret_cast<const uint2*>(group);
    }
  }
};

// What one operand's pass returns: RowStatsOutput's three vectors, the norm scale codes, the
// usable flags and the digits.
struct OperandReads {
  at::Tensor tau, bit_span, nonfinite, norm, usable, digits;
};

template <typename T>
OperandReads read_operand(const at::Tensor& x, int64_t rows, int64_t k, int64_t k_stride,
                          int gain, int32_t* smallest, cudaStream_t stream) {
  const RowStatsOutput stats(rows, x.options());
  const int64_t row_bytes = k * int64_t(sizeof(T));
  const bool short_rows = short_plan_rows(k_stride);
  const bool sweep =
      short_rows || row_bytes <= kDigitSweepRowBytes || row_pass_keeps_rows(row_bytes);
  OperandReads out{stats.tau, stats.bit_span, stats.nonfinite,
                   at::empty({rows}, x.options().dtype(at::kInt)),
                   at::empty({rows}, x.options().dtype(at::kBool)),
                   sweep ? at::empty({rows, k_stride}, x.options().dtype(at::kChar)) : at::Tensor()};
  if (short_rows) {
    launch_short_row_plan(x.const_data_ptr<T>(), rows, k, k_stride, gain, stats.tau_data,
                          stats.bit_span_data, stats.nonfinite_data,
                          out.norm.mutable_data_ptr<int>(), out.usable.mutable_data_ptr<bool>(),
                          out.digits.mutable_data_ptr<int8_t>(), smallest, stream);
    return out;
  }
  const WriteDigits<T> digits{sweep ? out.digits.mutable_data_ptr<int8_t>() : nullptr, k_stride,
                              gain, out.usable.mutable_data_ptr<bool>(), smallest};
  launch_row_stats_norm(x.const_data_ptr<T>(), rows, k, stats.tau_data, stats.bit_span_data,
                        stats.nonfinite_data, out.norm.mutable_data_ptr<int>(), stream, digits,
                        sweep);
  if (!sweep) out.digits = crt_magnitude_digit_rows<T>(x, out.tau, out.norm, gain, k_stride);
  return out;
}

// read_operand for bt = B's columns read in place (column_plan_kernel): the same values. Columns
// too long for L2 to keep one group per multiprocessor are swept three times from memory, which
// costs less than copying them into rows and reading the rows.
template <typename T>
OperandReads read_columns(const at::Tensor& bt, int64_t rows, int64_t k, int64_t k_stride,
                          int gain, int32_t* smallest, cudaStream_t stream) {
  const RowStatsOutput stats(rows, bt.options());
  OperandReads out{stats.tau, stats.bit_span, stats.nonfinite,
                   at::empty({rows}, bt.options().dtype(at::kInt)),
                   at::empty({rows}, bt.options().dtype(at::kBool)),
                   at::empty({rows, k_stride}, bt.options().dtype(at::kChar))};
  launch_column_plan(bt.const_data_ptr<T>(), k, bt_layout_of(bt), rows, k_stride, gain,
                     stats.tau_data, stats.bit_span_data, stats.nonfinite_data,
                     out.norm.mutable_data_ptr<int>(), out.usable.mutable_data_ptr<bool>(),
                     out.digits.mutable_data_ptr<int8_t>(), smallest, stream);
  return out;
}

// The reads of bt: read_columns where bt is B's columns in place, else read_operand.
template <typename T>
OperandReads read_bt(const at::Tensor& bt, int64_t rows, int64_t k, int64_t k_stride, int gain,
                     int32_t* smallest, cudaStream_t stream) {
  return is_column_view(bt) ? read_columns<T>(bt, rows, k, k_stride, gain, smallest, stream)
                            : read_operand<T>(bt, rows, k, k_stride, gain, smallest, stream);
}

// The per-row vectors of one operand's rows, for plan_values_kernel.
struct OperandRowsView {
  const int* tau;
  const int* bit_span;
  const bool* nonfinite;
  const int* norm;
  int64_t count;
};

// Two blocks of kRowBoundsThreads: block b writes crt_row_bounds of operand b (a, then bt) to
// values[1 + 2 b] and values[2 + 2 b]; block 0 also writes values[0] = -crt_magnitude, the least
// digit product times scale (+inf where no usable row met a usable column).
__global__ void plan_values_kernel(OperandRowsView a, OperandRowsView b, const int32_t* smallest,
                                   double scale, double* values) {
  const OperandRowsView& rows = blockIdx.x == 0 ? a : b;
  block_row_bounds(rows.tau, rows.bit_span, rows.nonfinite, rows.norm, rows.count,
                   values + 1 + 2 * blockIdx.x);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    values[0] = *smallest == INT_MAX ? -infinity() : -(static_cast<double>(*smallest) * scale);
  }
}

// Column exponents of bt's rows for exact scheme II's entry bound: block (x, y) reads the rows
// y, y + gridDim.y, ... of the columns x * blockDim.x + threadIdx.x and writes, per column l, the
// largest exponent e with |bt'_il| < 2^e over those of its usable rows (bt' the rows scaled to
// integers, frexp's exponent plus bit_span - tau) to partial[y * k + l]; -10000 where none holds
// a nonzero entry (ozaki/product.py, _column_exponents). The largest over y is the column's.
template <typename T>
__global__ void column_exponents_kernel(const T* bt, int64_t rows, int64_t k, const int* tau,
                                        const int* bit_span, const bool* usable,
                                        int64_t* partial) {
  const int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (l >= k) return;
  int64_t largest = -10000;
  for (int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    const double x = static_cast<double>(bt[i * k + l]);
    if (!usable[i] || x == 0.0) continue;
    int exponent;
    frexp(x, &exponent);
    largest = max(largest, int64_t(exponent) + bit_span[i] - tau[i]);
  }
  partial[blockIdx.y * k + l] = largest;
}

constexpr int kColumnThreads = 256;
// Row strides of column_exponents_kernel: one per 32 rows, at most 16 (the entry bound's block
// then reads 16 partial exponents per column).
constexpr int64_t kColumnRowsPerPart = 32, kMostColumnParts = 16;

// What crt_kept_plan_reads' values kernel reads besides bt's rows.
struct KeptValuesInputs {
  const double* bounds_a;
  const int32_t* smallest;
  double scale;
  const int64_t* exponents_a;  // nullptr: no entry bound
  const int64_t* partial_exponents_b;
  int64_t parts, k;
};

// Two blocks of kRowBoundsThreads (one where no entry bound is asked for): block 0 writes
// values[0] = -crt_magnitude (as plan_values_kernel), a's kept bounds to values[1..2] and bt's
// crt_row_bounds to values[3..4]; block 1 writes crt_entry_bound_sum of a's column exponents and
// bt's (the largest of their parts) to values[5].
__global__ void kept_plan_values_kernel(OperandRowsView b, KeptValuesInputs in, double* values) {
  if (blockIdx.x == 0) {
    block_row_bounds(b.tau, b.bit_span, b.nonfinite, b.norm, b.count, values + 3);
    if (threadIdx.x == 0) {
      values[0] = *in.smallest == INT_MAX ? -infinity()
                                          : -(static_cast<double>(*in.smallest) * in.scale);
      values[1] = in.bounds_a[0];
      values[2] = in.bounds_a[1];
    }
    return;
  }
  const auto exponent_of = [&](int64_t l) {
    int64_t v = in.partial_exponents_b[l];
    for (int64_t p = 1; p < in.parts; ++p) v = max(v, in.partial_exponents_b[p * in.k + l]);
    return static_cast<double>(in.exponents_a[l]) + static_cast<double>(v);
  };
  const double sum = block_entry_bound_sum(exponent_of, in.k);
  if (threadIdx.x == 0) values[5] = sum;
}

}  // namespace

PlanReads crt_plan_reads(const at::Tensor& a, const at::Tensor& given_bt) {
  constexpr const char* op = "ozaki::crt_plan_reads";
  const ProductShape shape = check_operands(a, given_bt, op, /*bt_columns=*/true);
  check_same_device(a, {&given_bt}, op);
  check_crt_inner(shape.k, op);
  const int64_t rows_a = shape.batch * shape.m, rows_b = shape.batch * shape.n;
  // before the path is chosen: reduced_gemm_available asks the current device
  const c10::cuda::CUDAGuard guard(a.device());
  if (!reduced_gemm_available() || rows_a == 0 || rows_b == 0 || shape.k == 0) {
    return composed_crt_plan_reads(a, given_bt.contiguous());
  }
  const at::Tensor& bt = given_bt;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t k_stride = (shape.k + kResidueRowAlign - 1) / kResidueRowAlign * kResidueRowAlign;
  const int gain = crt_magnitude_gain(shape.k);
  at::Tensor smallest = at::empty({1}, a.options().dtype(at::kInt));
  OperandReads ra, rb;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    ra = read_operand<scalar_t>(a, rows_a, shape.k, k_stride, gain,
                                smallest.mutable_data_ptr<int32_t>(), stream);
    rb = read_bt<scalar_t>(bt, rows_b, shape.k, k_stride, gain, nullptr, stream);
  });
  magnitude_min_gemms(MagnitudeMinGemm{ra.digits.const_data_ptr<int8_t>(), shape.m * k_stride,
                                       rb.digits.const_data_ptr<int8_t>(), shape.n * k_stride,
                                       shape.m, shape.n, k_stride, shape.batch,
                                       ra.usable.const_data_ptr<bool>(),
                                       rb.usable.const_data_ptr<bool>(),
                                       smallest.mutable_data_ptr<int32_t>()},
                      stream);
  at::Tensor values = at::empty({5}, a.options().dtype(at::kDouble));
  const auto view = [](const OperandReads& r, int64_t count) {
    return OperandRowsView{r.tau.const_data_ptr<int>(), r.bit_span.const_data_ptr<int>(),
                           r.nonfinite.const_data_ptr<bool>(), r.norm.const_data_ptr<int>(),
                           count};
  };
  plan_values_kernel<<<2, kRowBoundsThreads, 0, stream>>>(
      view(ra, rows_a), view(rb, rows_b), smallest.const_data_ptr<int32_t>(),
      pow2(-2 * gain), values.mutable_data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {ra.tau, ra.bit_span, ra.nonfinite, ra.norm, ra.usable,
          rb.tau, rb.bit_span, rb.nonfinite, rb.norm, rb.usable, values};
}

KeptPlanReads crt_kept_plan_reads(const at::Tensor& a, const at::Tensor& tau_a,
                                  const at::Tensor& bit_span_a, const at::Tensor& nonfinite_a,
                                  const at::Tensor& usable_a, const at::Tensor& norm_a,
                                  const at::Tensor& digits_a, const at::Tensor& bounds_a,
                                  const std::optional<at::Tensor>& column_exponents_a,
                                  const at::Tensor& given_bt) {
  constexpr const char* op = "ozaki::crt_kept_plan_reads";
  check_kept_plan_reads_arguments(a, tau_a, bit_span_a, nonfinite_a, usable_a, norm_a, digits_a,
                                  bounds_a, column_exponents_a, given_bt, op);
  check_same_device(a, {&tau_a, &bit_span_a, &nonfinite_a, &usable_a, &norm_a, &digits_a,
                        &bounds_a, &given_bt}, op);
  if (column_exponents_a.has_value()) check_same_device(a, {&*column_exponents_a}, op);
  const int64_t m = a.size(0), n = given_bt.size(0), k = a.size(1);
  // before the path is chosen: reduced_gemm_available asks the current device
  const c10::cuda::CUDAGuard guard(a.device());
  if (!reduced_gemm_available() || m == 0 || n == 0 || k == 0) {
    return composed_crt_kept_plan_reads(a, tau_a, bit_span_a, nonfinite_a, usable_a, norm_a,
                                        digits_a, bounds_a, column_exponents_a, given_bt);
  }
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t k_stride = digits_a.size(1);
  const int gain = crt_magnitude_gain(k);
  at::Tensor smallest = at::empty({1}, a.options().dtype(at::kInt));
  const bool entry_bound = column_exponents_a.has_value();
  // B's columns in place as crt_plan_reads reads them; as rows where the entry bound's column
  // exponents are asked for too (exact scheme II's rows of wide span, whose kernel reads rows).
  const at::Tensor bt = entry_bound && is_column_view(given_bt) ? transposed(given_bt.mT())
                                                                 : given_bt;
  const int64_t parts =
      std::min(kMostColumnParts, (n + kColumnRowsPerPart - 1) / kColumnRowsPerPart);
  at::Tensor partial_exponents =
      at::empty({entry_bound ? parts * k : 0}, a.options().dtype(at::kLong));
  OperandReads rb;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    rb = read_bt<scalar_t>(bt, n, k, k_stride, gain, smallest.mutable_data_ptr<int32_t>(), stream);
    if (entry_bound) {
      const dim3 grid(static_cast<unsigned>((k + kColumnThreads - 1) / kColumnThreads),
                      static_cast<unsigned>(parts));
      column_exponents_kernel<scalar_t><<<grid, kColumnThreads, 0, stream>>>(
          bt.const_data_ptr<scalar_t>(), n, k, rb.tau.const_data_ptr<int>(),
          rb.bit_span.const_data_ptr<int>(), rb.usable.const_data_ptr<bool>(),
          partial_exponents.mutable_data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
  magnitude_min_gemms(MagnitudeMinGemm{digits_a.const_data_ptr<int8_t>(), m * k_stride,
                                       rb.digits.const_data_ptr<int8_t>(), n * k_stride, m, n,
                                       k_stride, 1, usable_a.const_data_ptr<bool>(),
                                       rb.usable.const_data_ptr<bool>(),
                                       smallest.mutable_data_ptr<int32_t>()},
                      stream);
  at::Tensor values = at::empty({entry_bound ? 6 : 5}, a.options().dtype(at::kDouble));
  const KeptValuesInputs inputs{
      bounds_a.const_data_ptr<double>(), smallest.const_data_ptr<int32_t>(), pow2(-2 * gain),
      entry_bound ? column_exponents_a->const_data_ptr<int64_t>() : nullptr,
      partial_exponents.const_data_ptr<int64_t>(), parts, k};
  kept_plan_values_kernel<<<entry_bound ? 2 : 1, kRowBoundsThreads, 0, stream>>>(
      OperandRowsView{rb.tau.const_data_ptr<int>(), rb.bit_span.const_data_ptr<int>(),
                      rb.nonfinite.const_data_ptr<bool>(), rb.norm.const_data_ptr<int>(), n},
      inputs, values.mutable_data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {rb.tau, rb.bit_span, rb.nonfinite, rb.norm, rb.usable, values};
}

}  // namespace ozaki::cuda
