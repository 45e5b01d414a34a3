// ozaki::crt_plan_reads: everything the default scheme-II plan reads from the device, computed by
// the operators that compute each part alone, composed here so that the host dispatches one
// operator instead of a dozen (on a GPU, the host's dispatches set the pace of small products).
// The CUDA backend has a kernel of its own (csrc/cuda/plan_reads.cu), which fuses the passes.
#include "plan_reads.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <tuple>

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

}  // namespace

PlanReads composed_crt_plan_reads(const at::Tensor& a, const at::Tensor& bt) {
  static const auto stats_op =
      find_operator<RowStats(const at::Tensor&)>("ozaki::row_stats_with_norm_scales");
  static const auto bounds_op = find_operator<at::Tensor(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&)>(
      "ozaki::crt_row_bounds");
  static const auto magnitude_op = find_operator<at::Tensor(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&)>(
      "ozaki::crt_magnitude");
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
}

}  // namespace ozaki
