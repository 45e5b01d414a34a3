// Exact accumulation and correct rounding (rounding="nearest"; docs/accuracy.md).
//
// Host/device-neutral like scheme.h: the CPU and CUDA backends run this very code. Values are
// held as long fixed-point integers (32-bit limbs in int64 words, so additions carry lazily) and
// rounded once, to nearest-even, onto the float64 or float32 grid, subnormals and overflow
// included. Every step is integer arithmetic or an exact floating-point operation.
#pragma once

#include "scheme.h"

namespace ozaki {

// Limbs for the exact sum of the slice-product levels: the top level sits (2 * kMaxSlices - 2) * 12
// bits above the bottom one and a level sum needs 30 bits and a sign.
constexpr int kLevelLimbs = ((2 * kMaxSlices - 2) * (kMaxDigitBits + 1) + 64) / 32 + 1;
// Limbs for an exact dot product of finite doubles (exact_dot_rounded): each operand row spans at
// most 2098 bits (2^1024 down to 2^-1074), k < 2^29 terms (INT8 slices' limit, the largest k of
// rounding="nearest") add 29 bits and the sign 2, and one limb more than the widest accumulator
// keeps clear() from ever capping it.
constexpr int kDotWidestLimbs = (2 * 2098 + 29 + 2 + 64) / 32 + 1;
constexpr int kDotLimbs = kDotWidestLimbs + 1;

// The target format of the final rounding.
struct RoundingFormat {
  int precision;     // significand bits: 53 (float64) or 24 (float32)
  int min_exponent;  // exponent of the least subnormal: -1074 or -149
};
constexpr RoundingFormat kFloat64Format{53, -1074};
constexpr RoundingFormat kFloat32Format{24, -149};

OZAKI_HD uint64_t high_product_bits(uint64_t a, uint64_t b) {
#ifdef __CUDA_ARCH__
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

// value = sum_i limb[i] * 2^(32 i) over limb[0 .. count). Limbs may hold any int64 between
// normalize() calls; each add() moves a limb by less than 2^32, so limbs stay inside the int64
// range for up to 2^30 additions per limb.
template <int MaxLimbs>
struct LongInteger {
  int64_t limb[MaxLimbs];
  int count;

  OZAKI_HD void clear(int limbs) {
    count = limbs < MaxLimbs ? limbs : MaxLimbs;
    for (int i = 0; i < count; ++i) limb[i] = 0;
  }

  // value += n * 2^bit, for |n| < 2^32 and, when n != 0, 0 <= bit < 32 * (count - 1).
  OZAKI_HD void add(int64_t n, int bit) {
    if (n == 0) return;
    const int index = bit >> 5;
    const int64_t shifted = n * (int64_t(1) << (bit & 31));  // |shifted| < 2^63
    const int64_t low = shifted & 0xffffffffLL;             // 0 <= low < 2^32
    limb[index] += low;
    limb[index + 1] += (shifted - low) / (int64_t(1) << 32);  // exact division
  }

  // value += n * 2^bit for |n| < 2^62: add() of n's two parts below 2^31 in magnitude, both of
  // n's sign. The high part, at bit + 31, is nonzero only where |n| >= 2^31; there bit + 31 too
  // must lie below 32 * (count - 1).
  OZAKI_HD void add_wide(int64_t n, int bit) {
    const int64_t high = n / (int64_t(1) << 31);  // toward zero
    add(n - high * (int64_t(1) << 31), bit);
    add(high, bit + 31);
  }

  // Brings every limb into [0, 2^32) as the magnitude of the value; returns whether it is
  // negative. The top limb is headroom, so the final carry is 0 or -1.
  OZAKI_HD bool normalize() {
    int64_t carry = 0;
    for (int i = 0; i < count; ++i) {
      const int64_t t = limb[i] + carry;
      const int64_t low = t & 0xffffffffLL;
      limb[i] = low;
      carry = (t - low) / (int64_t(1) << 32);
    }
    if (carry >= 0) return false;
    int64_t plus_one = 1;  // two's complement negation: ~x + 1
    for (int i = 0; i < count; ++i) {
      const int64_t t = (limb[i] ^ 0xffffffffLL) + plus_one;
      limb[i] = t & 0xffffffffLL;
      plus_one = t >> 32;
    }
    return true;
  }

  // After normalize(): bit i of the magnitude (0 outside the limbs).
  OZAKI_HD int bit_at(int64_t i) const {
    if (i < 0 || i >= 32 * int64_t(count)) return 0;
    return static_cast<int>((limb[i >> 5] >> (i & 31)) & 1);
  }

  // After normalize(): bits [first, first + width) of the magnitude, first >= 0, width <= 60.
  OZAKI_HD uint64_t bits(int64_t first, int width) const {
    const int64_t w = first >> 5;
    const int shift = static_cast<int>(first & 31);
    const uint64_t low = limb_or_zero(w) | (limb_or_zero(w + 1) << 32);
    const uint64_t high = limb_or_zero(w + 2);
    const uint64_t window = (low >> shift) | (shift != 0 ? high << (64 - shift) : 0);
    return window & ((uint64_t(1) << width) - 1);
  }

  OZAKI_HD uint64_t limb_or_zero(int64_t w) const {
    return w >= 0 && w < count ? static_cast<uint64_t>(limb[w]) : 0;
  }

  // After normalize(): whether any bit below position i is set.
  OZAKI_HD bool any_below(int64_t i) const {
    if (i <= 0) return false;
    const int64_t full = i >> 5;
    for (int64_t w = 0; w < full && w < count; ++w) {
      if (limb[w] != 0) return true;
    }
    if (full >= count) return false;
    const int64_t mask = (int64_t(1) << (i & 31)) - 1;
    return (limb[full] & mask) != 0;
  }

  // After normalize(): position of the highest set bit, or -1 for zero.
  OZAKI_HD int64_t top_bit() const {
    for (int w = count - 1; w >= 0; --w) {
      if (limb[w] != 0) return 32 * int64_t(w) + highest_set_bit(static_cast<uint64_t>(limb[w]));
    }
    return -1;
  }
};

// RN(sign * magnitude * 2^unit) on the grid of `format`, ties to even, as a double (exactly
// representable in the format; +-Inf past its largest finite value when the caller casts to
// float). An exact zero is +0; a nonzero value that rounds to zero keeps its sign.
template <int MaxLimbs>
OZAKI_HD double round_to_format(const LongInteger<MaxLimbs>& magnitude, bool negative, int64_t unit,
                                RoundingFormat format) {
  const int64_t top = magnitude.top_bit();
  if (top < 0) return 0.0;
  const int64_t exponent = top + unit;  // value in [2^exponent, 2^(exponent + 1))
  int64_t lowest_kept = exponent - (format.precision - 1);
  if (lowest_kept < format.min_exponent) lowest_kept = format.min_exponent;
  const int64_t first = lowest_kept - unit;  // bit index of the last kept bit
  uint64_t significand;
  if (first <= 0) {
    significand = magnitude.bits(0, static_cast<int>(top + 1));  // exact: nothing is cut off
  } else {
    significand = first <= top ? magnitude.bits(first, static_cast<int>(top - first + 1)) : 0;
    const bool half = magnitude.bit_at(first - 1) != 0;
    const bool sticky = magnitude.any_below(first - 1);
    if (half && (sticky || (significand & 1))) ++significand;
  }
  const int64_t scale = first <= 0 ? unit : lowest_kept;
  // significand <= 2^precision is exact in a double; the scaling is exact or overflows to Inf.
  const int clamped = scale > 4096 ? 4096 : (scale < -4096 ? -4096 : static_cast<int>(scale));
  const double value = scale_by_power_of_two(static_cast<double>(significand), clamped);
  return negative ? -value : value;
}

template <typename T>
OZAKI_HD RoundingFormat format_of() {
  return sizeof(T) == sizeof(double) ? kFloat64Format : kFloat32Format;
}

// How far the kept slice products of one entry can be from its exact value, as
// multiple * 2^shift units of nearest_from_levels. Per term l of the dot product the split
// leaves |r| <= 2^(-s w) of each scaled operand and fast mode drops pairs of level >= s, together
// at most (2 s + 1) 2^(-s w) (docs/accuracy.md); the bound is zero when every pair of two fully
// captured rows is kept.
struct DroppedBound {
  int64_t multiple;
  int shift;
};
OZAKI_HD DroppedBound dropped_bound(const PairLayout& layout, int beta, int64_t k, int span_a,
                                    int span_b) {
  const int s = layout.slices;
  const int captured = bits_captured(s, beta);
  if (!layout.fast && span_a <= captured && span_b <= captured) return {0, 0};
  const int w = grid_step_bits(beta);
  return {k * (2 * s + 1), 2 * beta + (layout.top_level() - s) * w};
}

// low -= bound and high += bound, bound = dropped.multiple * 2^dropped.shift units: the ends of the
// interval the dropped part leaves. multiple = k (2 s + 1) reaches 2^36 with INT8 digits
// (k < 2^29), past add's 2^32, so it goes in through add_wide, as the level sums do (its high part
// is nonzero only where multiple >= 2^31, that is s >= 2, where its bit stays within the limbs
// that nearest_from_level_sums clears).
template <int MaxLimbs>
OZAKI_HD void widen_by_dropped(LongInteger<MaxLimbs>& low, LongInteger<MaxLimbs>& high,
                               DroppedBound dropped) {
  low.add_wide(-dropped.multiple, dropped.shift);
  high.add_wide(dropped.multiple, dropped.shift);
}

// add_wide's limit on the units of one level sum: 2^62.
constexpr double kLevelUnitsLimit = 4611686018427387904.0;

// Correctly rounded sum over levels l of 2^(tau_sum - l w) L_l (rounding="nearest"), where
// level_sums(l, sum) writes the exact level sum L_l of one entry (csrc/scheme.h, pair_level_sum).
//
// The level sums are exact integers below 2^37 in units of 2^(-2 beta) at level weight 2^(-l w);
// they are added exactly into a long integer whose bit 0 weighs
// 2^(tau_sum - 2 beta - top_level * w). When the kept pairs are the whole exact product
// (dropped.multiple == 0) that integer is rounded once. Otherwise the dropped part (slices past
// the split, or the pairs fast mode skips) is at most dropped.multiple * 2^dropped.shift units; the
// result is RN(value) only when both ends of that interval round to the same number; else
// *undecided is set and the caller computes the entry exactly (exact_dot_rounded).
template <typename LevelSums>
OZAKI_HD double nearest_from_level_sums(LevelSums level_sums, int top_level, int w, int beta,
                                        int tau_sum, DroppedBound dropped, RoundingFormat format,
                                        bool* undecided) {
  LongInteger<kLevelLimbs> low;
  low.clear((top_level * w + 64) / 32 + 1);
  *undecided = false;
  for (int level = top_level; level >= 0; --level) {
    double level_sum[1];
    level_sums(level, level_sum);
    // An integer below 2^37 once scaled by 2^(2 beta) (2^30 for FP16 digits): exact. Sums that
    // cannot come from slice products (non-finite or past 2^62 units: only an internal operator
    // fed other values) give NaN rather than an undefined conversion.
    const double scaled = level_sum[0] * pow2(2 * beta);
    if (!(scaled > -kLevelUnitsLimit && scaled < kLevelUnitsLimit)) return quiet_nan();
    low.add_wide(static_cast<int64_t>(scaled), (top_level - level) * w);
  }
  const int64_t unit = int64_t(tau_sum) - 2 * beta - int64_t(top_level) * w;
  if (dropped.multiple == 0) {
    const bool negative = low.normalize();
    return round_to_format(low, negative, unit, format);
  }
  LongInteger<kLevelLimbs> high = low;
  widen_by_dropped(low, high, dropped);
  const bool low_negative = low.normalize();
  const bool high_negative = high.normalize();
  const double below = round_to_format(low, low_negative, unit, format);
  const double above = round_to_format(high, high_negative, unit, format);
  if (bits_of(below) != bits_of(above)) *undecided = true;
  return above;
}

// Correctly rounded sum of the kept slice products of entry (i, j), read by `load` as in
// pair_level_sum (see nearest_from_level_sums).
template <typename Load>
OZAKI_HD double nearest_from_levels(Load load, const PairLayout& layout, int64_t i, int64_t j,
                                    int beta, int tau_sum, DroppedBound dropped,
                                    RoundingFormat format, bool* undecided) {
  const auto level_sums = [&](int level, double* level_sum) {
    pair_level_sum<1>(load, layout, i, j, level, level_sum);
  };
  return nearest_from_level_sums(level_sums, layout.top_level(), grid_step_bits(beta), beta,
                                 tau_sum, dropped, format, undecided);
}

// |x| = m 2^e read straight from the fields of a finite x's bits (m below 2^53, trailing zeros
// kept), zero and subnormals included.
OZAKI_HD void significand_fields(uint64_t bits, uint64_t* m, int* e) {
  const int biased = static_cast<int>((bits >> 52) & 0x7ff);
  *m = bits & ((uint64_t(1) << 52) - 1);
  *e = -1074;
  if (biased != 0) {
    *m |= uint64_t(1) << 52;
    *e = biased - 1075;
  }
}

// Splits a finite nonzero x into sign, odd-or-zero-trailing integer significand and exponent of
// its lowest set bit: |x| = significand * 2^exponent.
OZAKI_HD void integer_significand(double x, uint64_t* significand, int* exponent) {
  uint64_t m;
  int e;
  significand_fields(bits_of(x), &m, &e);
  const int zeros = count_trailing_zeros(m);
  *significand = m >> zeros;
  *exponent = e + zeros;
}

// The product a[l] * b[l] of two finite doubles as sign * significand_a * significand_b *
// 2^exponent, with odd-or-zero-trailing integer significands; zero when either factor is.
struct ExactTerm {
  bool zero;
  bool negative;
  uint64_t significand_a, significand_b;
  int exponent;

  template <typename T>
  OZAKI_HD static ExactTerm read(T a, T b) {
    const double x = static_cast<double>(a);
    const double y = static_cast<double>(b);
    ExactTerm term{};
    term.zero = x == 0.0 || y == 0.0;
    if (term.zero) return term;
    int ex, ey;
    integer_significand(x, &term.significand_a, &ex);
    integer_significand(y, &term.significand_b, &ey);
    term.exponent = ex + ey;
    term.negative = sign_bit(x) != sign_bit(y);
    return term;
  }

  // One past the highest set bit of the product.
  OZAKI_HD int top_bit() const {
    return exponent + highest_set_bit(significand_a) + highest_set_bit(significand_b) + 1;
  }
};

// RN(sum_l a[l] * b[l]) for finite rows, computed exactly: every product is a 106-bit integer
// times a power of two, added into one long accumulator whose bit 0 weighs 2^lowest (the lowest
// set bit of any product) and whose top covers the highest product bit plus ceil(log2 k) + 1.
// Both ends are read from the terms themselves in a first pass, not from the rows' statistics,
// so that no input (rows that are not what their statistics say, through a stale kept operand or
// an internal operator) can place a term outside the accumulator. The slow path of
// rounding="nearest", taken by entries the slice products leave undecided.
template <typename T>
OZAKI_HD double exact_dot_rounded(const T* a, const T* b, int64_t k, RoundingFormat format) {
  int lowest = 0, highest = 0;
  bool any = false;
  for (int64_t l = 0; l < k; ++l) {
    const ExactTerm term = ExactTerm::read(a[l], b[l]);
    if (term.zero) continue;
    const int top = term.top_bit();
    lowest = any && lowest < term.exponent ? lowest : term.exponent;
    highest = any && highest > top ? highest : top;
    any = true;
  }
  if (!any) return 0.0;
  LongInteger<kDotLimbs> sum;
  // finite doubles keep highest - lowest below 2 * 2098 bits: within kDotWidestLimbs
  sum.clear(static_cast<int>((int64_t(highest) - lowest + ceil_log2(k) + 2 + 64) / 32 + 1));
  for (int64_t l = 0; l < k; ++l) {
    const ExactTerm term = ExactTerm::read(a[l], b[l]);
    if (term.zero) continue;
    const uint64_t low = term.significand_a * term.significand_b;
    const uint64_t high = high_product_bits(term.significand_a, term.significand_b);
    const int offset = term.exponent - lowest;
    const int64_t sign = term.negative ? -1 : 1;
    sum.add(sign * static_cast<int64_t>(low & 0xffffffffULL), offset);
    sum.add(sign * static_cast<int64_t>(low >> 32), offset + 32);
    sum.add(sign * static_cast<int64_t>(high & 0xffffffffULL), offset + 64);
    sum.add(sign * static_cast<int64_t>(high >> 32), offset + 96);
  }
  const bool negative = sum.normalize();
  return round_to_format(sum, negative, lowest, format);
}

}  // namespace ozaki
