// Host/device-neutral core of exact scheme II (ozaki::gemm_crt_exact; docs/algorithm.md,
// "Exact scheme II").
//
// Each row of A and column of B is scaled by the power of two 2^E that makes every entry an
// integer (E = minus the exponent of the row's lowest set bit), so nothing is rounded: an entry is
// x = +-m 2^s with m its odd significand and 0 <= s < the row's bit span. The exact product
// X = A'B' is rebuilt from one INT8 GEMM per modulus, with enough moduli (up to 40) that
// P = p_1 ... p_N exceeds 2 |X|, and rounded once: the correctly rounded product, at any moduli
// count. Counts and constants are run-time values here (ExactCrt, computed once on the host and
// passed by value, about 3 KB of kernel parameters), so one kernel serves every count.
#pragma once

#include <algorithm>

#include "crt.h"

namespace ozaki {

constexpr int kExactMaxModuli = 40;
// Pairwise coprime, largest first: kModuli, then the primes below 193 in turn down to 71 (more,
// smaller ones would add under 6.2 bits each).
constexpr int kExactModuli[kExactMaxModuli] = {
    256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193,
    191, 181, 179, 173, 167, 163, 157, 151, 149, 139, 137, 131, 127, 113, 109, 107,
    103, 101, 97, 89, 83, 79, 73, 71};
constexpr bool extends_scheme_two_moduli() {
  for (int i = 0; i < kMaxModuli; ++i) {
    if (kExactModuli[i] != kModuli[i]) return false;
  }
  return true;
}
static_assert(extends_scheme_two_moduli(), "the exact moduli start with kModuli");
// P of 40 moduli has 292 bits; S = sum_i u_i P / p_i and q P stay below 41 P: 298 bits.
constexpr int kExactMaxLimbs = 10;
// Shifts s below this come from a table (exact_table_entry); larger ones (rows the planner does not
// send here, or finite entries of rows holding NaN/Inf) by square-and-multiply.
constexpr int kExactTableShifts = 256;

// What one modulus needs at run time.
struct ExactModulus {
  uint32_t p;
  uint32_t magic;   // ceil(2^(32 + shift) / p), below 2^32: x mod p by one multiply-high
  int shift;        // 7 for p > 128, 6 for 64 < p <= 128
  uint32_t c21;     // 2^21 mod p
  uint32_t c42;     // 2^42 mod p
  uint32_t c16;     // 2^16 mod p
  uint32_t offset;  // a multiple of p, at least 2^31: R + offset >= 0 for any INT32 result R
  uint32_t weight;  // (P / p)^-1 mod p, B's residues carry it (see exact_reconstruct)
};

// The reconstruction takes the moduli three at a time: for a group G, sum_{i in G} u_i P / p_i =
// v (P / prod G) with v = sum_{i in G} u_i (prod G / p_i) below 3 * 2^24, so S needs one
// multi-limb product per group instead of one per modulus.
constexpr int kExactGroupSize = 3;
constexpr int kExactMaxGroups = (kExactMaxModuli + kExactGroupSize - 1) / kExactGroupSize;
struct ExactGroup {
  int first, count;                    // moduli [first, first + count)
  uint32_t cofactor[kExactGroupSize];  // prod G / p_i, below 2^16
  uint32_t partial[kExactMaxLimbs];    // P / prod G in 32-bit limbs
};

// The constants of N moduli: per modulus, per group, and P in 32-bit limbs.
struct ExactCrt {
  int moduli;
  int limbs;  // 32-bit words that hold S < N P
  int groups;
  ExactModulus modulus[kExactMaxModuli];
  ExactGroup group[kExactMaxGroups];
  uint32_t product[kExactMaxLimbs];  // P
  double reciprocal;                 // RN(1 / RN(P))
};

// x mod p for 0 <= x < 2^31 (odd p), as remainder_below_2_31 with run-time constants: with
// M = ceil(2^(32 + shift) / p) = (2^(32 + shift) + e) / p, 0 <= e < p, floor(x M / 2^(32 + shift))
// is floor(x / p) as x e < 2^31 p <= 2^(32 + shift).
OZAKI_HD uint32_t exact_remainder(uint32_t x, const ExactModulus& c) {
#ifdef __CUDA_ARCH__
  const uint32_t q = __umulhi(x, c.magic) >> c.shift;
#else
  const uint32_t q = static_cast<uint32_t>((uint64_t(x) * c.magic) >> (32 + c.shift));
#endif
  return x - q * c.p;
}

// (base^e) mod p by square-and-multiply (p odd, base < p).
OZAKI_HD uint32_t power_mod(uint32_t base, int e, const ExactModulus& c) {
  uint32_t result = 1 % c.p, square = base;
  while (e > 0) {
    if (e & 1) result = exact_remainder(result * square, c);
    square = exact_remainder(square * square, c);
    e >>= 1;
  }
  return result;
}

// W 2^s mod p for any s >= 0 (W: 1 for A, the CRT weight for B).
OZAKI_HD uint32_t weighted_power_of_two(int s, bool weighted, const ExactModulus& c) {
  const uint32_t w = weighted ? c.weight : 1;
  if (c.p == 256) return s >= 8 ? 0 : (w << s) & 255u;
  return exact_remainder(w * power_mod(2, s, c), c);
}

// An entry's signed power for p: (+-W 2^s) mod p in [0, p), with the entry's sign, so that
// (m mod p) times it is W x mod p for x = +-m 2^s.
OZAKI_HD uint32_t signed_power(int s, bool negative, bool weighted, const ExactModulus& c) {
  const uint32_t t = weighted_power_of_two(s, weighted, c);
  return negative && t != 0 ? c.p - t : t;
}

// The bytes of the table of signed_power over the first `moduli` moduli, both signs and the shifts
// s < kExactTableShifts, one byte each (one operand's: A's unweighted, or B's).
OZAKI_HD constexpr int exact_table_bytes(int moduli) { return 2 * moduli * kExactTableShifts; }

// Where that table holds (negative, i, s); modulus i's entry is i * kExactTableShifts past modulus
// 0's.
OZAKI_HD int exact_table_index(int moduli, bool negative, int i, int s) {
  return ((negative ? moduli : 0) + i) * kExactTableShifts + s;
}

// Entry `index` of that table (exact_table_index's inverse).
OZAKI_HD uint8_t exact_table_entry(const ExactCrt& crt, bool weighted, int index) {
  const int row = index / kExactTableShifts, s = index - row * kExactTableShifts;
  const bool negative = row >= crt.moduli;
  return static_cast<uint8_t>(
      signed_power(s, negative, weighted, crt.modulus[negative ? row - crt.moduli : row]));
}

// A row's exponent E held to [-2^30, 2^30], once per row: far past every finite entry's range
// (plans' exponents stay within a few thousand), and an entry's exponent plus E stays an int.
constexpr int kExactMaxScaleExponent = 1 << 30;
OZAKI_HD int exact_scale_exponent(int e) {
  return clamped_int(e, -kExactMaxScaleExponent, kExactMaxScaleExponent);
}

// An entry a of a row scaled by 2^E (E = exact_scale_exponent of the row's), as sign, significand
// and shift: |a| 2^E = m 2^s. Entries the scale does not make integers (never in a plan's rows)
// are rounded to nearest, ties to even, as scaled_integer does; NaN, +-Inf and 0 give m = 0
// (their results are patched, see nonfinite_dot).
struct ExactEntry {
  uint64_t m;  // below 2^53 + 1
  int s;       // >= 0
  bool negative;
};
OZAKI_HD ExactEntry exact_entry(double a, int scale_exponent) {
  if (a == 0.0 || !is_finite(a)) return {0, 0, false};
  uint64_t m;
  int exponent;
  integer_significand(a, &m, &exponent);
  const int t = exponent + scale_exponent;
  if (t < 0) m = t <= -64 ? 0 : shift_right_to_nearest(m, -t);
  return {m, t < 0 ? 0 : t, sign_bit(a)};
}

// The symmetric residue of W x mod p for x = (-1)^negative m 2^s, from power = signed_power(s):
// m mod p from its 21-bit fields (low + mid (2^21 mod p) + high (2^42 mod p), below 2^29, one
// remainder), z = (m mod p) power below 2^16, and ((z + h) mod p) - h for h = (p - 1) / 2. For
// p = 256, the low byte of (m mod 2^21) power, read as two's complement.
OZAKI_HD int exact_residue(const ExactEntry& x, uint32_t power, const ExactModulus& c) {
  constexpr uint64_t mask = (uint64_t(1) << 21) - 1;
  const uint32_t low = static_cast<uint32_t>(x.m & mask);
  if (c.p == 256) return static_cast<int8_t>(static_cast<uint8_t>(low * power));
  const uint32_t mid = static_cast<uint32_t>((x.m >> 21) & mask);
  const uint32_t high = static_cast<uint32_t>(x.m >> 42);  // at most 2^11
  const uint32_t z = exact_remainder(low + mid * c.c21 + high * c.c42, c) * power;
  const int half = static_cast<int>(c.p - 1) / 2;
  return static_cast<int>(exact_remainder(z + half, c)) - half;
}

// exact_residue for modulus I of kExactModuli with its constants known at compile time: the same
// value, the remainders by immediates (the CUDA residue pass unrolls its moduli with it for the
// usual counts, csrc/cuda/crt.cu); the second by one multiply-high, as z + h < 2^16 (with
// M = ceil(2^32 / p) = (2^32 + e) / p, e < p, floor(y M / 2^32) = floor(y / p) for y e < 2^32).
template <int I>
OZAKI_HD int exact_residue_of(const ExactEntry& x, uint32_t power) {
  constexpr uint32_t p = kExactModuli[I];
  constexpr uint64_t mask = (uint64_t(1) << 21) - 1;
  const uint32_t low = static_cast<uint32_t>(x.m & mask);
  if constexpr (p == 256) {
    return static_cast<int8_t>(static_cast<uint8_t>(low * power));
  } else {
    constexpr uint32_t c21 = (uint32_t(1) << 21) % p;
    constexpr uint32_t c42 = static_cast<uint32_t>((uint64_t(1) << 42) % p);
    const uint32_t mid = static_cast<uint32_t>((x.m >> 21) & mask);
    const uint32_t high = static_cast<uint32_t>(x.m >> 42);
    const uint32_t sum = low + mid * c21 + high * c42;
    constexpr int shift = p > 128 ? 7 : 6;
    constexpr uint32_t magic = static_cast<uint32_t>(((uint64_t(1) << (32 + shift)) + p - 1) / p);
    constexpr uint32_t magic_small = static_cast<uint32_t>(((uint64_t(1) << 32) + p - 1) / p);
    constexpr uint32_t half = (p - 1) / 2;
#ifdef __CUDA_ARCH__
    const uint32_t z = (sum - (__umulhi(sum, magic) >> shift) * p) * power;
    const uint32_t q = __umulhi(z + half, magic_small);
#else
    const uint32_t z =
        (sum - static_cast<uint32_t>((uint64_t(sum) * magic) >> (32 + shift)) * p) * power;
    const uint32_t q = static_cast<uint32_t>((uint64_t(z + half) * magic_small) >> 32);
#endif
    return static_cast<int>(z) - static_cast<int>(q * p);
  }
}

// R mod p in [0, p) for the GEMM result R of one modulus, |R| <= 2^31 - 2^14 (k < 2^17 products of
// residues of at most 128 in magnitude; R + offset must not pass 2^32).
OZAKI_HD uint32_t exact_unsigned_residue(int32_t R, const ExactModulus& c) {
  if (c.p == 256) return static_cast<uint32_t>(R) & 255u;
  const uint32_t x = static_cast<uint32_t>(R) + c.offset;  // R + offset in [0, 2^32)
  return exact_remainder((x >> 16) * c.c16 + (x & 0xffffu), c);  // below 2^25
}

// RN(sign * value * 2^unit) on the grid of `format` for value = sum_w words[w] 2^(32 w): the top
// 62 bits and a sticky bit of the rest round like the whole, as the rounding keeps at most 53
// bits. One ascending pass keeps the top nonzero word, the two below it and whether anything lies
// under those, so every index is a constant (no local memory on the GPU).
template <int L>
OZAKI_HD double round_words_to_format(const uint32_t (&words)[L], bool negative, int64_t unit,
                                      RoundingFormat format) {
  int top_word = -1;
  uint32_t high = 0, mid = 0, low = 0;  // words top, top - 1 and top - 2 (0 below word 0)
  bool under = false;                   // any bit below word top - 2
  uint32_t previous = 0, before = 0;    // running: words w - 1 and w - 2
  bool running_under = false;           // running: any bit below word w - 2
#pragma unroll
  for (int w = 0; w < L; ++w) {
    if (words[w] != 0) {
      top_word = w;
      high = words[w];
      mid = previous;
      low = before;
      under = running_under;
    }
    running_under = running_under || before != 0;
    before = previous;
    previous = words[w];
  }
  if (top_word < 0) return 0.0;
  const int high_bit = highest_set_bit(high);
  if (top_word == 0) return round_word_to_format(high, negative, unit, format);
  const uint64_t upper = (uint64_t(high) << 32) | mid;  // words top and top - 1
  if (top_word == 1 && high_bit <= 29) return round_word_to_format(upper, negative, unit, format);
  // Keep bits [drop, top] of value, top = 32 top_word + high_bit, drop = top - 61: relative to
  // the three words (base 32 (top_word - 2)) that is from bit d = high_bit + 3, in [3, 34].
  const int d = high_bit + 3;
  uint64_t kept;
  bool sticky;
  if (d <= 32) {
    kept = (upper << (32 - d)) | (uint64_t(low) >> d);
    sticky = (uint64_t(low) & ((uint64_t(1) << d) - 1)) != 0;
  } else {
    kept = upper >> (d - 32);
    sticky = low != 0 || (upper & ((uint64_t(1) << (d - 32)) - 1)) != 0;
  }
  const int64_t drop = 32 * int64_t(top_word - 2) + d;
  return round_word_to_format(2 * kept + ((sticky || under) ? 1 : 0), negative, unit + drop - 1,
                              format);
}

// The exact X = (A'B')_ij, |X| < P / 2, from the INT32 GEMM results R_i = W_i X mod p_i (any
// representative), rounded once: RN(X 2^unit) in `format`, unit = -(E_a + E_b); L = crt.limbs.
// As crt_reconstruct: u_i = R_i mod p_i, S = sum_i u_i P / p_i = X mod P (add), then
// q = rint(S / P) (the plan keeps |X| / P at most 1/2 - 2^-30) and X = S - q P (rounded).
template <int L>
struct ExactSum {
  uint64_t limbs[L];  // S in 32-bit limbs, each below 14 * 2^58

  OZAKI_HD void clear() {
#pragma unroll
    for (int w = 0; w < L; ++w) limbs[w] = 0;
  }
  // S += sum over group g of u_i P / p_i, from the group's GEMM results R[0 .. count) (reduced:
  // the results are the u_i already, the reduced GEMMs' bytes).
  template <bool reduced = false>
  OZAKI_HD void add_group(const ExactCrt& crt, int g, const int32_t (&R)[kExactGroupSize]) {
    const ExactGroup& group = crt.group[g];
    uint32_t v = 0;
#pragma unroll
    for (int r = 0; r < kExactGroupSize; ++r) {
      if (r < group.count) {
        const uint32_t u = reduced ? static_cast<uint32_t>(R[r])
                                   : exact_unsigned_residue(R[r], crt.modulus[group.first + r]);
        v += u * group.cofactor[r];
      }
    }
#pragma unroll
    for (int w = 0; w < L; ++w) limbs[w] += static_cast<uint64_t>(v) * group.partial[w];
  }
  OZAKI_HD double rounded(const ExactCrt& crt, int64_t unit, RoundingFormat format) const {
    // S / P from the limbs: the Horner sum, its conversions and the reciprocal err by far less
    // than 2^-30 for S / P < 40.
    double s = 0.0;
#pragma unroll
    for (int w = L - 1; w >= 0; --w) s = s * 4294967296.0 + static_cast<double>(limbs[w]);
    const auto q = static_cast<uint64_t>(rint(s * crt.reciprocal));  // in [0, 40]
    // X = S - q P carried into two's complement words, then its sign and magnitude.
    uint32_t word[L];
    int64_t carry = 0;
#pragma unroll
    for (int w = 0; w < L; ++w) {
      const int64_t t = static_cast<int64_t>(limbs[w]) -
                        static_cast<int64_t>(q * crt.product[w]) + carry;
      word[w] = static_cast<uint32_t>(t);
      carry = t >> 32;  // floor(t / 2^32)
    }
    const bool negative = carry < 0;
    if (negative) {  // |X| = -X: complement and add one
      uint64_t add = 1;
#pragma unroll
      for (int w = 0; w < L; ++w) {
        const uint64_t t = uint64_t(~word[w]) + add;
        word[w] = static_cast<uint32_t>(t);
        add = t >> 32;
      }
    }
    return round_words_to_format<L>(word, negative, unit, format);
  }
};

// One entry: load(i) gives R_i.
template <int L, typename Load>
OZAKI_HD double exact_reconstruct(const ExactCrt& crt, Load load, int64_t unit,
                                  RoundingFormat format) {
  ExactSum<L> sum;
  sum.clear();
  for (int g = 0; g < crt.groups; ++g) {
    int32_t R[kExactGroupSize] = {0, 0, 0};
    for (int r = 0; r < crt.group[g].count; ++r) R[r] = load(crt.group[g].first + r);
    sum.add_group(crt, g, R);
  }
  return sum.rounded(crt, unit, format);
}

// Runs f(std::integral_constant<int, L>{}) for the limb count of crt (2 .. kExactMaxLimbs; more
// limbs than needed only hold zeros, so a count past either end runs with the nearest).
template <typename F>
void with_limb_count(const ExactCrt& crt, F f) {
  with_constant<2, kExactMaxLimbs>(std::clamp(crt.limbs, 2, kExactMaxLimbs), f);
}

// ---- Host-side constants ----------------------------------------------------------------------

// The constants of the first `moduli` exact moduli (1 <= moduli <= kExactMaxModuli).
inline ExactCrt exact_crt(int moduli) {
  ExactCrt crt{};
  crt.moduli = moduli;
  // P in 32-bit limbs, and P / prod G the same way.
  const auto product_without = [&](int skip_first, int skip_count, uint32_t* out) {
    const auto limbs =
        moduli_product_limbs<kExactMaxLimbs>(kExactModuli, moduli, skip_first, skip_count);
    std::copy(limbs.w, limbs.w + kExactMaxLimbs, out);
  };
  product_without(0, 0, crt.product);
  int top = kExactMaxLimbs - 1;
  while (top > 0 && crt.product[top] == 0) --top;
  // S and q P are below 41 P: the bits of P and 6 more (40 moduli: 292 + 6 bits, in 10 words)
  const int bits = 32 * top + highest_set_bit(crt.product[top]) + 1;
  crt.limbs = std::max(2, (bits + 6 + 31) / 32);  // 2 .. kExactMaxLimbs (with_limb_count)
  double p_value = 0.0;
  for (int w = kExactMaxLimbs - 1; w >= 0; --w) p_value = p_value * 4294967296.0 + crt.product[w];
  crt.reciprocal = 1.0 / p_value;
  crt.groups = (moduli + kExactGroupSize - 1) / kExactGroupSize;
  for (int g = 0; g < crt.groups; ++g) {
    ExactGroup& group = crt.group[g];
    group.first = g * kExactGroupSize;
    group.count = std::min(kExactGroupSize, moduli - group.first);
    product_without(group.first, group.count, group.partial);
    for (int r = 0; r < group.count; ++r) {
      group.cofactor[r] = 1;
      for (int t = 0; t < group.count; ++t) {
        if (t != r) group.cofactor[r] *= kExactModuli[group.first + t];
      }
    }
  }
  for (int i = 0; i < moduli; ++i) {
    const uint32_t p = kExactModuli[i];
    ExactModulus& c = crt.modulus[i];
    c.p = p;
    c.shift = p > 128 ? 7 : 6;
    c.magic = static_cast<uint32_t>(((uint64_t(1) << (32 + c.shift)) + p - 1) / p);
    c.c21 = static_cast<uint32_t>((uint64_t(1) << 21) % p);
    c.c42 = static_cast<uint32_t>((uint64_t(1) << 42) % p);
    c.c16 = static_cast<uint32_t>((uint64_t(1) << 16) % p);
    c.offset = static_cast<uint32_t>(((uint64_t(1) << 31) + p - 1) / p * p);
    // (P / p_i) mod p_i, the product of the other moduli, then its inverse
    uint64_t residue = 1;
    for (int j = 0; j < moduli; ++j) {
      if (j != i) residue = residue * kExactModuli[j] % p;
    }
    c.weight = static_cast<uint32_t>(inverse_mod(static_cast<int>(residue), static_cast<int>(p)));
  }
  return crt;
}

}  // namespace ozaki
