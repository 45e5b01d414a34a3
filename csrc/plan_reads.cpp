// ozaki::crt_plan_reads and ozaki::crt_kept_plan_reads: everything the default scheme-II plan reads
// from the device, computed by the operators that compute each part alone, composed here so that
// the host dispatches one operator instead of a dozen or dozens (on a GPU, the host's dispatches
// set the pace of small products and of products with a prepared operand). The CUDA backend has
// kernels of its own for both (csrc/cuda/plan_reads.cu), which fuse the passes.
#include "plan_reads.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <tuple>

#include "checks.h"
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

// crt_magnitude from a's kept digits (all its rows, width round_up(k, kResidueRowAlign)): the
// least exact digit product over usable pairs, times 2^(-2 g), a block of bt's columns at a time
// (products of unusable rows or columns set above every product: 127^2 k < 2^31 - 1); +inf where
// no usable pair meets.
at::Tensor magnitude_from_digits(const at::Tensor& digits_a, const at::Tensor& usable_a,
                                 const at::Tensor& bt, const at::Tensor& tau_b,
                                 const at::Tensor& norm_b, const at::Tensor& usable_b) {
  static const auto digits_op =
      find_operator<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>(
          "ozaki::crt_magnitude_digits");
  static const auto matmul_op = find_operator<at::Tensor(const at::Tensor&, const at::Tensor&)>(
      "ozaki::int8_matmul");
  const at::TensorOptions options = bt.options().dtype(at::kDouble);
  const int64_t n = bt.size(0), k = bt.size(1);
  if (digits_a.size(0) == 0 || n == 0) {
    return at::full({}, std::numeric_limits<double>::infinity(), options);
  }
  // The products run over the digits' padded width, unless that passes int8_matmul's inner limit
  // (k within 16 of 2^17), where they run over the k columns themselves (the padding is zeros).
  const bool padded = digits_a.size(1) <= kCrtMaxInner;
  const at::Tensor kept_a = padded ? digits_a : digits_a.narrow(1, 0, k).contiguous();
  const at::Tensor digits_b = at::constant_pad_nd(digits_op.call(bt, tau_b, norm_b, 0),
                                                  {0, kept_a.size(1) - k});
  const at::Tensor unusable_a = usable_a.logical_not().view({-1, 1});
  const at::Tensor unusable_b = usable_b.logical_not().view({1, -1});
  const int64_t cols = std::max<int64_t>(1, kBoundChunkEntries / digits_a.size(0));
  at::Tensor smallest;
  for (int64_t j0 = 0; j0 < n; j0 += cols) {
    const int64_t j1 = std::min(n, j0 + cols);
    at::Tensor products = matmul_op.call(kept_a, digits_b.slice(0, j0, j1));
    const at::Tensor part =
        products.masked_fill_(at::logical_or(unusable_a, unusable_b.slice(1, j0, j1)), INT_MAX)
            .amin();
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
  at::Tensor largest = at::full({k}, -10000, x.options().dtype(at::kLong));  // no rows: no entry
  for (int64_t i0 = 0; i0 < x.size(0); i0 += chunk) {
    const int64_t i1 = std::min(x.size(0), i0 + chunk);
    const at::Tensor rows = x.slice(0, i0, i1);
    const at::Tensor exponent =
        std::get<1>(at::frexp(rows)).to(at::kLong) + exponents.slice(0, i0, i1);
    const at::Tensor part =
        exponent.masked_fill_(rows.eq(0).logical_or_(unused.slice(0, i0, i1)), -10000).amax(0);
    largest = at::maximum(largest, part);
  }
  return largest;
}

// crt_entry_bound_sum of a's and bt's column exponents (int64 (k,) each), 0-d.
at::Tensor entry_bound_sum(const at::Tensor& exponents_a, const at::Tensor& exponents_b) {
  static const auto op = find_operator<at::Tensor(const at::Tensor&, const at::Tensor&)>(
      "ozaki::crt_entry_bound_sum");
  return op.call(exponents_a.view({1, -1}), exponents_b.view({1, -1}));
}

}  // namespace

KeptPlanReads composed_crt_kept_plan_reads(
    const at::Tensor& a, const at::Tensor& tau_a, const at::Tensor& bit_span_a,
    const at::Tensor& nonfinite_a, const at::Tensor& usable_a, const at::Tensor& norm_a,
    const at::Tensor& digits_a, const at::Tensor& bounds_a,
    const std::optional<at::Tensor>& column_exponents_a, const at::Tensor& given_bt) {
  check_kept_plan_reads_arguments(a, tau_a, bit_span_a, nonfinite_a, usable_a, norm_a, digits_a,
                                  bounds_a, column_exponents_a, given_bt,
                                  "ozaki::crt_kept_plan_reads");
  const at::Tensor bt = given_bt.contiguous();  // B's columns as rows, where they came in place
  auto [tau_b, span_b, nonfinite_b, norm_b] = row_stats_operator().call(bt);
  at::Tensor usable_b = usable_rows(span_b, nonfinite_b);
  // For n > 2k/3 the operator's single pass over the m x n products costs less than the two
  // passes over them (mask, minimum) that the kept digits need.
  const at::Tensor magnitude =
      3 * bt.size(0) > 2 * bt.size(1)
          ? magnitude_operator().call(a, bt, tau_a, tau_b, norm_a, norm_b, usable_a, usable_b)
          : magnitude_from_digits(digits_a, usable_a, bt, tau_b, norm_b, usable_b);
  std::vector<at::Tensor> values{magnitude.neg().reshape({1}), bounds_a,
                                 row_bounds_operator().call(tau_b, span_b, nonfinite_b, norm_b)};
  if (column_exponents_a.has_value()) {
    values.push_back(entry_bound_sum(*column_exponents_a,
                                     column_exponents(bt, tau_b, span_b, usable_b))
                         .reshape({1}));
  }
  return {tau_b, span_b, nonfinite_b, norm_b, usable_b, at::cat(values)};
}

PlanReads composed_crt_plan_reads(const at::Tensor& a, const at::Tensor& given_bt) {
  constexpr const char* op = "ozaki::crt_plan_reads";
  const ProductShape shape = check_operands(a, given_bt, op, /*bt_columns=*/true);
  check_crt_inner(shape.k, op);
  const at::Tensor bt = given_bt.contiguous();  // B's columns as rows, where they came in place
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
