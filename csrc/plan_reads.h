// ozaki::crt_plan_reads composed of the operators that compute each of its parts
// (csrc/plan_reads.cpp): every device's kernel, and the CUDA kernel's fallback where the reduced
// GEMM is not built.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

namespace ozaki {

using PlanReads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor>;

PlanReads composed_crt_plan_reads(const at::Tensor& a, const at::Tensor& bt);

}  // namespace ozaki
