// Host/device-neutral core of Ozaki scheme I with FP16 slices.
//
// Every function here is compiled twice, by the host compiler for the CPU backend and by nvcc for
// the CUDA backend, so both backends produce the same bits by construction. Only IEEE operations
// that are exact or correctly rounded appear (no libm transcendental, no FMA-sensitive expression),
// and the build forbids contraction and fast-math (setup.py). The derivations are in
// docs/algorithm.md; section names below refer to it.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define OZAKI_HD __host__ __device__ __forceinline__
#else
#define OZAKI_HD inline
#endif

namespace ozaki {

// Slices are stored as FP16, whose significand holds 11 bits: digit magnitudes are capped there.
constexpr int kMaxDigitBits = 11;
// Upper bound on slices per operand: keeps every power of two used below in the normal range
// ((2 * kMaxSlices - 2) * 12 < 1022) and is far past any useful accuracy.
constexpr int kMaxSlices = 40;

OZAKI_HD uint64_t bits_of(double x) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

OZAKI_HD double double_from_bits(uint64_t u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(u));
#else
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

OZAKI_HD int count_trailing_zeros(uint64_t u) {  // u != 0
#ifdef __CUDA_ARCH__
  return __ffsll(static_cast<long long>(u)) - 1;
#else
  return __builtin_ctzll(u);
#endif
}

OZAKI_HD bool is_finite(double x) { return ((bits_of(x) >> 52) & 0x7ff) != 0x7ff; }
OZAKI_HD bool is_nan(double x) { return x != x; }
OZAKI_HD bool sign_bit(double x) { return (bits_of(x) >> 63) != 0; }
OZAKI_HD double abs_value(double x) { return double_from_bits(bits_of(x) & ~(uint64_t(1) << 63)); }
OZAKI_HD double with_sign_of(double magnitude, double sign_source) {
  return sign_bit(sign_source) ? -magnitude : magnitude;
}
OZAKI_HD double infinity() { return double_from_bits(uint64_t(0x7ff) << 52); }
OZAKI_HD double quiet_nan() { return double_from_bits(uint64_t(0x7ff8) << 48); }

// Exact 2^e for -1022 <= e <= 1023, built from its bit pattern (no libm).
OZAKI_HD double pow2(int e) { return double_from_bits(uint64_t(e + 1023) << 52); }

// x held to [lo, hi]: per-row values that callers pass unchecked, computed in int64, kept defined.
OZAKI_HD int clamped_int(int64_t x, int lo, int hi) {
  return x < lo ? lo : (x > hi ? hi : static_cast<int>(x));
}
// x saturated to the int32 range.
OZAKI_HD int saturated_int(int64_t x) { return clamped_int(x, INT_MIN, INT_MAX); }

// -x and x + y for per-entry exponent arithmetic on caller-given row values (tau): the same
// instruction as int's, but wrapping modulo 2^32 where int's would overflow (no in-contract value
// comes near; the conversion back to int is modular on every compiler the project builds with).
OZAKI_HD int wrapping_negate(int x) { return static_cast<int>(0u - static_cast<unsigned>(x)); }
OZAKI_HD int wrapping_add(int x, int y) {
  return static_cast<int>(static_cast<unsigned>(x) + static_cast<unsigned>(y));
}

OZAKI_HD int highest_set_bit(uint64_t u) {  // u != 0
#ifdef __CUDA_ARCH__
  return 63 - __clzll(static_cast<long long>(u));
#else
  return 63 - __builtin_clzll(u);
#endif
}

// Binary exponent of a finite nonzero x: x = f * 2^e with 0.5 <= |f| < 1 (frexp's convention).
// Read from the bit pattern so host and device agree without libm (design.md: never log2).
OZAKI_HD int frexp_exponent(double x) {
  const uint64_t u = bits_of(x);
  const int biased = static_cast<int>((u >> 52) & 0x7ff);
  if (biased != 0) return biased - 1022;
  return highest_set_bit(u & ((uint64_t(1) << 52) - 1)) - 1073;  // subnormal
}

// Exponent of the lowest set bit of a finite nonzero x: x is an odd integer times 2^result.
OZAKI_HD int lowest_set_bit_exponent(double x) {
  const uint64_t u = bits_of(x);
  const int biased = static_cast<int>((u >> 52) & 0x7ff);
  const uint64_t mantissa = u & ((uint64_t(1) << 52) - 1);
  if (biased == 0) return count_trailing_zeros(mantissa) - 1074;
  return count_trailing_zeros(mantissa | (uint64_t(1) << 52)) + biased - 1075;
}

// RN(x * 2^e) with a single rounding, for any int e: exact whenever the result is normal,
// correctly rounded on the subnormal grid, +-Inf on overflow. (ldexp would do, but its device and
// host versions are separate implementations; this one is shared.)
OZAKI_HD double scale_by_power_of_two(double x, int e) {
  if (x == 0.0 || !is_finite(x)) return x;
  // 2^e a normal double: one IEEE multiplication is that single rounding (builds keep subnormals:
  // no flush to zero).
  if (e >= -1022 && e <= 1023) return x * pow2(e);
  const int ex = frexp_exponent(x);
  const long long t = static_cast<long long>(ex) + e;  // result = frac * 2^t, 0.5 <= |frac| < 1
  // frac = x * 2^-ex is exact: scale in two steps so each factor is a normal power of two.
  const int half = -ex / 2;
  const double frac = (x * pow2(half)) * pow2(-ex - half);
  if (t > 1024) return with_sign_of(infinity(), x);
  if (t >= -1021) return (frac * 2.0) * pow2(static_cast<int>(t) - 1);  // normal: exact
  if (t < -2022) return with_sign_of(0.0, x);                           // below half the least subnormal
  return (frac * pow2(-1000)) * pow2(static_cast<int>(t) + 1000);       // one rounding, on the last step
}

// ---- Split (docs/algorithm.md, "Split") ---------------------------------------------------------

// ceil(log2 k) for k >= 1, in integers (63 for every k past 2^62: no shift reaches 64).
OZAKI_HD int ceil_log2(int64_t k) {
  int c = 0;
  while (c < 63 && (int64_t(1) << c) < k) ++c;
  return c;
}

// beta: digits are integers with |d| <= 2^beta, so a k-term sum of digit products stays below
// 2^(2 beta + ceil(log2 k)) <= 2^24 and every FP16 x FP16 -> FP32 slice GEMM is exact.
// Returns < 1 when k is too large for any digit width (the caller reports it).
OZAKI_HD int digit_bits_for(int64_t k) {
  const int beta = (24 - ceil_log2(k)) / 2;
  return beta < kMaxDigitBits ? beta : kMaxDigitBits;
}

// beta of INT8 digits (backend="int8"): |d| <= 2^beta must fit INT8, and rounded digits reach
// +-2^beta, so beta <= 6 (+128 is not an INT8); k products of at most 2^(2 beta) must stay below
// 2^31 (INT32 holds 2^31 - 1), so k 2^(2 beta) < 2^31, i.e. 2 beta + ceil(log2(k + 1)) <= 31.
constexpr int kMaxInt8DigitBits = 6;
OZAKI_HD int int8_digit_bits_for(int64_t k) {
  const int beta = (31 - (k > (int64_t(1) << 62) ? 63 : ceil_log2(k + 1))) / 2;
  return beta < kMaxInt8DigitBits ? beta : kMaxInt8DigitBits;
}

// What the split needs to know about one row, folded entry by entry (and merged across threads
// on the GPU): tau with every finite |entry| < 2^tau (0 for a zero row), the bit span from tau
// down to the lowest set bit of any entry, and whether the row holds NaN or +-Inf.
struct RowStats {
  int max_exponent = INT_MIN;
  int lowest_bit = INT_MAX;
  bool nonfinite = false;

  OZAKI_HD void add(double x) {
    if (!is_finite(x)) {
      nonfinite = true;
    } else if (x != 0.0) {
      const int e = frexp_exponent(x);
      const int low = lowest_set_bit_exponent(x);
      max_exponent = e > max_exponent ? e : max_exponent;
      lowest_bit = low < lowest_bit ? low : lowest_bit;
    }
  }
  OZAKI_HD void merge(int other_max_exponent, int other_lowest_bit, bool other_nonfinite) {
    max_exponent = other_max_exponent > max_exponent ? other_max_exponent : max_exponent;
    lowest_bit = other_lowest_bit < lowest_bit ? other_lowest_bit : lowest_bit;
    nonfinite = nonfinite || other_nonfinite;
  }
  OZAKI_HD bool any_nonzero() const { return max_exponent != INT_MIN; }
  OZAKI_HD int tau() const { return any_nonzero() ? max_exponent : 0; }
  OZAKI_HD int bit_span() const { return any_nonzero() ? max_exponent - lowest_bit : 0; }
};

// Whether a row constrains the plans: nonzero (a bit span) and without NaN/Inf, whose entries of C
// get the IEEE value of the plain dot product instead (ozaki/_ops.py, RowStats.usable).
OZAKI_HD bool usable_row(int bit_span, bool nonfinite) { return bit_span > 0 && !nonfinite; }

// Digits are rounded to nearest (balanced), so each slice after the first adds beta + 1 bits.
OZAKI_HD int grid_step_bits(int beta) { return beta + 1; }

// Bits below a row's leading power of two that slice count s captures: beta + (s - 1) (beta + 1).
OZAKI_HD int bits_captured(int slices, int beta) { return beta + (slices - 1) * grid_step_bits(beta); }

// One step of the split: the next digit of remainder at grid 2^-(beta + p (beta + 1)), returned
// as the FP16-ready value d_p * 2^-beta (integer |d_p| <= 2^beta, exact in FP16); remainder keeps
// what is left. Every operation is exact: scaling by powers of two, rint, and subtracting from a
// value its own rounding to a grid.
OZAKI_HD double next_slice(double* remainder, int p, int beta) {
  const int grid = beta + p * grid_step_bits(beta);
  const double digit = rint(*remainder * pow2(grid));
  *remainder = *remainder - digit * pow2(-grid);
  return digit * pow2(-beta) + 0.0;  // + 0.0 turns -0 into +0
}

// Cuts x (|x| < 1, the entry scaled by 2^-tau of its row) into slices, so that
//   x = sum_p d_p * 2^-(beta + p (beta + 1)) + remainder,  |remainder| <= 2^-(bits_captured + 1).
template <typename Store>
OZAKI_HD void split_scaled_value(double x, int slices, int beta, Store store) {
  double remainder = x;
  for (int p = 0; p < slices; ++p) store(p, next_slice(&remainder, p, beta));
}

// The value that is split: an entry scaled by its row's 2^-tau; non-finite entries split as zero
// (their IEEE result is patched in afterwards, see nonfinite_dot).
OZAKI_HD double scaled_entry(double a, int tau) {
  return is_finite(a) ? scale_by_power_of_two(a, wrapping_negate(tau)) : 0.0;
}

// ---- Automatic slice count (docs/accuracy.md) ---------------------------------------------------

// Grid of the |A||B| estimate: magnitudes on 2^-r, so products lie on 2^(-2 r) and a k-term sum
// stays below 2^24 units; the FP16 GEMM with FP32 accumulation of these values is exact.
OZAKI_HD int magnitude_grid_bits(int64_t k) { return (24 - ceil_log2(k)) / 2; }

// Two fixed-point digits of |a| 2^-tau on the grid 2^-r, each an integer count of 2^-r below 2^r
// cut to 11 significant bits (FP16 holds it): |a| 2^-tau >= high + low 2^-r. The estimate
// multiplies high * high, high * low and low * high exactly and drops low * low, so it is a lower
// bound of (|A||B|)_ij 2^-(tau_a + tau_b) that resolves entries down to 2^(-2 r) of a row's maximum.
OZAKI_HD double fp16_grid_count(double units) {  // units < 2^12: keep its top 11 bits
  return units >= 2048.0 ? 2.0 * floor(units * 0.5) : units;
}
OZAKI_HD void magnitude_digits(double a, int tau, int r, double* high, double* low) {
  const double x = abs_value(scaled_entry(a, tau));  // < 1
  const double high_units = fp16_grid_count(floor(x * pow2(r)));
  const double rest = x - high_units * pow2(-r);  // exact: removes leading bits of x
  // rest < 2^-r unless the cut to 11 bits dropped one (only when r = 12, k <= 2): then no low digit
  const double low_units = rest < pow2(-r) ? fp16_grid_count(floor(rest * pow2(2 * r))) : 0.0;
  *high = high_units * pow2(-r);
  *low = low_units * pow2(-r);
}

// ---- Fixed-count check (ozaki/fixed_counts.py) ----------------------------------------------------

// ozaki::sampled_magnitudes sums sum_l |a_l| 2^-tau_a |b_l| 2^-tau_b in one fixed order on every
// device: lane t adds the terms l = t, t + kSampleLanes, t + 2 kSampleLanes, ... in turn
// (sampled_lane_sum), then the lanes are added pairwise, lane t += lane t + s for s = kSampleLanes / 2
// down to 1. Non-finite entries count as 0. Every operation is one IEEE float64 rounding, so the
// CPU and the GPU give the same bits. A term of two finite nonzero entries that underflows (in
// the scaling or the product) counts as the least positive double, not as 0: the check reads a
// sum of 0 as an exact zero of |A||B|, which no truncation can touch, where such an entry lies far
// below its rows' scales.
constexpr int kSampleLanes = 128;
constexpr double kLeastPositive = 4.9406564584124654e-324;  // 2^-1074

template <typename T>
OZAKI_HD double sampled_lane_sum(const T* a_row, int tau_a, const T* b_row, int tau_b, int64_t k,
                                 int lane) {
  double sum = 0.0;
  for (int64_t l = lane; l < k; l += kSampleLanes) {
    const double a = static_cast<double>(a_row[l]);
    const double b = static_cast<double>(b_row[l]);
    const double term = abs_value(scaled_entry(a, tau_a)) * abs_value(scaled_entry(b, tau_b));
    const bool nonzero = a != 0.0 && b != 0.0 && is_finite(a) && is_finite(b);
    sum += term == 0.0 && nonzero ? kLeastPositive : term;
  }
  return sum;
}

// ---- Sum (docs/algorithm.md, "Sum") --------------------------------------------------------------

// Where the exact product P(p, q) of A-slice p and B-slice q (0-based) lives in the workspace:
// the GEMM for B-slice q writes the stacked A-slices p = 0 .. rows_for(q) - 1 as one block of
// rows_for(q) * chunk_rows rows; blocks follow each other in q order. Fast mode keeps p + q < s.
struct PairLayout {
  int slices;
  bool fast;
  int64_t chunk_rows;  // rows of A in this chunk
  int64_t ld;          // leading dimension (columns) of the workspace

  OZAKI_HD int rows_for(int q) const { return fast ? slices - q : slices; }
  OZAKI_HD int64_t block_start(int q) const {  // in units of chunk_rows
    return fast ? int64_t(q) * slices - int64_t(q) * (q - 1) / 2 : int64_t(q) * slices;
  }
  OZAKI_HD int64_t total_blocks() const { return block_start(slices); }
  // Highest level p + q of a kept pair; levels run 0 .. top_level().
  OZAKI_HD int top_level() const { return fast ? slices - 1 : 2 * slices - 2; }
  OZAKI_HD int64_t index(int p, int q, int64_t i, int64_t j) const {
    return ((block_start(q) + p) * chunk_rows + i) * ld + j;
  }
};

// Error-free transformation: a + b = sum + error exactly (Knuth's TwoSum, no FMA involved).
OZAKI_HD double two_sum(double a, double b, double* error) {
  const double sum = a + b;
  const double b_virtual = sum - a;
  const double a_virtual = sum - b_virtual;
  *error = (a - a_virtual) + (b - b_virtual);
  return sum;
}

// The sum of the kept pairs of one level, sum over p + q = level of P(p, q), for N consecutive
// entries (i, j .. j + N - 1) of one row; load(index, values) reads P at index and the N - 1
// entries after it. Each P is an integer below 2^24 (2^31 for INT8 digits) in units of
// 2^(-2 beta), so the sum is exact in FP64 in any order; it is also what ozaki::slice_levels
// returns per level, so shards' level sums add up to the whole product's.
template <int N, typename Load>
OZAKI_HD void pair_level_sum(Load load, const PairLayout& layout, int64_t i, int64_t j, int level,
                             double* level_sum) {
  const int s = layout.slices;
  for (int c = 0; c < N; ++c) level_sum[c] = 0.0;
  const int p_first = level > s - 1 ? level - (s - 1) : 0;
  const int p_last = level < s - 1 ? level : s - 1;
#ifdef __CUDA_ARCH__
#pragma unroll 4
#endif
  for (int p = p_first; p <= p_last; ++p) {
    double values[N];
    load(layout.index(p, level - p, i, j), values);
    for (int c = 0; c < N; ++c) level_sum[c] += values[c];
  }
}

// sum over levels l of 2^(tau_sum - l w) L_l for N entries, where level_sums(l, sums) writes the
// exact level sums L_l of the N entries. Levels are combined from the smallest weight to the
// largest, with TwoSum compensation, in this one fixed order on every backend and for every N
// (each entry sees the same operations); the only roundings are the final compensated sum and the
// scaling by 2^tau_sum when the result is subnormal. Whether the level sums come straight from the
// slice products (sum_levels) or from k-shards added together (ozaki::round_levels), the same
// level sums give the same bits.
template <int N, typename LevelSums>
OZAKI_HD void combine_levels(LevelSums level_sums, int top_level, int w, const int* tau_sums,
                             double* results) {
  double sum[N], compensation[N];
  for (int c = 0; c < N; ++c) sum[c] = compensation[c] = 0.0;
  for (int level = top_level; level >= 0; --level) {
    double level_sum[N];
    level_sums(level, level_sum);
    const double weight = pow2(-level * w);
    for (int c = 0; c < N; ++c) {
      double error;
      sum[c] = two_sum(sum[c], level_sum[c] * weight, &error);
      compensation[c] += error;
    }
  }
  for (int c = 0; c < N; ++c) results[c] = scale_by_power_of_two(sum[c] + compensation[c], tau_sums[c]);
}

// sum over kept pairs of 2^(tau_a + tau_b - (p + q) w) P(p, q), for N consecutive entries
// (i, j .. j + N - 1) of one row, read by `load` as in pair_level_sum: all products of one level
// l = p + q share the weight 2^(-l w), so each level is summed exactly and the levels are combined
// by combine_levels. N > 1 only gives the GPU wide loads and several loads in flight per thread.
template <int N, typename Load>
OZAKI_HD void sum_levels(Load load, const PairLayout& layout, int64_t i, int64_t j, int beta,
                         const int* tau_sums, double* results) {
  const auto level_sums = [&](int level, double* level_sum) {
    pair_level_sum<N>(load, layout, i, j, level, level_sum);
  };
  combine_levels<N>(level_sums, layout.top_level(), grid_step_bits(beta), tau_sums, results);
}

// IEEE value of the plain dot product of a row of A and a column of B when either holds NaN or
// +-Inf (design.md, "Special values"): NaN if any NaN, any 0 * Inf, or infinite products of both
// signs; otherwise the signed infinity. A product of finite entries is infinite where it overflows
// the format T (its float64 value, exact for float32 entries, rounded to T). The finite products
// cannot change that result. b_step: the distance between consecutive entries of the column.
template <typename T>
OZAKI_HD double nonfinite_dot(const T* a_row, const T* b_col, int64_t k, int64_t b_step = 1) {
  bool positive_infinity = false;
  bool negative_infinity = false;
  for (int64_t l = 0; l < k; ++l) {
    const double a = static_cast<double>(a_row[l]);
    const double b = static_cast<double>(b_col[l * b_step]);
    if (is_nan(a) || is_nan(b)) return quiet_nan();
    const bool a_inf = !is_finite(a);
    const bool b_inf = !is_finite(b);
    if (!a_inf && !b_inf && is_finite(static_cast<double>(static_cast<T>(a * b)))) continue;
    if ((a_inf && b == 0.0) || (b_inf && a == 0.0)) return quiet_nan();
    if (sign_bit(a) != sign_bit(b)) negative_infinity = true; else positive_infinity = true;
  }
  if (positive_infinity && negative_infinity) return quiet_nan();
  if (negative_infinity) return -infinity();
  if (positive_infinity) return infinity();
  return quiet_nan();  // unreachable for a flagged row/column; NaN rather than a silent number
}

}  // namespace ozaki
