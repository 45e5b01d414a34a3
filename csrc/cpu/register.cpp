// The CPU backend's operator table: every ozaki operator's CPU kernel (declared in ops.h, defined
// in csrc/cpu/*.cpp), registered for the CPU dispatch key in this one place.
#include <torch/library.h>

#include "ops.h"

namespace ozaki::cpu {

TORCH_LIBRARY_IMPL(ozaki, CPU, m) {
  m.impl("row_stats", &row_stats);
  m.impl("split_rows", &split_rows);
  m.impl("magnitude_product", &magnitude_product);
  m.impl("sampled_magnitudes", &sampled_magnitudes);
  m.impl("crt_entry_bound_sum", &crt_entry_bound_sum);
  m.impl("gemm_slices", &gemm_slices);
  m.impl("slice_levels", &slice_levels);
  m.impl("round_levels", &round_levels);
  m.impl("row_norm_scales", &row_norm_scales);
  m.impl("row_stats_with_norm_scales", &row_stats_with_norm_scales);
  m.impl("crt_row_scales", &crt_row_scales);
  m.impl("crt_wide_exponents", &crt_wide_exponents);
  m.impl("crt_row_bounds", &crt_row_bounds);
  m.impl("row_norm_square_sums", &row_norm_square_sums);
  m.impl("crt_magnitude", &crt_magnitude);
  m.impl("crt_magnitude_digits", &crt_magnitude_digits);
  m.impl("gemm_crt", &gemm_crt);
  m.impl("gemm_crt_exact", &gemm_crt_exact);
  m.impl("crt_left_residues", &crt_left_residues);
  m.impl("crt_residue_products", &crt_residue_products);
  m.impl("crt_round", &crt_round);
  m.impl("int8_matmul", &int8_matmul);
  m.impl("transposed", &transposed);
  m.impl("fingerprint", &fingerprint);
}

}  // namespace ozaki::cpu
