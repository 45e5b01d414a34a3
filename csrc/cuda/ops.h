// Every CUDA operator function (schemas in csrc/ozaki.cpp), each group defined in the file its
// comment names; csrc/cuda/register.cu registers them all for the CUDA dispatch key.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include "../plan_reads.h"

namespace ozaki::cuda {

// csrc/cuda/split.cu: row statistics and FP16 slices.
std::tuple<at::Tensor, at::Tensor, at::Tensor> row_stats(const at::Tensor& a);
at::Tensor split_rows(const at::Tensor& a, const at::Tensor& tau, int64_t slices);

// csrc/cuda/estimate.cu: magnitude estimates for planning.
at::Tensor magnitude_product(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                             const at::Tensor& tau_b, int64_t total_k);
at::Tensor sampled_magnitudes(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                              const at::Tensor& tau_b, const at::Tensor& usable_a,
                              const at::Tensor& usable_b, const at::Tensor& rows_a,
                              const at::Tensor& rows_b, int64_t m, int64_t n,
                              const std::optional<at::Tensor>& norm_a,
                              const std::optional<at::Tensor>& norm_b);
at::Tensor crt_entry_bound_sum(const at::Tensor& exponents_a, const at::Tensor& exponents_b);

// csrc/cuda/gemm.cu: Ozaki scheme I products and k-shard level sums.
at::Tensor gemm_slices(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                       const at::Tensor& tau_b, const at::Tensor& span_a, const at::Tensor& span_b,
                       const at::Tensor& nonfinite_a, const at::Tensor& nonfinite_b, int64_t slices,
                       bool fast, bool nearest, bool int8, int64_t workspace_bytes);
at::Tensor slice_levels(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                        const at::Tensor& tau_b, int64_t slices, bool fast, bool int8,
                        int64_t total_k, int64_t workspace_bytes);

// csrc/cuda/levels.cu: rounding of summed k-shard level sums.
std::tuple<at::Tensor, at::Tensor> round_levels(const at::Tensor& levels, const at::Tensor& tau_a,
                                                const at::Tensor& tau_b, const at::Tensor& span_a,
                                                const at::Tensor& span_b, int64_t slices, bool fast,
                                                bool int8, int64_t total_k, bool nearest,
                                                at::ScalarType dtype);

// csrc/cuda/crt.cu: Ozaki scheme II (CRT) and its k-shard operators.
at::Tensor row_norm_scales(const at::Tensor& a, const at::Tensor& tau);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> row_stats_with_norm_scales(
    const at::Tensor& a);
at::Tensor crt_row_scales(const at::Tensor& norm_scales, const at::Tensor& tau,
                          const at::Tensor& bit_span, int64_t t);
at::Tensor crt_wide_exponents(const at::Tensor& norm_scales, const at::Tensor& tau,
                              const at::Tensor& bit_span, const at::Tensor& usable, int64_t t);
at::Tensor crt_row_bounds(const at::Tensor& tau, const at::Tensor& bit_span,
                          const at::Tensor& nonfinite, const at::Tensor& norm_scales);
at::Tensor row_norm_square_sums(const at::Tensor& a, const at::Tensor& tau);
at::Tensor crt_magnitude(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                         const at::Tensor& tau_b, const at::Tensor& norm_a,
                         const at::Tensor& norm_b, const at::Tensor& usable_a,
                         const at::Tensor& usable_b);
at::Tensor crt_magnitude_digits(const at::Tensor& a, const at::Tensor& tau, const at::Tensor& norm,
                                int64_t total_k);

at::Tensor gemm_crt(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& scale_a,
                    const at::Tensor& scale_b, const at::Tensor& nonfinite_a,
                    const at::Tensor& nonfinite_b, int64_t moduli, int64_t workspace_bytes,
                    const std::optional<at::Tensor>& residues_a);
at::Tensor gemm_crt_exact(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& exponent_a,
                          const at::Tensor& exponent_b, const at::Tensor& nonfinite_a,
                          const at::Tensor& nonfinite_b, int64_t moduli, int64_t workspace_bytes,
                          const std::optional<at::Tensor>& residues_a);
at::Tensor crt_left_residues(const at::Tensor& a, const at::Tensor& scale, int64_t moduli,
                             bool exact);
at::Tensor crt_residue_products(const at::Tensor& a, const at::Tensor& bt,
                                const at::Tensor& scale_a, const at::Tensor& scale_b,
                                int64_t moduli, int64_t workspace_bytes);
at::Tensor crt_round(const at::Tensor& products, const at::Tensor& scale_a,
                     const at::Tensor& scale_b, at::ScalarType dtype);

// csrc/cuda/int8_matmul.cu: exact INT8 GEMM.
at::Tensor int8_matmul(const at::Tensor& a, const at::Tensor& bt);

// csrc/cuda/transpose.cu: B's columns as rows.
at::Tensor transposed(const at::Tensor& b);

// csrc/cuda/fingerprint.cu: the digest by which a kept operand is found unchanged.
at::Tensor fingerprint(const at::Tensor& a);

// csrc/cuda/plan_reads.cu: the default scheme-II plan's device reads, fused, also for a prepared
// left operand.
PlanReads crt_plan_reads(const at::Tensor& a, const at::Tensor& bt);
KeptPlanReads crt_kept_plan_reads(const at::Tensor& a, const at::Tensor& tau_a,
                                  const at::Tensor& bit_span_a, const at::Tensor& nonfinite_a,
                                  const at::Tensor& usable_a, const at::Tensor& norm_a,
                                  const at::Tensor& digits_a, const at::Tensor& bounds_a,
                                  const std::optional<at::Tensor>& column_exponents_a,
                                  const at::Tensor& bt);

}  // namespace ozaki::cuda
