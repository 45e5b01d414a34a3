// Host/device-neutral core of Ozaki scheme II (backend="crt"; docs/algorithm.md, "Scheme II").
//
// Rows of A and columns of B are scaled by numbers with 5-bit significands (row_scale) and rounded
// to integers A', B'; A'B' is computed exactly from one INT8 GEMM per modulus on symmetric
// residues and rebuilt by the Chinese Remainder Theorem; the exact quotient of that integer by the
// scales is rounded once to the output format. Like scheme.h, this code runs unchanged on the CPU
// and the GPU, in integer arithmetic or exact floating point, so both backends return the same
// bits.
#pragma once

#include <cmath>
#include <type_traits>

#include "exact.h"

namespace ozaki {

constexpr int kMaxModuli = 16;
// Pairwise coprime, largest first (greedy from 256 down). A residue of each fits INT8:
// [-128, 127] for 256, [-(p - 1) / 2, (p - 1) / 2] for the odd ones.
constexpr int kModuli[kMaxModuli] = {256, 255, 253, 251, 247, 241, 239, 233,
                                     229, 227, 223, 217, 211, 199, 197, 193};
// Products of residues are at most 2^14: k of them stay below 2^31 (exact INT32 accumulation).
constexpr int64_t kCrtMaxInner = (int64_t(1) << 17) - 1;
// Rows of stored INT8 residues are padded with zeros to a multiple of this many entries (16 bytes).
constexpr int64_t kResidueRowAlign = 16;
// Rounded operands are int64: every |A'_il| <= 2^62 + 1/2.
constexpr int kCrtMaxScaleBits = 62;
// Norm bounds use squares of magnitudes rounded up onto the grid 2^-16 of the row's maximum.
constexpr int kNormGridBits = 16;
// Magnitude digits of the plan's estimate (magnitude_digit): an entry of a row's RMS size gets
// about this many bits.
constexpr int kCrtMagnitudeHeadroomBits = 5;

// Constants of the reconstruction for the first N moduli, all computed at compile time so the
// kernels see them as immediates: P = p_1 ... p_N and, per modulus, P / p_i in 32-bit limbs and
// (P / p_i)^-1 mod p_i.
template <int W>
struct LimbWords {
  uint32_t w[W];
};
using Limbs = LimbWords<4>;
// The product of moduli[0 .. n) except moduli[skip_first .. skip_first + skip_count), in W 32-bit
// limbs (small-factor multiplications with carries).
template <int W>
constexpr LimbWords<W> moduli_product_limbs(const int* moduli, int n, int skip_first,
                                            int skip_count) {
  LimbWords<W> out{};
  out.w[0] = 1;
  for (int j = 0; j < n; ++j) {
    if (j >= skip_first && j < skip_first + skip_count) continue;
    uint64_t carry = 0;
    for (int w = 0; w < W; ++w) {
      const uint64_t t = uint64_t(out.w[w]) * uint64_t(moduli[j]) + carry;
      out.w[w] = static_cast<uint32_t>(t);
      carry = t >> 32;
    }
  }
  return out;
}
// prod_{j < n, j != skip} p_j as four 32-bit limbs (skip = -1: all of them).
constexpr Limbs product_limbs(int n, int skip) {
  return moduli_product_limbs<4>(kModuli, n, skip, skip >= 0 ? 1 : 0);
}
// x^-1 mod p for x coprime to p (by search: p <= 256).
constexpr int inverse_mod(int x, int p) {
  for (int inverse = 1; inverse < p; ++inverse) {
    if ((inverse * (x % p)) % p == 1) return inverse;
  }
  return 0;  // unreachable for coprime x and p
}
// (prod_{j < n, j != i} p_j)^-1 mod p_i.
constexpr int partial_inverse(int n, int i) {
  const int p = kModuli[i];
  int residue = 1;
  for (int j = 0; j < n; ++j) {
    if (j != i) residue = (residue * (kModuli[j] % p)) % p;
  }
  return inverse_mod(residue, p);
}
// Scalar members only: device code may read those as constants.
template <int N, int I>
struct CrtTerm {
  static constexpr int inverse = partial_inverse(N, I);
};
// The reconstruction takes the moduli three at a time (kCrtGroupSize): for a group G of moduli
// [first, first + count), sum_{i in G} u_i P / p_i = v (P / prod G) with v = sum_{i in G} u_i c_i,
// c_i = prod G / p_i below 2^16, so v < 3 * 2^24 takes 32-bit multiply-adds and S one four-limb
// product per group instead of one per modulus.
constexpr int kCrtGroupSize = 3;
template <int N, int G>
struct CrtGroup {
  static constexpr int first = G * kCrtGroupSize;
  static constexpr int count = N - first < kCrtGroupSize ? N - first : kCrtGroupSize;
  // c_i of the group's j-th modulus: prod G / p_{first + j}
  static constexpr uint32_t cofactor(int j) {
    uint32_t c = 1;
    for (int l = 0; l < count; ++l) {
      if (l != j) c *= static_cast<uint32_t>(kModuli[first + l]);
    }
    return c;
  }
  // 1 / prod G in float64 (prod G below 2^24: one rounding)
  static constexpr double reciprocal =
      1.0 / static_cast<double>(moduli_product_limbs<1>(kModuli, first + count, 0, first).w[0]);
  static constexpr uint32_t quotient0 = moduli_product_limbs<4>(kModuli, N, first, count).w[0];
  static constexpr uint32_t quotient1 = moduli_product_limbs<4>(kModuli, N, first, count).w[1];
  static constexpr uint32_t quotient2 = moduli_product_limbs<4>(kModuli, N, first, count).w[2];
  static constexpr uint32_t quotient3 = moduli_product_limbs<4>(kModuli, N, first, count).w[3];
};
// Groups of N moduli.
constexpr int crt_groups(int n) { return (n + kCrtGroupSize - 1) / kCrtGroupSize; }

// 2^128 - P for the product P of the first N moduli, in 32-bit limbs: adding q times it is
// subtracting q P modulo 2^128.
template <int N>
struct CrtProduct {
  static constexpr uint32_t negated(int w) {
    const Limbs p = product_limbs(N, -1);
    uint64_t carry = 1;  // ~P + 1
    uint32_t out = 0;
    for (int v = 0; v <= w; ++v) {
      const uint64_t t = uint64_t(~p.w[v]) + carry;
      out = static_cast<uint32_t>(t);
      carry = t >> 32;
    }
    return out;
  }
  static constexpr uint32_t negated0 = negated(0);
  static constexpr uint32_t negated1 = negated(1);
  static constexpr uint32_t negated2 = negated(2);
  static constexpr uint32_t negated3 = negated(3);
};

// Calls f(std::integral_constant<int, I>{}) for I = 0 .. N - 1, so each modulus is a compile-time
// constant and every "% p" compiles to a multiply-shift.
template <int I, int N>
struct ModulusLoop {
  template <typename F>
  OZAKI_HD static void run(F& f) {
    if constexpr (I < N) {
      f(std::integral_constant<int, I>{});
      ModulusLoop<I + 1, N>::run(f);
    }
  }
};
template <int N, typename F>
OZAKI_HD void for_each_modulus(F f) {
  ModulusLoop<0, N>::run(f);
}

// ---- Row scales ---------------------------------------------------------------------------------
// Each row of A (column of B) is scaled by c = (16 + f) 2^(e - 4), f in [0, 16): a 5-bit
// significand, so that the row's norm bound fills its budget 2^t to within 1/16 (a power of two
// wastes half a bit of it on average, up to one). c is held as the int32 code 16 e + f, in which
// multiplying c by 2^t adds 16 t.
constexpr int kScaleFractionBits = 4;
struct RowScale {
  int64_t significand;  // 16 + f, in [16, 32)
  int exponent;         // c = significand 2^exponent
};
OZAKI_HD RowScale row_scale(int code) {
  constexpr int fraction = 1 << kScaleFractionBits;
  return {fraction + (code & (fraction - 1)), (code >> kScaleFractionBits) - kScaleFractionBits};
}

// RN(m 2^-d) for 0 < d < 64, ties to even.
OZAKI_HD uint64_t shift_right_to_nearest(uint64_t m, int d) {
  const uint64_t kept = m >> d;
  const uint64_t rest = m & ((uint64_t(1) << d) - 1);
  const uint64_t half = uint64_t(1) << (d - 1);
  return kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);
}

// RN(a * c) as an integer (ties to even), exactly, from a's bits; the caller's scaling keeps
// |a| c <= 2^62. NaN and +-Inf give 0 (their results are patched, see nonfinite_dot). |a| is
// read as m 2^e by significand_fields (trailing zeros kept: the value, and so the rounding, is the
// same, without a count of them).
OZAKI_HD int64_t scaled_integer(double a, RowScale c) {
  const uint64_t bits = bits_of(a);
  if (((bits >> 52) & 0x7ff) == 0x7ff) return 0;
  uint64_t significand;
  int exponent;
  significand_fields(bits, &significand, &exponent);
  significand *= static_cast<uint64_t>(c.significand);  // below 2^58: exact
  const int t = exponent + c.exponent;
  uint64_t magnitude;
  if (t >= 0) {
    magnitude = significand << t;
  } else if (t <= -64) {
    magnitude = 0;  // below 2^-6 of one unit (significand < 2^58)
  } else {
    magnitude = shift_right_to_nearest(significand, -t);
  }
  return (bits >> 63) != 0 ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
}

// RN(a c) of one row's entries: scaled_integer, or one multiplication where that is exact. For
// float32 entries (24-bit significands) and c = (16 + f) 2^e with |e| <= 800, the float64 product
// a c has at most 29 significant bits and stays normal and finite (|a| in [2^-149, 2^128)), so its
// rint is RN(a c), ties to even, the integer path's result in a few instructions.
struct RowScaler {
  RowScale c;
  bool by_multiplication;
  double value;  // c as a float64, when by_multiplication
  OZAKI_HD int64_t operator()(double a) const {
    if (!by_multiplication) return scaled_integer(a, c);
    return is_finite(a) ? static_cast<int64_t>(rint(a * value)) : 0;
  }
};
template <typename T>
OZAKI_HD RowScaler row_scaler(int code) {
  const RowScale c = row_scale(code);
  const bool multiply = std::is_same_v<T, float> && c.exponent >= -800 && c.exponent <= 800;
  return {c, multiply, multiply ? static_cast<double>(c.significand) * pow2(c.exponent) : 0.0};
}

// A scaled integer x (|x| <= 2^62 + 1) cut once for all moduli into x = high 2^42 + mid 2^21 + low:
// low and mid are its two's complement bit fields (21 bits each, unsigned), high = x >> 42 is
// signed, |high| <= 2^20 + 1. x itself is kept: its low byte is the residue modulo 256.
struct ResidueParts {
  int64_t value;
  uint32_t low, mid;
  int32_t high;
};
OZAKI_HD ResidueParts residue_parts(int64_t x) {
  constexpr int64_t mask = (int64_t(1) << 21) - 1;
  return {x, static_cast<uint32_t>(x & mask), static_cast<uint32_t>((x >> 21) & mask),
          static_cast<int32_t>(x >> 42)};
}

// x mod P for x < 2^31 and 128 < P < 256, by one multiply-high: with M = ceil(2^39 / P) < 2^32,
// floor(x M / 2^39) = floor(x / P) because x (M P - 2^39) < 2^31 P <= 2^39. (The compiler's
// remainder by a constant must cover all 32-bit x and needs a longer sequence for most P.)
template <uint32_t P>
OZAKI_HD uint32_t remainder_below_2_31(uint32_t x) {
  static_assert(P > 128 && P < 256);
  constexpr uint64_t M = ((uint64_t(1) << 39) + P - 1) / P;
#ifdef __CUDA_ARCH__
  const uint32_t q = __umulhi(x, static_cast<uint32_t>(M)) >> 7;
#else
  const uint32_t q = static_cast<uint32_t>((uint64_t(x) * M) >> 39);
#endif
  return x - q * P;
}

// The symmetric residue of W * x modulo P (W: 1 for A, the CRT weight for B, see
// crt_reconstruct). 256: the low byte of W * x read as two's complement, [-128, 127]. Odd P:
// low c_0 + mid c_1 + high c_2 + bias with c_0 = W, c_1 = 2^21 W, c_2 = 2^42 W reduced mod P and
// bias a multiple of P plus (P - 1) / 2 that keeps the sum in [0, 2^31) (|high c_2| < 2^28): one
// remainder below 2^31, minus (P - 1) / 2, lands in [-(P - 1) / 2, (P - 1) / 2]. No sign handling.
template <int P, int W>
OZAKI_HD int symmetric_residue(const ResidueParts& x) {
  if constexpr (P == 256) {
    return static_cast<int8_t>(static_cast<uint8_t>(static_cast<uint64_t>(x.value) * W));
  } else {
    constexpr int32_t half = (P - 1) / 2;
    constexpr int32_t c0 = W % P;
    constexpr int32_t c1 = static_cast<int32_t>((uint64_t(1) << 21) % P * W % P);
    constexpr int32_t c2 = static_cast<int32_t>((uint64_t(1) << 42) % P * W % P);
    constexpr int32_t bias = ((int32_t(1) << 28) + P - 1) / P * P + half;
    // < 2^29 + 2^29 + 2^28 + 2^28 + P: below 2^31, and at least 0
    const int32_t sum = static_cast<int32_t>(x.low) * c0 + static_cast<int32_t>(x.mid) * c1 +
                        x.high * c2 + bias;
    return static_cast<int>(remainder_below_2_31<P>(static_cast<uint32_t>(sum))) - half;
  }
}

// Writes the N residues of RN(a * c) through store(i, residue); weighted: those of y_i RN(a * c)
// (B's, see crt_reconstruct).
template <int N, bool weighted, typename Store>
OZAKI_HD void residues_of(double a, const RowScaler& scale, Store store) {
  const ResidueParts x = residue_parts(scale(a));
  for_each_modulus<N>([&](auto index) {
    constexpr int i = decltype(index)::value;
    store(i, symmetric_residue<kModuli[i], weighted ? CrtTerm<N, i>::inverse : 1>(x));
  });
}

#ifdef __CUDACC__
// The moduli of index 1 .. kFp64Moduli (255 down to 233, all odd) of B's weighted residues in the
// column pass (column_residues_kernel) go to the FP64 pipe, which the integer path leaves idle
// while its multiply-adds fill the FMA-heavy pipe (the byte of each residue is the same;
// docs/algorithm.md 9.10). The row pass, whose threads store each modulus's eight residues at
// once, keeps the integer path entry by entry: four entries at a time it measured slower.
constexpr int kFp64Moduli = 7;

// A scaled integer's parts (ResidueParts) as float64 values, by their bits (2^52 + u, less 2^52;
// high offset by 2^21 into the unsigned range first): exact, without a conversion instruction.
struct Fp64Parts {
  double low, mid, high;
};
__device__ __forceinline__ Fp64Parts fp64_parts(const ResidueParts& x) {
  constexpr double two52 = 4503599627370496.0;
  return {__hiloint2double(0x43300000, static_cast<int>(x.low)) - two52,
          __hiloint2double(0x43300000, static_cast<int>(x.mid)) - two52,
          __hiloint2double(0x43300000, x.high + (1 << 21)) - (two52 + (1 << 21))};
}

// symmetric_residue<P, W> for odd P on the FP64 pipe, every step exact:
//   s = low c_0 + mid c_1 + high c_2   (FMAs of integers, |s| < 2^29 + 2^29 + 2^28 < 2^31)
//   q = rint(s / P)                    (one FMA of s by RN(1/P) onto 1.5 2^52, whose grid is the
//                                       integers: s / P lies at least 1/(2P) >= 2^-9 from a
//                                       half-integer, and s RN(1/P) errs by under 2^-30)
//   r = s - q P                        (an FMA: the symmetric residue, |r| <= (P - 1) / 2)
// and r's byte is the low word of r + 1.5 2^52.
template <int P, int W>
__device__ __forceinline__ int fp64_symmetric_residue(const Fp64Parts& x) {
  static_assert(P % 2 == 1);
  constexpr double c0 = W % P;
  constexpr double c1 = static_cast<double>((uint64_t(1) << 21) % P * W % P);
  constexpr double c2 = static_cast<double>((uint64_t(1) << 42) % P * W % P);
  constexpr double inverse = 1.0 / P;
  constexpr double magic = 6755399441055744.0;  // 1.5 2^52
  const double low = c0 == 1.0 ? x.low : x.low * c0;
  const double s = __fma_rn(x.high, c2, __fma_rn(x.mid, c1, low));
  const double q = __fma_rn(s, inverse, magic) - magic;
  return __double2loint(__fma_rn(-q, static_cast<double>(P), s) + magic);
}

// B's (weighted) residues_of for E entries at once, modulus by modulus (one modulus's constants
// live at a time): store(i, bytes) takes modulus i's E residues (8-byte aligned). Moduli
// 1 .. kFp64Moduli on the FP64 pipe, the others by the integer path; the same bytes as
// residues_of<N, true>.
template <int N, int E, typename Store>
__device__ __forceinline__ void weighted_residues_by_modulus(const double (&a)[E],
                                                             const RowScaler& scale, Store store) {
  constexpr int fp64_last = N - 1 < kFp64Moduli ? N - 1 : kFp64Moduli;
  // store(i, the E residues residue(c)) for modulus i
  const auto store_modulus = [&](int i, auto residue) {
    __align__(8) int8_t bytes[E];
#pragma unroll
    for (int c = 0; c < E; ++c) bytes[c] = static_cast<int8_t>(residue(c));
    store(i, bytes);
  };
  ResidueParts parts[E];
#pragma unroll
  for (int c = 0; c < E; ++c) parts[c] = residue_parts(scale(a[c]));
  for_each_modulus<N>([&](auto index) {
    constexpr int i = decltype(index)::value;
    if constexpr (i == 0 || i > fp64_last) {
      store_modulus(i, [&](int c) {
        return symmetric_residue<kModuli[i], CrtTerm<N, i>::inverse>(parts[c]);
      });
    }
  });
  if constexpr (fp64_last > 0) {
    Fp64Parts values[E];
#pragma unroll
    for (int c = 0; c < E; ++c) values[c] = fp64_parts(parts[c]);
    for_each_modulus<fp64_last + 1>([&](auto index) {
      constexpr int i = decltype(index)::value;
      if constexpr (i >= 1) {
        store_modulus(i, [&](int c) {
          return fp64_symmetric_residue<kModuli[i], CrtTerm<N, i>::inverse>(values[c]);
        });
      }
    });
  }
}
#endif

// RN(sign * m * 2^unit) on the grid of `format`, ties to even, for m < 2^63 (round_to_format in
// exact.h for one 64-bit word, with the same results, in a few 64-bit operations).
OZAKI_HD double round_word_to_format(uint64_t m, bool negative, int64_t unit,
                                     RoundingFormat format) {
  if (m == 0) return 0.0;
  // Where 2^unit is at least the format's least normal power and a normal float64 itself, every
  // rounding of m 2^unit is normal (or past the largest finite value): converting m to the format
  // rounds it to the format's precision, ties to even, and the scaling is exact (or overflows to
  // +-Inf, as the rounding does).
  const int64_t least_normal = format.min_exponent + format.precision - 1;
  if (unit >= least_normal && unit <= 1023) {
    const double rounded = format.precision == kFloat32Format.precision
                               ? static_cast<double>(static_cast<float>(m))
                               : static_cast<double>(m);
    const double value = rounded * pow2(static_cast<int>(unit));
    return negative ? -value : value;
  }
  const int top = highest_set_bit(m);
  const int64_t exponent = top + unit;
  int64_t lowest_kept = exponent - (format.precision - 1);
  if (lowest_kept < format.min_exponent) lowest_kept = format.min_exponent;
  const int64_t first = lowest_kept - unit;  // bit index of the last kept bit
  uint64_t significand = m;  // first <= 0: top < precision, the value is exact
  int64_t scale = unit;
  if (first > 0) {
    // bits [first, top] (at most precision of them), the half bit below them and the sticky bits
    // below that; a half bit above top is 0, and then the value rounds down whatever the rest
    significand = first <= top ? m >> first : 0;
    const int64_t half_index = first - 1;
    const bool half = half_index <= top && ((m >> half_index) & 1) != 0;
    const bool sticky = half && (m & ((uint64_t(1) << half_index) - 1)) != 0;
    if (half && (sticky || (significand & 1))) ++significand;
    scale = lowest_kept;
  }
  const int clamped = scale > 4096 ? 4096 : (scale < -4096 ? -4096 : static_cast<int>(scale));
  const double value = scale_by_power_of_two(static_cast<double>(significand), clamped);
  return negative ? -value : value;
}

// x 2^shift as a float64, exactly, for a 32-bit word x and 0 <= shift <= 96: on the device by its
// bits (2^(52 + shift) + x 2^shift, less 2^(52 + shift)), which spares the conversion unit.
OZAKI_HD double word_times_power_of_two(uint32_t x, int shift) {
#ifdef __CUDA_ARCH__
  return __hiloint2double(0x43300000 + (shift << 20), static_cast<int>(x)) - pow2(52 + shift);
#else
  return static_cast<double>(x) * pow2(shift);
#endif
}

// x as a float64 (exactly).
OZAKI_HD double exact_double(uint32_t x) { return word_times_power_of_two(x, 0); }

// A float64 within 2^-40 (relative) of 1 / d, for 256 <= d < 1024: 1 / d rounded on the host; on
// the device the float32 approximate reciprocal (within one unit of its last place, 2^-23) and
// one Newton step in float64, which squares that error. floor_divide's results do not depend on
// which.
OZAKI_HD double divisor_reciprocal(uint32_t d) {
#ifdef __CUDA_ARCH__
  float approximate;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(approximate) : "f"(static_cast<float>(d)));
  const double r = approximate;
  return __fma_rn(r, __fma_rn(-exact_double(d), r, 1.0), r);
#else
  return 1.0 / static_cast<double>(d);
#endif
}

// floor(t / d), and in *inexact whether d leaves a remainder, for 256 <= d < 1024 and r within
// 2^-40 of 1 / d (divisor_reciprocal), without a division instruction: t r in float64 errs from
// t / d < 2^56 by under 2^16 + 1, so the remainder of that estimate lies within +-2^26 and its low
// 32 bits hold it; its quotient by d, taken the same way (within 2^-22), is exact except one too
// low when d divides it, which the last comparison mends.
OZAKI_HD uint64_t floor_divide(uint64_t t, uint32_t d, double r, bool* inexact) {
  uint64_t q = static_cast<uint64_t>(static_cast<double>(t) * r);
  int32_t rest = static_cast<int32_t>(static_cast<uint32_t>(t) - static_cast<uint32_t>(q) * d);
  const auto correction = static_cast<int32_t>(floor(static_cast<double>(rest) * r));
  rest -= correction * static_cast<int32_t>(d);  // in [0, 2 d)
  q += static_cast<uint64_t>(static_cast<int64_t>(correction));
  if (rest >= static_cast<int32_t>(d)) {
    rest -= static_cast<int32_t>(d);
    ++q;
  }
  *inexact = rest != 0;
  return q;
}

// RN(sign * (high 2^64 + low) / divisor * 2^unit) on the grid of `format`, ties to even, for
// 0 < high 2^64 + low < 2^125 and 256 <= divisor < 1024: the top 64 bits T of the integer are
// divided exactly (floor_divide), and whether the remainder or any bit below T is nonzero becomes a
// sticky bit. The quotient Q >= 2^63 / 1024 has at least 54 bits; 2 Q plus the sticky bit rounds
// like the exact value, as the rounding keeps at most 53 of them.
OZAKI_HD double round_quotient_to_format(uint64_t high, uint64_t low, uint32_t divisor,
                                         bool negative, int64_t unit, RoundingFormat format) {
  uint64_t t;
  int drop;  // T = floor(integer / 2^drop)
  bool sticky = false;
  if (high != 0) {
    const int zeros = 63 - highest_set_bit(high);  // at least 3 (high < 2^61)
    t = (high << zeros) | (low >> (64 - zeros));
    sticky = (low << zeros) != 0;
    drop = 64 - zeros;
  } else {
    const int zeros = 63 - highest_set_bit(low);
    t = low << zeros;
    drop = -zeros;
  }
  bool inexact;
  const uint64_t q = floor_divide(t, divisor, divisor_reciprocal(divisor), &inexact);
  return round_word_to_format(2 * q + ((sticky || inexact) ? 1 : 0), negative, unit + drop - 1,
                              format);
}

// fma(a, b, c) with one rounding on the host and the device.
OZAKI_HD double fused_multiply_add(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// y = X / divisor in float64 arithmetic, for X = high 2^64 + low (128-bit two's complement,
// |X| < 2^127), 256 <= divisor < 1024 and r within 2^-40 (relative) of 1 / divisor: *y = res + t
// with res = RN(res + t) and res + t within 2^-79 |y| of y, for the roundings below; false (and
// *y unset) for X = 0.
//   X is the exact sum of four float64 values, its 32-bit words in place (the top one signed);
//   three Fast2Sums, each sum's first term the larger in magnitude or 0 (a partial sum of the
//   upper words is 0 or at least the next word's weight), make it s + e1 + e2 + e3 exactly, and
//   e = RN(RN(e3 + e2) + e1) leaves s + e within 2^-104 |X|.
//   y1 = RN(s r); the remainder s - y1 divisor is a multiple of ulp(y1) below 2^25 of them, so
//   one FMA gives it exactly; y2 = RN(RN(remainder + e) r). y1 + y2 lies within 2^-79 |y| of y,
//   and res = RN(y1 + y2), t = y1 + y2 - res exactly (Fast2Sum, |y2| < 2^-38 |y1|).
struct Float64Quotient {
  double res;
  double t;
};
OZAKI_HD bool quotient_in_float64(uint64_t high, uint64_t low, uint32_t divisor, double r,
                                  Float64Quotient* y) {
  // the top word as signed: (w xor 2^31) 2^96 less 2^127
  const double w3 = word_times_power_of_two(static_cast<uint32_t>(high >> 32) ^ 0x80000000u, 96) -
                    0x1p127;
  const double w2 = word_times_power_of_two(static_cast<uint32_t>(high), 64);
  const double w1 = word_times_power_of_two(static_cast<uint32_t>(low >> 32), 32);
  const double w0 = exact_double(static_cast<uint32_t>(low));
  const double s3 = w3 + w2;
  const double e3 = w2 - (s3 - w3);
  const double s2 = s3 + w1;
  const double e2 = w1 - (s2 - s3);
  const double s = s2 + w0;
  const double e1 = w0 - (s - s2);
  if (s == 0.0) return false;  // X = 0: a nonzero partial sum is at least the next word's weight
  const double e = (e3 + e2) + e1;
  const double d = exact_double(divisor);
  const double y1 = s * r;
  const double remainder = fused_multiply_add(-y1, d, s);
  const double y2 = (remainder + e) * r;
  const double res = y1 + y2;
  *y = {res, y2 - (res - y1)};
  return true;
}

// RN(X / divisor * 2^unit) in float64 (X, divisor and r as for quotient_in_float64) by float64
// arithmetic where that decides it; *decided false leaves it to round_quotient_to_format.
//   y rounds to res where |t| + 2^-79 |y| stays below the half gap next to res on t's side
//   (ulp(res) / 2, or ulp(res) / 4 below a power of two): accepted where |t| < that gap less
//   2^-20 ulp(res), which leaves about one y in 2^19, ties among them, to the exact path; then
//   res 2^unit by its exponent field where that stays normal.
OZAKI_HD double round_quotient_float64(uint64_t high, uint64_t low, uint32_t divisor, double r,
                                       int64_t unit, bool* decided) {
  *decided = false;
  Float64Quotient y;
  if (!quotient_in_float64(high, low, divisor, r, &y)) {
    *decided = true;
    return 0.0;
  }
  const double res = y.res, t = y.t;
  const uint64_t bits = bits_of(res);
  const int64_t field = static_cast<int64_t>((bits >> 52) & 0x7ff);  // |res| >= 2^-10: normal
  const double ulp = double_from_bits(static_cast<uint64_t>(field - 52) << 52);
  const bool power_of_two = (bits & ((uint64_t(1) << 52) - 1)) == 0;
  const bool toward_zero = t != 0.0 && (t < 0.0) != (res < 0.0);
  const double gap = power_of_two && toward_zero ? 0.25 * ulp : 0.5 * ulp;
  if (!(abs_value(t) < gap - ulp * 0x1p-20)) return 0.0;
  if (field + unit < 1 || field + unit > 2046) return 0.0;
  *decided = true;
  return double_from_bits(bits + (static_cast<uint64_t>(unit) << 52));
}

// RN(X / divisor * 2^unit) in float32, as a float64 value (X, divisor and r as for
// quotient_in_float64), by float64 arithmetic where that decides it; *decided false leaves it to
// round_quotient_to_format.
//   y lies within ulp(res) of res (|t| <= ulp(res) / 2, the error far below), so where res is at
//   least two float64 ulps from every float32 midpoint (its low 29 significand bits two or more
//   from 2^28) and res 2^unit is a normal float32 below its top binade (2^-126 <= |res 2^unit| <
//   2^127), no midpoint lies between y 2^unit and res 2^unit, and the float32 rounding of y 2^unit
//   is the conversion of res 2^unit. About one y in 2^27, ties among them, and the top binade,
//   where the exact path's value may be 2^128 (the caller's conversion makes it +-Inf), go the
//   exact way.
OZAKI_HD double round_quotient_float32(uint64_t high, uint64_t low, uint32_t divisor, double r,
                                       int64_t unit, bool* decided) {
  *decided = false;
  Float64Quotient y;
  if (!quotient_in_float64(high, low, divisor, r, &y)) {
    *decided = true;
    return 0.0;
  }
  const uint64_t bits = bits_of(y.res);
  const int64_t field = static_cast<int64_t>((bits >> 52) & 0x7ff) + unit;
  if (field < 1023 - 126 || field > 1023 + 126) return 0.0;
  const int64_t below = static_cast<int64_t>(bits & ((uint64_t(1) << 29) - 1));
  const int64_t from_midpoint = below - (int64_t(1) << 28);
  if (from_midpoint > -2 && from_midpoint < 2) return 0.0;
  *decided = true;
  return static_cast<double>(
      static_cast<float>(double_from_bits(bits + (static_cast<uint64_t>(unit) << 52))));
}

// RN(X / divisor * 2^unit) in `format` (float64 or float32) by float64 arithmetic where that
// decides it (round_quotient_float64, round_quotient_float32); *decided false leaves it to
// round_quotient_to_format.
OZAKI_HD double round_quotient_in_float64(uint64_t high, uint64_t low, uint32_t divisor, double r,
                                          int64_t unit, RoundingFormat format, bool* decided) {
  if (format.precision == kFloat64Format.precision) {
    return round_quotient_float64(high, low, divisor, r, unit, decided);
  }
  return round_quotient_float32(high, low, divisor, r, unit, decided);  // the only other format
}

// The INT32 sum of products of symmetric residues for modulus I, reduced to [0, p_I).
template <int I>
OZAKI_HD uint32_t unsigned_residue(int32_t sum) {
  constexpr uint32_t p = kModuli[I];
  if constexpr (p == 256) {
    return static_cast<uint32_t>(sum) & 255u;
  } else {
    // sum + a multiple of p at least 2^31 - 2^14: in [0, 2^32), one unsigned remainder.
    constexpr uint32_t offset = ((uint32_t(1) << 31) - (uint32_t(1) << 14) + p - 1) / p * p;
    return (static_cast<uint32_t>(sum) + offset) % p;
  }
}

// The exact X = (A'B')_ij, |X| < P / 2, from R_i = y_i X mod p_i (residues[i]: the INT32 GEMM
// result of modulus i, whose B residues carry the weight y_i = (P / p_i)^-1 mod p_i; any
// representative with |R_i| < 2^31 - 2^14, which exact GEMMs with k <= kCrtMaxInner meet), rounded
// once: RN(X / (c_a c_b)) in `format` for the scales c_a and c_b of the row and column. The caller
// loads all N results first, so they are in flight together.
//   u_i = R_i mod p_i, S = sum_i u_i (P / p_i) is X mod P, and S / P = q + X / P, so
//   q = rint(S / P) (the plan keeps |X| / P at most 1/2 - 2^-30, far above the float error of
//   S / P) and X = S - q P.
// The moduli go three at a time (CrtGroup): S = sum_G v_G (P / prod G), so S / P is the sum of the
// v_G / prod G (each below 3; within 2^-45 in float64, all added), and X is the two's complement
// of sum_G v_G (P / prod G) + q (2^128 - P) modulo 2^128, in 32-bit limbs (|X| < 2^127).
// reduced: every R_i is already u_i, in [0, p_i) (the reduced GEMMs' bytes). float64_first: the
// result is first rounded in float64 arithmetic (round_quotient_float64 or
// round_quotient_float32), the exact path only where that cannot decide (the same bits either
// way).
template <int N, bool reduced = false, bool float64_first = true>
OZAKI_HD double crt_reconstruct(const int32_t* residues, RowScale c_a, RowScale c_b,
                                RoundingFormat format) {
  uint32_t v[crt_groups(N)];
  double quotient = 0.0;
  for_each_modulus<crt_groups(N)>([&](auto group) {
    constexpr int g = decltype(group)::value;
    using Group = CrtGroup<N, g>;
    uint32_t sum = 0;
    for_each_modulus<Group::count>([&](auto member) {
      constexpr int j = decltype(member)::value, i = Group::first + j;
      constexpr uint32_t cofactor = Group::cofactor(j);
      const uint32_t u =
          reduced ? static_cast<uint32_t>(residues[i]) : unsigned_residue<i>(residues[i]);
      sum += u * cofactor;
    });
    v[g] = sum;
    const double term = exact_double(sum) * Group::reciprocal;
    quotient = g == 0 ? term : quotient + term;
  });
  const auto q = static_cast<uint32_t>(rint(quotient));  // in [0, 3 crt_groups(N)]
  // Limb sums: per group products below 2^26 2^32, q's below 2^37; at most seven terms, below 2^61.
  uint64_t limbs[4] = {
      uint64_t(q) * CrtProduct<N>::negated0, uint64_t(q) * CrtProduct<N>::negated1,
      uint64_t(q) * CrtProduct<N>::negated2, uint64_t(q) * CrtProduct<N>::negated3};
  for_each_modulus<crt_groups(N)>([&](auto group) {
    constexpr int g = decltype(group)::value;
    using Group = CrtGroup<N, g>;
    limbs[0] += static_cast<uint64_t>(v[g]) * Group::quotient0;
    limbs[1] += static_cast<uint64_t>(v[g]) * Group::quotient1;
    limbs[2] += static_cast<uint64_t>(v[g]) * Group::quotient2;
    limbs[3] += static_cast<uint64_t>(v[g]) * Group::quotient3;
  });
  for (int w = 0; w < 3; ++w) limbs[w + 1] += limbs[w] >> 32;
  uint64_t low = (limbs[0] & 0xffffffffu) | (limbs[1] << 32);
  uint64_t high = (limbs[2] & 0xffffffffu) | (limbs[3] << 32);
  const auto divisor = static_cast<uint32_t>(c_a.significand * c_b.significand);
  const int64_t unit = -(int64_t(c_a.exponent) + c_b.exponent);
  if constexpr (float64_first) {
    bool decided;
    const double value = round_quotient_in_float64(high, low, divisor, divisor_reciprocal(divisor),
                                                   unit, format, &decided);
    if (decided) return value;
  }
  const bool negative = (high >> 63) != 0;
  if (negative) {  // |X| = -X in 128-bit two's complement
    low = ~low + 1;
    high = ~high + (low == 0 ? 1 : 0);
  }
  if (high == 0 && low == 0) return 0.0;
  return round_quotient_to_format(high, low, divisor, negative, unit, format);
}

// Runs f(std::integral_constant<int, V>{}) for the run-time value First <= value <= Last, so V is a
// compile-time constant in f; nothing for other values.
template <int First, int Last, typename F>
void with_constant(int value, F f) {
  if constexpr (First <= Last) {
    if (value == First) {
      f(std::integral_constant<int, First>{});
    } else {
      with_constant<First + 1, Last>(value, f);
    }
  }
}

// Runs f(std::integral_constant<int, N>{}) for a run-time moduli count 1 <= moduli <= kMaxModuli.
template <typename F>
void with_moduli_count(int moduli, F f) {
  with_constant<1, kMaxModuli>(moduli, f);
}

#ifdef __CUDACC__
// Columns of a warp's tile: its 32 lanes' groups of four.
constexpr int kWarpTileColumns = 128;

// Calls f(row, j0, loaded) for every row < rows and every tile b < tiles of kWarpTileColumns
// columns of it, j0 = 128 b + 4 lane, with loaded = load(row, j0): the grid's warps (a 1-D grid)
// take the (row, tile) pairs in turn, all lanes of a warp the same pair, so f may exchange values
// among the warp's lanes (__syncwarp). Each warp issues the next pair's loads before it processes
// the current one, so they stay in flight while it computes (Ahead; past its last pair a warp
// loads that pair again, cached and unused, rather than branch around the load).
template <bool Ahead, typename Load, typename F>
__device__ void for_each_warp_tile(int64_t rows, int64_t tiles, Load load, F f) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  // (row, tile) of pair t = row * tiles + tile, stepped by `warps` without a division per pair
  int64_t row = warp / tiles, tile = warp - row * tiles;
  const int64_t row_step = warps / tiles, tile_step = warps - row_step * tiles;
  if (row >= rows) return;
  const auto columns = [&](int64_t b) { return kWarpTileColumns * b + 4 * lane; };
  auto loaded = load(row, columns(tile));
  while (true) {
    int64_t next_row = row + row_step, next_tile = tile + tile_step;
    if (next_tile >= tiles) {
      next_tile -= tiles;
      ++next_row;
    }
    const bool more = next_row < rows;
    if constexpr (Ahead) {
      const auto next = load(more ? next_row : row, columns(more ? next_tile : tile));
      f(row, columns(tile), loaded);
      loaded = next;
    } else {
      f(row, columns(tile), loaded);
      if (more) loaded = load(next_row, columns(next_tile));
    }
    if (!more) return;
    row = next_row;
    tile = next_tile;
  }
}

// The N INT32 products of four neighbouring entries of a row, modulus i's at first + i * plane
// (16-byte aligned): all N loads are issued before any arithmetic reads them.
template <int N>
struct FourEntries {
  int4 planes[N];
  __device__ FourEntries(const int32_t* first, int64_t plane) {
#pragma unroll
    for (int i = 0; i < N; ++i) planes[i] = __ldg(reinterpret_cast<const int4*>(first + i * plane));
  }
  // The N products of entry c (0 to 3).
  __device__ void of_entry(int c, int32_t (&products)[N]) const {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int4& r = planes[i];
      products[i] = c == 0 ? r.x : (c == 1 ? r.y : (c == 2 ? r.z : r.w));
    }
  }
};

// FourEntries for reduced products (one byte per residue, csrc/cuda/reduced_gemm.cuh): the four
// entries' N residues, modulus i's four bytes at first + i * plane (4-byte aligned).
template <int N>
struct FourReducedEntries {
  uint32_t planes[N];
  __device__ FourReducedEntries(const uint8_t* first, int64_t plane) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      planes[i] = __ldg(reinterpret_cast<const unsigned*>(first + i * plane));
    }
  }
  __device__ void of_entry(int c, int32_t (&products)[N]) const {
    // byte c of each word, zero-extended, in one permute
#pragma unroll
    for (int i = 0; i < N; ++i) {
      products[i] = static_cast<int32_t>(__byte_perm(planes[i], 0, 0x4440 + c));
    }
  }
};

// The loader of four entries' products of element type P (int32_t or uint8_t).
template <int N, typename P>
using FourEntriesOf =
    std::conditional_t<std::is_same_v<P, uint8_t>, FourReducedEntries<N>, FourEntries<N>>;
#endif

// ---- Plan inputs (docs/accuracy.md, "Scheme II") ------------------------------------------------

// ceil(|a| 2^-tau 2^16)^2: summed over a row (exactly, in uint64) it bounds ||row||^2 from above
// in units of 2^(2 tau - 32). An entry at or above 2^tau (a tau that is not the row's) counts as
// 2^tau: 2^32 units, where the conversion would be undefined or the square wrap.
OZAKI_HD uint64_t norm_square_units(double a, int tau) {
  if (a == 0.0 || !is_finite(a)) return 0;
  constexpr double limit = double(1 << kNormGridBits);
  const double x = abs_value(scaled_entry(a, tau)) * limit;  // exact, <= 2^16 for the row's tau
  const uint64_t u = static_cast<uint64_t>(ceil(x < limit ? x : limit));
  return u * u;
}

// The code of the row's norm scale: the largest c = (16 + f) 2^(-nu - 4) with ||row||_2 c <= 1
// that the sum of norm_square_units proves. With e the smallest integer such that 4^e >= sum,
// ||row||_2 <= sqrt(sum) 2^(tau - 16) <= 2^nu, nu = tau - 16 + e, and f is the largest in [0, 15]
// with (16 + f)^2 sum <= 4^(e + 4), i.e. sqrt(sum) 2^(tau - 16) c <= 1. The products are exact
// (below 2^63, as in the int64 copy of ozaki/distributed/inner.py) for sums up to 2^53 (rows of
// 2^21 entries; scheme II's k < 2^17 gives sums below 2^49); a larger sum (a longer row, whose
// codes scheme II never uses) is rounded up to 53 bits first, which can only lower f: c stays
// within the bound. A zero row gets c = 2^-tau. Codes past the int32 range (no row's tau gives
// them) saturate.
OZAKI_HD int norm_scale_code(uint64_t square_sum, int tau) {
  constexpr int fraction = 1 << kScaleFractionBits;
  if (square_sum == 0) return saturated_int(-fraction * int64_t(tau));
  const int e = square_sum == 1 ? 0 : (highest_set_bit(square_sum - 1) + 2) / 2;
  const int shift = 2 * e > 53 ? 2 * e - 53 : 0;
  const uint64_t dropped = shift == 0 ? 0 : square_sum & ((uint64_t(1) << shift) - 1);
  const uint64_t sum = (square_sum >> shift) + (dropped != 0 ? 1 : 0);  // <= 2^53
  const uint64_t limit = uint64_t(1) << (2 * (e + kScaleFractionBits) - shift);  // <= 2^61
  int f = fraction - 1;
  while (f > 0 && uint64_t(fraction + f) * uint64_t(fraction + f) * sum > limit) --f;
  return saturated_int(-fraction * (int64_t(tau) - kNormGridBits + e) + f);
}

// The code of the scale that rounds a row to integers whose 2-norm stays within 2^t, from the code
// of its norm scale c = (16 + f) 2^(-nu - 4) and its row_stats (tau, span): c 2^t, except for rows
// that the power of two 2^(t - nu) (c with f = 0) already turns into exact integers, every entry a
// multiple of 2^(tau - span): those keep it, as a 5-bit significand would make some of them round
// (float32 rows of one entry, small integers). Multiplying by 2^t adds 16 t to a code. In int64,
// saturated to int32 (only arguments no row has reach past it).
OZAKI_HD int crt_row_scale_code(int norm_code, int tau, int span, int t) {
  const int64_t whole = norm_code >> kScaleFractionBits;  // floor(code / 16) = -nu
  const bool exact = int64_t(tau) - span + t + whole >= 0;
  return saturated_int((exact ? whole * (1 << kScaleFractionBits) : int64_t(norm_code)) +
                       int64_t(t) * (1 << kScaleFractionBits));
}

// Wide scheme II's exponent E of a row's scale 2^E <= c 2^t for its norm scale c (code norm_code),
// floor(log2 c) + t, on usable rows; other rows (zero, or holding NaN/Inf: their entries of C are
// patched) keep exact scheme II's bit_span - tau, which makes every entry an integer. In int64,
// saturated to int32.
OZAKI_HD int wide_row_exponent(int norm_code, int tau, int bit_span, bool usable, int t) {
  return saturated_int(usable ? int64_t(norm_code >> kScaleFractionBits) + t
                              : int64_t(bit_span) - tau);
}

// Exact scheme II's bound on a row's 2-norm once scaled to integers: 2^E ||row||_2 <= 2^E / c for
// E = bit_span - tau (the exponent that makes every entry an integer) and the row's norm scale
// c = g 2^e (code norm_code), as the float64 2^(E - e) / g with E - e clamped to [-1000, 1000] (a
// bound that large rules exact scheme II out anyway); within one rounding of the exact ratio.
OZAKI_HD double integer_norm_bound(int tau, int bit_span, int norm_code) {
  const RowScale c = row_scale(norm_code);
  int64_t q = int64_t(bit_span) - tau - c.exponent;
  q = q < -1000 ? -1000 : (q > 1000 ? 1000 : q);
  return pow2(static_cast<int>(q)) / static_cast<double>(c.significand);
}

// Exact scheme II's entry bound sum_l 2^(u_l + v_l) (ozaki::crt_entry_bound_sum), in one fixed
// order on every device: lane t adds the terms l = t, t + kSampleLanes, ... in turn
// (entry_bound_lane_sum), then the lanes are added pairwise as sampled_magnitudes' are. A term's
// exponent is clamped to [-1000, 900] so that the sum stays finite (a bound that large rules exact
// scheme II out; a NaN exponent counts as 900), and exponents below -2000 (a column with no
// nonzero entry: -10000) add nothing.
// The exponents are integers, so u + v is exact in float64.
OZAKI_HD double entry_bound_term(double exponent) {
  if (is_nan(exponent)) return pow2(900);  // NaN (no exponent the kernels make): no bound
  if (exponent < -2000.0) return 0.0;
  const double e = exponent < -1000.0 ? -1000.0 : (exponent > 900.0 ? 900.0 : exponent);
  return pow2(static_cast<int>(e));
}

// Lane `lane` of `lanes`: the terms of the exponents exponent_of(l) = u_l + v_l (a double) for
// l = lane, lane + lanes, ... added in turn.
template <typename ExponentOf>
OZAKI_HD double entry_bound_lane_sum(ExponentOf exponent_of, int64_t k, int lane, int lanes) {
  double sum = 0.0;
  for (int64_t l = lane; l < k; l += lanes) sum += entry_bound_term(exponent_of(l));
  return sum;
}

// c 2^shift for the norm scale c of a row (its code) and shift near -log2(c): exact, as c's
// significand has 5 bits and tau + log2(c) lies in [-ceil(log2 k) / 2 - 1, 2) (norm_scale_code).
// Codes that do not belong to the row give the correctly rounded value: +Inf or 0 past the range.
OZAKI_HD double norm_scale_times_two_to_the(int shift, int scale_code) {
  const RowScale c = row_scale(scale_code);
  const int e = clamped_int(int64_t(shift) + c.exponent, -4096, 4096);  // 2^+-4096: Inf or 0
  return scale_by_power_of_two(static_cast<double>(c.significand), e);
}

// What ozaki::sampled_magnitudes holds at rows i of a and j of bt: the sum of their lanes
// (sampled_lane_sum, added pairwise) as is, or times c_i 2^tau_i c_j 2^tau_j when the rows' norm
// scale codes are given (scheme II's (|A||B|)_ij c_i c_j; at least 2^-1074 where the sum is
// positive); +Inf for rows that are not usable
// (zero or holding NaN/Inf) and for rows of different elements of a batch.
struct SampledRows {
  const int* tau_a;
  const int* tau_b;
  const bool* usable_a;
  const bool* usable_b;
  const int* norm_a;  // nullptr: no norm factors
  const int* norm_b;
  int64_t m, n;  // rows per element of a and bt
};
OZAKI_HD double sampled_entry(double lanes_sum, int64_t i, int64_t j, const SampledRows& rows) {
  if (!rows.usable_a[i] || !rows.usable_b[j] || i / rows.m != j / rows.n) return infinity();
  if (rows.norm_a == nullptr) return lanes_sum;
  const double value = lanes_sum * norm_scale_times_two_to_the(rows.tau_a[i], rows.norm_a[i]) *
                       norm_scale_times_two_to_the(rows.tau_b[j], rows.norm_b[j]);
  // a positive sum stays positive (sampled_lane_sum): 0 would read as an exact zero
  return value == 0.0 && lanes_sum > 0.0 ? kLeastPositive : value;
}

// The gain g of the plan's magnitude digits for inner dimension k (the whole product's, for a
// k-shard): kCrtMagnitudeHeadroomBits + ceil(log2(k) / 2).
OZAKI_HD int crt_magnitude_gain(int64_t k) {
  return kCrtMagnitudeHeadroomBits + (ceil_log2(k) + 1) / 2;
}

// The plan's magnitude digit of an entry a of a row (max exponent tau, norm scale c of code
// norm_code): floor(|a| c 2^g) capped at 127. Relative to the norm, an entry of the row's RMS size
// (|a| c about 1/sqrt(k)) gets about kCrtMagnitudeHeadroomBits bits, larger ones are capped; the
// digit never exceeds |a| c 2^g, so the digit products D_ij of two rows bound
// (|A||B|)_ij c_i c_j from below by D_ij 2^(-2 g). Exact: |a| 2^-tau < 1 is, and so is its
// product x with 2^(tau + e + g) (c = s 2^e; tau + e <= -3 as ||row|| c <= 1, so x < 2^(g - 3));
// x is truncated to 20 fraction bits before the 5-bit significand s multiplies it, so that
// product is exact too. For tau and codes that do not belong to the row, tau + e + g is held to
// float64's normal powers, so the digit stays in [0, 127] (a wrapped power made it negative).
OZAKI_HD int magnitude_digit(double a, int tau, int norm_code, int gain) {
  if (a == 0.0 || !is_finite(a)) return 0;
  const RowScale c = row_scale(norm_code);
  const int e = clamped_int(int64_t(tau) + c.exponent + gain, -1022, 1023);
  const double x = abs_value(scaled_entry(a, tau)) * pow2(e);
  if (x >= 8.0) return 127;  // times s >= 16: at least 128
  const double truncated = floor(x * pow2(20)) * pow2(-20);
  const int digit = static_cast<int>(floor(truncated * static_cast<double>(c.significand)));
  return digit < 127 ? digit : 127;
}

}  // namespace ozaki
