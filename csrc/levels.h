// Rounding of a k-sharded scheme-I product's summed level sums (ozaki::round_levels).
//
// Host/device-neutral like scheme.h: the CPU and CUDA kernels run this per entry. The level sums
// of an entry, added up over the shards, are exactly those gemm_slices computes from the whole
// product's slice products (pair_level_sum), and they go through the very same combine_levels or
// nearest_from_level_sums, so the result has gemm_slices' bits.
#pragma once

#include "exact.h"

namespace ozaki {

// How the level sums of one product are rounded.
struct LevelRounding {
  PairLayout pairs;  // slices and fast (chunk_rows and ld are unused)
  int beta;          // digit width of the whole inner dimension
  int64_t total_k;   // the whole inner dimension
  bool nearest;      // rounding="nearest"
};

// gemm_slices' value of one finite entry from its level sums levels[l * level_stride],
// l = 0 .. pairs.top_level(): sum_levels' result, or nearest_from_levels' with its *undecided flag
// (the caller computes undecided entries exactly). RoundingFormat of T, the output type.
template <typename T>
OZAKI_HD double round_entry_levels(const double* levels, int64_t level_stride, int tau_a, int tau_b,
                                   int span_a, int span_b, const LevelRounding& how,
                                   bool* undecided) {
  const auto level_sums = [&](int level, double* sum) { sum[0] = levels[level * level_stride]; };
  const int top_level = how.pairs.top_level();
  const int w = grid_step_bits(how.beta);
  const int tau_sum = wrapping_add(tau_a, tau_b);
  if (how.nearest) {
    const DroppedBound dropped = dropped_bound(how.pairs, how.beta, how.total_k, span_a, span_b);
    return nearest_from_level_sums(level_sums, top_level, w, how.beta, tau_sum, dropped,
                                   format_of<T>(), undecided);
  }
  *undecided = false;
  double value;
  combine_levels<1>(level_sums, top_level, w, &tau_sum, &value);
  return value;
}

}  // namespace ozaki
