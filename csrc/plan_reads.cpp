// ozaki::crt_plan_reads and ozaki::crt_kept_plan_reads: everything the default scheme-II plan reads
// from the device, computed by the operators that compute each part alone, composed here so that
// the host dispatches one operator instead of a dozen or dozens (on a GPU, the host's dispatches
// set the pace of small products and of products with a prepared operand). The CUDA backend has a
// kernel of its own for crt_plan_reads (csrc/cuda/plan_reads.cu), which fuses the passes.
#include "plan_reads.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <tuple>

#include "crt.h"

namespace ozaki {
namespace {

template <class Signature>
c10::TypedOperatorHandle<Signature> find_operator(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

using RowStats = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The rows of a matrix or of a batch's matrices as one (rows, k) matrix; sizes spelled out, as -1
// is ambiguous for k = 0.
at::Tensor flat_rows(const at::Tensor& x) {
  if (x.dim() == 2) return x;
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  return x.reshape({rows, x.size(-1)});
}

// Rows that constrain the plan: a nonzero span and no NaN/Inf (ozaki/_ops.py, RowStats.usable).
at::Tensor usable_rows(const at::Tensor& bit_span, const at::Tensor& nonfinite) {
  return at::gt(at::gt(bit_span, 0), nonfinite);
}

const auto& row_stats_operator() {
  static const auto op =
      find_operator<RowStats(const at::Tensor&)>("ozaki::row_stats_with_norm_scales");
  return op;
}

const auto& row_bounds_operator() {
  static const auto op = find_operator<at::Tensor(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&)>(
      "ozaki::crt_row_bounds");
  return op;
}

const auto& magnitude_operator() {
  static const auto op = find_operator<at::Tensor(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&)>(
      "ozaki::crt_magnitude");
  return op;
}

// Entries read at once: a block of bt's columns of digit products (INT32 products and the mask)
// or a block of bt's rows of column exponents, about 12 bytes per entry (as ozaki/product.py's
// _BOUND_CHUNK_ENTRIES).
constexpr int64_t kBoundChunkEntries = int64_t(1) << 26;

// crt_magnitude from a's kept digits (its usable rows' only): the least exact digit product over
// usable pairs, times 2^(-2 g), a block of bt's columns at a time (their products with unusable
// columns set above every product: 127^2 k < 2^31 - 1); +inf where no usable pair meets.
at::Tensor magnitude_from_digits(const at::Tensor& usable_digits_a, const at::Tensor& bt,
                                 const at::Tensor& tau_b, const at::Tensor& norm_b,
                                 const at::Tensor& usable_b) {
  static const auto digits_op =
      find_operator<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>(
          "ozaki::crt_magnitude_digits");
  static const auto matmul_op = find_operator<at::Tensor(const at::Tensor&, const at::Tensor&)>(
      "ozaki::int8_matmul");
  const at::TensorOptions options = bt.options().dtype(at::kDouble);
  if (usable_digits_a.size(0) == 0) {
    return at::full({}, std::numeric_limits<double>::infinity(), options);
  }
  const at::Tensor digits_b = digits_op.call(bt, tau_b, norm_b, 0);
  const at::Tensor unusable_b = usable_b.logical_not();
  const int64_t n = bt.size(0), k = bt.size(1);
  const int64_t cols = std::max<int64_t>(1, kBoundChunkEntries / usable_digits_a.size(0));
  at::Tensor smallest;
  for (int64_t j0 = 0; j0 < n; j0 += cols) {
    const int64_t j1 = std::min(n, j0 + cols);
    at::Tensor products = matmul_op.call(usable_digits_a, digits_b.slice(0, j0, j1));
    const at::Tensor part = products.masked_fill_(unusable_b.slice(0, j0, j1), INT_MAX).amin();
    smallest = smallest.defined() ? at::minimum(smallest, part) : part;
  }
  const double scale = pow2(-2 * crt_magnitude_gain(k));
  const at::Tensor infinite = at::full({}, std::numeric_limits<double>::infinity(), options);
  return at::where(smallest == INT_MAX, infinite, smallest.to(at::kDouble) * scale);
}

// Per column l of bt: the largest exponent e with |bt'_il| < 2^e over its usable rows i (bt' the
// rows scaled to integers, by 2^(bit_span - tau)), as int64 (k,); -10000 where the column holds no
// nonzero entry of a usable row (ozaki/product.py, _column_exponents, for one matrix).
at::Tensor column_exponents(const at::Tensor& x, const at::Tensor& tau, const at::Tensor& bit_span,
                            const at::Tensor& usable) {
  const int64_t k = x.size(1);
  const at::Tensor exponents = (bit_span - tau).to(at::kInt).view({-1, 1});
  const at::Tensor unused = usable.logical_not().view({-1, 1});
  const int64_t chunk = std::max<int64_t>(1, kBoundChunkEntries / std::max<int64_t>(k, 1));
  at::Tensor largest;
  for (int64_t i0 = 0; i0 < x.size(0); i0 += chunk) {
    const int64_t i1 = std::min(x.size(0), i0 + chunk);
    const at::Tensor rows = x.slice(0, i0, i1);
    const at::Tensor exponent =
        std::get<1>(at::frexp(rows)).to(at::kLong) + exponents.slice(0, i0, i1);
    const at::Tensor part =
        exponent.masked_fill_(rows.eq(0).logical_or_(unused.slice(0, i0, i1)), -10000).amax(0);
    largest = largest.defined() ? at::maximum(largest, part) : part;
  }
  return largest;
}

// Exact scheme II's entry bound sum over l of 2^(u_l + v_l) in float64 for a's column exponents u
// and bt's v (ozaki/product.py, Estimates._entry_bound_sum, for one matrix), 0-d.
at::Tensor entry_bound_sum(const at::Tensor& exponents_a, const at::Tensor& exponents_b) {
  const at::Tensor exponents =
      (exponents_a.to(at::kDouble) + exponents_b.to(at::kDouble)).view({1, -1});
  // 2^e from the bit pattern (ozaki/crt.py, power_of_two), exponents clamped to the normal range
  const at::Tensor biased = exponents.clamp(-1000, 900).to(at::kLong) + 1023;
  const at::Tensor powers = at::bitwise_left_shift(biased, 52).view(at::kDouble);
  return powers.masked_fill(exponents < -2000, 0.0).sum(1).amax();
}

}  // namespace

KeptPlanReads composed_crt_kept_plan_reads(
    const at::Tensor& a, const at::Tensor& tau_a, const at::Tensor& bit_span_a,
    const at::Tensor& nonfinite_a, const at::Tensor& norm_a, const at::Tensor& usable_digits_a,
    const at::Tensor& bounds_a, const std::optional<at::Tensor>& column_exponents_a,
    const at::Tensor& bt) {
  constexpr const char* op = "ozaki::crt_kept_plan_reads";
  TORCH_CHECK(a.dim() == 2 && bt.dim() == 2 && a.size(1) == bt.size(1), op,
              ": a and bt must be matrices with the same number of columns, got ", a.sizes(),
              " and ", bt.sizes());
  const int64_t k = a.size(1);
  TORCH_CHECK(usable_digits_a.scalar_type() == at::kChar && usable_digits_a.dim() == 2 &&
                  usable_digits_a.size(1) == k,
              op, ": usable_digits_a must be int8 (rows, ", k, "), got ",
              usable_digits_a.scalar_type(), " ", usable_digits_a.sizes());
  TORCH_CHECK(bounds_a.scalar_type() == at::kDouble && bounds_a.dim() == 1 && bounds_a.size(0) == 2,
              op, ": bounds_a must be float64 (2,) (crt_row_bounds), got ", bounds_a.scalar_type(),
              " ", bounds_a.sizes());
  const bool exponents_ok =
      !column_exponents_a.has_value() ||
      (column_exponents_a->scalar_type() == at::kLong && column_exponents_a->dim() == 1 &&
       column_exponents_a->size(0) == k);
  TORCH_CHECK(exponents_ok,
              op, ": column_exponents_a must be None or int64 (", k, ",), got ",
              column_exponents_a.has_value() ? column_exponents_a->sizes() : at::IntArrayRef{});
  auto [tau_b, span_b, nonfinite_b, norm_b] = row_stats_operator().call(bt);
  at::Tensor usable_b = usable_rows(span_b, nonfinite_b);
  // For n > 2k/3 the operator's single pass over the m x n products costs less than the two
  // extra passes the kept digits save (a's digit pass: 8 bytes per entry of a).
  const at::Tensor magnitude =
      3 * bt.size(0) > 2 * bt.size(1)
          ? magnitude_operator().call(a, bt, tau_a, tau_b, norm_a, norm_b,
                                      usable_rows(bit_span_a, nonfinite_a), usable_b)
          : magnitude_from_digits(usable_digits_a, bt, tau_b, norm_b, usable_b);
  std::vector<at::Tensor> values{magnitude.neg().reshape({1}), bounds_a,
                                 row_bounds_operator().call(tau_b, span_b, nonfinite_b, norm_b)};
  if (column_exponents_a.has_value()) {
    values.push_back(entry_bound_sum(*column_exponents_a,
                                     column_exponents(bt, tau_b, span_b, usable_b))
                         .reshape({1}));
  }
  return {tau_b, span_b, nonfinite_b, norm_b, usable_b, at::cat(values)};
}

PlanReads composed_crt_plan_reads(const at::Tensor& a, const at::Tensor& bt) {
  const auto& stats_op = row_stats_operator();
  const auto& bounds_op = row_bounds_operator();
  const auto& magnitude_op = magnitude_operator();
  auto [tau_a, span_a, nonfinite_a, norm_a] = stats_op.call(flat_rows(a));
  auto [tau_b, span_b, nonfinite_b, norm_b] = stats_op.call(flat_rows(bt));
  at::Tensor usable_a = usable_rows(span_a, nonfinite_a);
  at::Tensor usable_b = usable_rows(span_b, nonfinite_b);
  const at::Tensor magnitude =
      magnitude_op.call(a, bt, tau_a, tau_b, norm_a, norm_b, usable_a, usable_b);
  at::Tensor values = at::cat({magnitude.neg().reshape({1}),
                               bounds_op.call(tau_a, span_a, nonfinite_a, norm_a),
                               bounds_op.call(tau_b, span_b, nonfinite_b, norm_b)});
  return {tau_a, span_a, nonfinite_a, norm_a, usable_a,
          tau_b, span_b, nonfinite_b, norm_b, usable_b, values};
}

TORCH_LIBRARY_IMPL(ozaki, CompositeExplicitAutograd, m) {
  m.impl("crt_plan_reads", &composed_crt_plan_reads);
  m.impl("crt_kept_plan_reads", &composed_crt_kept_plan_reads);
}

}  // namespace ozaki
