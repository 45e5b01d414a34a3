// ozaki::crt_plan_reads and ozaki::crt_kept_plan_reads composed of the operators that compute each
// of their parts (csrc/plan_reads.cpp): every device's kernel, and the CUDA kernels' fallback where
// the reduced GEMM is not built.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace ozaki {

using PlanReads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor>;

PlanReads composed_crt_plan_reads(const at::Tensor& a, const at::Tensor& bt);

using KeptPlanReads =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

KeptPlanReads composed_crt_kept_plan_reads(
    const at::Tensor& a, const at::Tensor& tau_a, const at::Tensor& bit_span_a,
    const at::Tensor& nonfinite_a, const at::Tensor& usable_a, const at::Tensor& norm_a,
    const at::Tensor& digits_a, const at::Tensor& bounds_a,
    const std::optional<at::Tensor>& column_exponents_a, const at::Tensor& bt);

}  // namespace ozaki
