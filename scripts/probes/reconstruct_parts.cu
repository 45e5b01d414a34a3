// Where scheme II's reconstruction from the reduced GEMMs' bytes spends its time (csrc/crt.h,
// crt_reconstruct): the library's kernel against its loads and stores alone, the limb sums alone
// (and two other ways to form them), the tail cut after each of its stages (|X|, the normalized
// top 64 bits, floor_divide), and variants of the tail and of the stores; the exact variants'
// bits are compared with the library's on every entry ("differ", -1: not comparable). Valid
// residues of random X, |X| < P/2 (any argument, e.g. once: one launch of each, for Nsight Compute).
//   nvcc -O3 -std=c++20 -fmad=false --ftz=false -arch=sm_90 --expt-relaxed-constexpr \
//        scripts/probes/reconstruct_parts.cu -o /tmp/reconstruct_parts && /tmp/reconstruct_parts
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>
#include "../../csrc/crt.h"
#include "check.cuh"
#include "random_x.cuh"
using namespace ozaki;

// valid reduced residues of X, |X| < 2^(log2P-1)
template <int N>
__global__ void make_bytes(uint8_t* bytes, int64_t plane, int max_bits, uint64_t seed, bool near_top) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < plane; t += int64_t(gridDim.x) * blockDim.x) {
    const RandomX x_value = random_x(seed, t, max_bits, near_top);
    for_each_modulus<N>([&](auto index) {
      constexpr int i = decltype(index)::value;
      constexpr int64_t p = kModuli[i];
      const int64_t x = residue_of_x(x_value, p);
      bytes[i * plane + t] = static_cast<uint8_t>(x * CrtTerm<N, i>::inverse % p);
    });
  }
}
__global__ void make_scales(int* scales, int64_t count, int base, uint64_t seed) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count; t += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed ^ t);
    scales[t] = 16 * (base + static_cast<int>(h % 5)) + static_cast<int>((h >> 8) % 16);
  }
}

// variants of the reconstruction from reduced bytes
constexpr int kVariants = 17;
const char* kNames[kVariants] = {"library", "loads+stores only", "limbs imad.wide only", "limbs dfma 3x40 only",
                                 "limbs imad32 6x20 only", "tail only", "dfma limbs + tail", "imad32 limbs + tail",
                                 "to |X| only", "to normalized t only", "to floor_divide only", "fast tail", "branch-free normalization", "library, stores last", "library, double2 stores", "library, smem-coalesced stores", "flat + smem-coalesced"};
const bool kExact[kVariants] = {true, false, false, false, false, false, true, true, false, false, false, true, true, true, true, true, true};

// the library's tail from 4 limbs (S = sum limbs[w] 2^(32 w))
template <int N>
__device__ __forceinline__ double tail(const uint64_t (&limbs)[4], RowScale c_a, RowScale c_b, RoundingFormat format) {
  constexpr double limb = 4294967296.0;
  constexpr int first = CrtProduct<N>::first_quotient_limb;
  double s = static_cast<double>(limbs[3]);
  for (int w = 2; w >= first; --w) s = s * limb + static_cast<double>(limbs[w]);
  constexpr double reciprocal = CrtProduct<N>::reciprocal * (first == 2 ? limb * limb : first == 1 ? limb : 1.0);
  const auto q = static_cast<uint32_t>(rint(s * reciprocal));
  const uint32_t product[4] = {CrtProduct<N>::limb0, CrtProduct<N>::limb1, CrtProduct<N>::limb2, CrtProduct<N>::limb3};
  int64_t carry = 0;
  uint32_t word[4];
  for (int w = 0; w < 4; ++w) {
    const int64_t t = static_cast<int64_t>(limbs[w]) - static_cast<int64_t>(static_cast<uint64_t>(q) * product[w]) + carry;
    word[w] = static_cast<uint32_t>(t);
    carry = t >> 32;
  }
  uint64_t low = uint64_t(word[0]) | (uint64_t(word[1]) << 32);
  uint64_t high = uint64_t(word[2]) | (uint64_t(word[3]) << 32);
  const bool negative = carry < 0;
  if (negative) { low = ~low + 1; high = ~high + (low == 0 ? 1 : 0); }
  if (high == 0 && low == 0) return 0.0;
  const auto divisor = static_cast<uint32_t>(c_a.significand * c_b.significand);
  return round_quotient_to_format(high, low, divisor, negative, -(int64_t(c_a.exponent) + c_b.exponent), format);
}

// stage stubs of the library tail: 0 = |X|, 1 = normalized t, 2 = floor_divide
template <int N, int Stage>
__device__ __forceinline__ double tail_stage(const uint64_t (&limbs)[4], RowScale c_a, RowScale c_b) {
  constexpr double limb = 4294967296.0;
  constexpr int first = CrtProduct<N>::first_quotient_limb;
  double s = static_cast<double>(limbs[3]);
  for (int w = 2; w >= first; --w) s = s * limb + static_cast<double>(limbs[w]);
  constexpr double reciprocal = CrtProduct<N>::reciprocal * (first == 2 ? limb * limb : first == 1 ? limb : 1.0);
  const auto q = static_cast<uint32_t>(rint(s * reciprocal));
  const uint32_t product[4] = {CrtProduct<N>::limb0, CrtProduct<N>::limb1, CrtProduct<N>::limb2, CrtProduct<N>::limb3};
  int64_t carry = 0;
  uint32_t word[4];
  for (int w = 0; w < 4; ++w) {
    const int64_t t = static_cast<int64_t>(limbs[w]) - static_cast<int64_t>(static_cast<uint64_t>(q) * product[w]) + carry;
    word[w] = static_cast<uint32_t>(t);
    carry = t >> 32;
  }
  uint64_t low = uint64_t(word[0]) | (uint64_t(word[1]) << 32);
  uint64_t high = uint64_t(word[2]) | (uint64_t(word[3]) << 32);
  const bool negative = carry < 0;
  if (negative) { low = ~low + 1; high = ~high + (low == 0 ? 1 : 0); }
  if (Stage == 0) return __longlong_as_double(low ^ high);
  if (high == 0 && low == 0) return 0.0;
  const int top = high != 0 ? 64 + highest_set_bit(high) : highest_set_bit(low);
  const int drop = top - 63;
  uint64_t t;
  bool sticky = false;
  if (drop > 0) {
    t = (high << (64 - drop)) | (low >> drop);
    sticky = (low & ((uint64_t(1) << drop) - 1)) != 0;
  } else {
    t = low << -drop;
  }
  if (Stage == 1) return __longlong_as_double(t + sticky);
  const auto divisor = static_cast<uint32_t>(c_a.significand * c_b.significand);
  bool inexact;
  const uint64_t qq = floor_divide(t, divisor, &inexact);
  return __longlong_as_double(qq + inexact + sticky);
}

// u < 2^52 as a double, exactly, without a conversion instruction
__device__ __forceinline__ double small_to_double(uint64_t u) {
  return __hiloint2double(0x43300000 | static_cast<int>(u >> 32), static_cast<int>(u)) - 4503599627370496.0;
}
// rint(v) for 0 <= v < 2^51 as an integer, without a conversion instruction
__device__ __forceinline__ uint32_t rint_small(double v) {
  return static_cast<uint32_t>(__double2loint(v + 4503599627370496.0));
}
__device__ __forceinline__ double rint_small_d(double v) {
  return (v + 6755399441055744.0) - 6755399441055744.0;  // 1.5 2^52: any sign, |v| < 2^51
}

// the library tail with the division and the conversions in exact float64 arithmetic
template <int N>
__device__ __forceinline__ double tail_fast(const uint64_t (&limbs)[4], RowScale c_a, RowScale c_b, RoundingFormat format) {
  constexpr double limb = 4294967296.0;
  constexpr int first = CrtProduct<N>::first_quotient_limb;
  double s = small_to_double(limbs[3]);
  for (int w = 2; w >= first; --w) s = s * limb + small_to_double(limbs[w]);
  constexpr double reciprocal = CrtProduct<N>::reciprocal * (first == 2 ? limb * limb : first == 1 ? limb : 1.0);
  const uint32_t q = rint_small(s * reciprocal);
  const uint32_t product[4] = {CrtProduct<N>::limb0, CrtProduct<N>::limb1, CrtProduct<N>::limb2, CrtProduct<N>::limb3};
  int64_t carry = 0;
  uint32_t word[4];
  for (int w = 0; w < 4; ++w) {
    const int64_t t = static_cast<int64_t>(limbs[w]) - static_cast<int64_t>(static_cast<uint64_t>(q) * product[w]) + carry;
    word[w] = static_cast<uint32_t>(t);
    carry = t >> 32;
  }
  uint64_t low = uint64_t(word[0]) | (uint64_t(word[1]) << 32);
  uint64_t high = uint64_t(word[2]) | (uint64_t(word[3]) << 32);
  const bool negative = carry < 0;
  if (negative) { low = ~low + 1; high = ~high + (low == 0 ? 1 : 0); }
  if (high == 0 && low == 0) return 0.0;
  const int top = high != 0 ? 64 + highest_set_bit(high) : highest_set_bit(low);
  const int drop = top - 63;
  uint64_t t;
  bool sticky = false;
  if (drop > 0) {
    t = (high << (64 - drop)) | (low >> drop);
    sticky = (low & ((uint64_t(1) << drop) - 1)) != 0;
  } else {
    t = low << -drop;
  }
  const auto divisor = static_cast<uint32_t>(c_a.significand * c_b.significand);
  // floor(t / d) in two steps of 32 bits, every value an exact integer below 2^53
  const double d = static_cast<double>(static_cast<int>(divisor));  // I2F.F64.S32
  const double r = __drcp_rn(d);
  const double a = small_to_double(t >> 32), b = small_to_double(t & 0xffffffffu);
  double q1 = rint_small_d(a * r);
  double r1 = fma(-q1, d, a);
  if (r1 < 0) { q1 -= 1.0; r1 += d; }
  const double x = fma(r1, limb, b);
  double q2 = rint_small_d(x * r);
  double r2 = fma(-q2, d, x);
  if (r2 < 0) { q2 -= 1.0; r2 += d; }
  const double odd = (sticky || r2 != 0.0) ? 1.0 : 0.0;
  const int64_t unit = -(int64_t(c_a.exponent) + c_b.exponent) + drop - 1;
  const int64_t least_normal = format.min_exponent + format.precision - 1;
  if (format.precision == kFloat64Format.precision && unit >= least_normal && unit <= 1023) {
    // RN(2 Q + odd) in one rounding: q1 2^33 and 2 q2 + odd are exact
    const double rounded = fma(q1, 8589934592.0, fma(q2, 2.0, odd));
    const double value = rounded * pow2(static_cast<int>(unit));
    return negative ? -value : value;
  }
  const uint64_t m = (static_cast<uint64_t>(rint_small(q1)) << 33) + 2 * static_cast<uint64_t>(rint_small(q2)) + (odd != 0.0);
  return round_word_to_format(m, negative, unit, format);
}

// the library tail with |X| normalized without branches
template <int N>
__device__ __forceinline__ double tail_flat(const uint64_t (&limbs)[4], RowScale c_a, RowScale c_b, RoundingFormat format) {
  constexpr double limb = 4294967296.0;
  constexpr int first = CrtProduct<N>::first_quotient_limb;
  double s = static_cast<double>(limbs[3]);
  for (int w = 2; w >= first; --w) s = s * limb + static_cast<double>(limbs[w]);
  constexpr double reciprocal = CrtProduct<N>::reciprocal * (first == 2 ? limb * limb : first == 1 ? limb : 1.0);
  const auto q = static_cast<uint32_t>(rint(s * reciprocal));
  const uint32_t product[4] = {CrtProduct<N>::limb0, CrtProduct<N>::limb1, CrtProduct<N>::limb2, CrtProduct<N>::limb3};
  int64_t carry = 0;
  uint32_t word[4];
  for (int w = 0; w < 4; ++w) {
    const int64_t t = static_cast<int64_t>(limbs[w]) - static_cast<int64_t>(static_cast<uint64_t>(q) * product[w]) + carry;
    word[w] = static_cast<uint32_t>(t);
    carry = t >> 32;
  }
  uint64_t low = uint64_t(word[0]) | (uint64_t(word[1]) << 32);
  uint64_t high = uint64_t(word[2]) | (uint64_t(word[3]) << 32);
  const bool negative = carry < 0;
  if (negative) { low = ~low + 1; high = ~high + (low == 0 ? 1 : 0); }
  // t: the top 64 bits of |X| from its highest set bit, sticky: any bit below them
  const bool small = high == 0;
  const uint64_t upper = small ? low : high, lower = small ? 0 : low;
  const int lz = __clzll(static_cast<long long>(upper));  // 64 for X = 0
  const int shift = lz & 63;
  const bool whole = shift >= 32;
  const int s32 = shift & 31;
  const uint32_t w3 = static_cast<uint32_t>(upper >> 32), w2 = static_cast<uint32_t>(upper);
  const uint32_t w1 = static_cast<uint32_t>(lower >> 32), w0 = static_cast<uint32_t>(lower);
  const uint32_t a3 = whole ? w2 : w3, a2 = whole ? w1 : w2, a1 = whole ? w0 : w1, a0 = whole ? 0u : w0;
  const uint32_t t_hi = __funnelshift_l(a2, a3, s32), t_lo = __funnelshift_l(a1, a2, s32);
  const bool sticky = (__funnelshift_l(a0, a1, s32) | (a0 << s32)) != 0;
  const uint64_t t = (uint64_t(t_hi) << 32) | t_lo;
  const int drop = (small ? 0 : 64) - shift;
  if (upper == 0) return 0.0;
  const auto divisor = static_cast<uint32_t>(c_a.significand * c_b.significand);
  bool inexact;
  const uint64_t qq = floor_divide(t, divisor, &inexact);
  return round_word_to_format(2 * qq + ((sticky || inexact) ? 1 : 0), negative,
                              -(int64_t(c_a.exponent) + c_b.exponent) + drop - 1, format);
}

template <int N>
__device__ __forceinline__ void limbs_wide(const int32_t (&u)[N], uint64_t (&limbs)[4]) {
  limbs[0] = limbs[1] = limbs[2] = limbs[3] = 0;
  for_each_modulus<N>([&](auto index) {
    constexpr int i = decltype(index)::value;
    using Term = CrtTerm<N, i>;
    const uint64_t x = static_cast<uint32_t>(u[i]);
    limbs[0] += x * Term::partial0; limbs[1] += x * Term::partial1;
    limbs[2] += x * Term::partial2; limbs[3] += x * Term::partial3;
  });
}

// P / p_i in 40-bit pieces
template <int N, int I, int W>
struct Piece40 {
  static constexpr uint64_t lo = uint64_t(CrtTerm<N, I>::partial0) | (uint64_t(CrtTerm<N, I>::partial1) << 32);
  static constexpr uint64_t hi = uint64_t(CrtTerm<N, I>::partial2) | (uint64_t(CrtTerm<N, I>::partial3) << 32);
  static constexpr uint64_t mask = (uint64_t(1) << 40) - 1;
  static constexpr uint64_t value = W == 0 ? (lo & mask) : W == 1 ? (((lo >> 40) | (hi << 24)) & mask) : ((hi >> 16) & mask);
  static constexpr double d = static_cast<double>(value);
};
__device__ __forceinline__ double byte_as_double(uint32_t b) {  // exact, b < 2^32
  return __hiloint2double(0x43300000, static_cast<int>(b)) - 4503599627370496.0;
}
__device__ __forceinline__ uint64_t double_as_integer(double x) {  // x integer in [0, 2^52)
  return static_cast<uint64_t>(__double_as_longlong(x + 4503599627370496.0)) & ((uint64_t(1) << 52) - 1);
}
template <int N>
struct Pieces40 {
  double d[16][3];
};
template <int N>
constexpr Pieces40<N> pieces40() {
  Pieces40<N> p{};
  for (int i = 0; i < N; ++i) {
    const Limbs l = product_limbs(N, i);
    const uint64_t lo = uint64_t(l.w[0]) | (uint64_t(l.w[1]) << 32);
    const uint64_t hi = uint64_t(l.w[2]) | (uint64_t(l.w[3]) << 32);
    const uint64_t mask = (uint64_t(1) << 40) - 1;
    p.d[i][0] = static_cast<double>(lo & mask);
    p.d[i][1] = static_cast<double>(((lo >> 40) | (hi << 24)) & mask);
    p.d[i][2] = static_cast<double>((hi >> 16) & mask);
  }
  return p;
}
template <int N>
__constant__ Pieces40<N> kPieces40 = pieces40<N>();
template <int N>
__device__ __forceinline__ void limbs_dfma(const int32_t (&u)[N], double (&d)[3]) {
  d[0] = d[1] = d[2] = 0.0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const double x = byte_as_double(static_cast<uint32_t>(u[i]));
    d[0] = fma(x, kPieces40<N>.d[i][0], d[0]);
    d[1] = fma(x, kPieces40<N>.d[i][1], d[1]);
    d[2] = fma(x, kPieces40<N>.d[i][2], d[2]);
  }
}
__device__ __forceinline__ void limbs_from_40(const double (&d)[3], uint64_t (&limbs)[4]) {
  const uint64_t a0 = double_as_integer(d[0]), a1 = double_as_integer(d[1]), a2 = double_as_integer(d[2]);
  const uint64_t lo = a0 + (a1 << 40);
  const uint64_t carry = lo < a0 ? 1 : 0;
  const uint64_t hi = (a1 >> 24) + (a2 << 16) + carry;
  limbs[0] = lo & 0xffffffffu; limbs[1] = lo >> 32; limbs[2] = hi & 0xffffffffu; limbs[3] = hi >> 32;
}

template <int N, int I, int W>
struct Piece20 {
  static constexpr uint64_t lo = uint64_t(CrtTerm<N, I>::partial0) | (uint64_t(CrtTerm<N, I>::partial1) << 32);
  static constexpr uint64_t hi = uint64_t(CrtTerm<N, I>::partial2) | (uint64_t(CrtTerm<N, I>::partial3) << 32);
  static constexpr int bit = 20 * W;
  static constexpr uint64_t window = bit >= 64 ? (hi >> (bit - 64)) : (bit == 0 ? lo : ((lo >> bit) | (hi << (64 - bit))));
  static constexpr uint32_t value = static_cast<uint32_t>(window & ((1u << 20) - 1));
};
template <int N>
__device__ __forceinline__ void limbs_imad32(const int32_t (&u)[N], uint32_t (&l)[6]) {
#pragma unroll
  for (int w = 0; w < 6; ++w) l[w] = 0;
  for_each_modulus<N>([&](auto index) {
    constexpr int i = decltype(index)::value;
    const uint32_t x = static_cast<uint32_t>(u[i]);
    l[0] += x * Piece20<N, i, 0>::value; l[1] += x * Piece20<N, i, 1>::value;
    l[2] += x * Piece20<N, i, 2>::value; l[3] += x * Piece20<N, i, 3>::value;
    l[4] += x * Piece20<N, i, 4>::value; l[5] += x * Piece20<N, i, 5>::value;
  });
}
__device__ __forceinline__ void limbs_from_20(const uint32_t (&l)[6], uint64_t (&limbs)[4]) {
  // S = sum l[w] 2^(20 w), l[w] < 2^32
  unsigned __int128 s = 0;
#pragma unroll
  for (int w = 0; w < 6; ++w) s += static_cast<unsigned __int128>(l[w]) << (20 * w);
  const uint64_t lo = static_cast<uint64_t>(s), hi = static_cast<uint64_t>(s >> 64);
  limbs[0] = lo & 0xffffffffu; limbs[1] = lo >> 32; limbs[2] = hi & 0xffffffffu; limbs[3] = hi >> 32;
}

template <int N, int V, typename T>
__global__ void variant_kernel(const uint8_t* products, int64_t rows, int64_t ld, const int* scale_a,
                               const int* scale_b, T* out) {
  const int64_t plane = rows * ld;
  for_each_four_columns(rows, ld / 4, [&](int64_t row, int64_t j0) {
    const RowScale c_a = row_scale(scale_a[row]);
    const FourReducedEntries<N> loaded(products + row * ld + j0, plane);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t j = j0 + c;
      int32_t u[N];
      loaded.of_entry(c, u);
      const RowScale c_b = row_scale(scale_b[j]);
      double value;
      if constexpr (V == 0) {
        value = crt_reconstruct<N, true>(u, c_a, c_b, format_of<T>());
      } else if constexpr (V == 1) {
        int64_t sum = 0;
#pragma unroll
        for (int m = 0; m < N; ++m) sum += u[m];
        value = static_cast<double>(sum);
      } else if constexpr (V == 2) {
        uint64_t l[4]; limbs_wide<N>(u, l);
        value = static_cast<double>(l[0] ^ l[1] ^ l[2] ^ l[3]);
      } else if constexpr (V == 3) {
        double d[3]; limbs_dfma<N>(u, d);
        value = d[0] + d[1] + d[2];
      } else if constexpr (V == 4) {
        uint32_t l[6]; limbs_imad32<N>(u, l);
        value = static_cast<double>(l[0] ^ l[1] ^ l[2] ^ l[3] ^ l[4] ^ l[5]);
      } else if constexpr (V == 5) {
        uint64_t l[4];
        l[0] = uint64_t(u[0]) * 0x9e3779b9u + u[4]; l[1] = uint64_t(u[1]) * 0x7f4a7c15u + u[5];
        l[2] = uint64_t(u[2]) * 0x85ebca6bu + u[6]; l[3] = uint64_t(u[3]) * 0xc2b2ae35u >> 4;
        value = tail<N>(l, c_a, c_b, format_of<T>());
      } else if constexpr (V == 6) {
        double d[3]; limbs_dfma<N>(u, d);
        uint64_t l[4]; limbs_from_40(d, l);
        value = tail<N>(l, c_a, c_b, format_of<T>());
      } else if constexpr (V >= 8 && V <= 10) {
        uint64_t l[4]; limbs_wide<N>(u, l);
        value = tail_stage<N, V - 8>(l, c_a, c_b);
      } else if constexpr (V == 12) {
        uint64_t l[4]; limbs_wide<N>(u, l);
        value = tail_flat<N>(l, c_a, c_b, format_of<T>());
      } else if constexpr (V == 11) {
        uint64_t l[4]; limbs_wide<N>(u, l);
        value = tail_fast<N>(l, c_a, c_b, format_of<T>());
      } else {
        uint32_t w[6]; limbs_imad32<N>(u, w);
        uint64_t l[4]; limbs_from_20(w, l);
        value = tail<N>(l, c_a, c_b, format_of<T>());
      }
      out[row * ld + j] = static_cast<T>(value);
    }
  });
}

// library variants that differ in how the four results are stored
template <int N, int V, typename T>
__global__ void store_kernel(const uint8_t* products, int64_t rows, int64_t ld, const int* scale_a,
                             const int* scale_b, T* out) {
  __shared__ __align__(16) T staged[8][128];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t plane = rows * ld;
  for_each_four_columns(rows, ld / 4, [&](int64_t row, int64_t j0) {
    const RowScale c_a = row_scale(scale_a[row]);
    const FourReducedEntries<N> loaded(products + row * ld + j0, plane);
    T v[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      int32_t u[N];
      loaded.of_entry(c, u);
      const RowScale c_b = row_scale(scale_b[j0 + c]);
      if constexpr (V == 16) {
        uint64_t l[4]; limbs_wide<N>(u, l);
        v[c] = static_cast<T>(tail_flat<N>(l, c_a, c_b, format_of<T>()));
      } else {
        v[c] = static_cast<T>(crt_reconstruct<N, true>(u, c_a, c_b, format_of<T>()));
      }
    }
    if constexpr (V == 13) {
#pragma unroll
      for (int c = 0; c < 4; ++c) out[row * ld + j0 + c] = v[c];
    } else if constexpr (V == 14) {
      if constexpr (sizeof(T) == 8) {
        reinterpret_cast<double2*>(out + row * ld + j0)[0] = make_double2(v[0], v[1]);
        reinterpret_cast<double2*>(out + row * ld + j0)[1] = make_double2(v[2], v[3]);
      } else {
        reinterpret_cast<float4*>(out + row * ld + j0)[0] = make_float4(v[0], v[1], v[2], v[3]);
      }
    } else {
      // the warp's 128 consecutive entries through shared memory, then 4 coalesced stores
#pragma unroll
      for (int c = 0; c < 4; ++c) staged[warp][4 * lane + c] = v[c];
      __syncwarp();
      const int64_t base = row * ld + j0 - 4 * lane;
#pragma unroll
      for (int c = 0; c < 4; ++c) out[base + 32 * c + lane] = staged[warp][32 * c + lane];
      __syncwarp();
    }
  });
}

inline dim3 grid_2d(int64_t rows, int64_t per_row, int threads, int sms) {
  const int64_t x = std::max<int64_t>(1, std::min<int64_t>((per_row + threads - 1) / threads, sms * 32));
  const int64_t cap = std::min<int64_t>((rows * per_row + threads - 1) / threads, sms * 32);
  const int64_t y = std::clamp<int64_t>(cap / x, 1, std::min<int64_t>(rows, 65535));
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

template <int N, typename T>
void launch_variant(int v, const uint8_t* bytes, int64_t n, const int* sa, const int* sb, T* out, int sms) {
  const dim3 grid = grid_2d(n, n / 4, 256, sms);
  switch (v) {
    case 0: variant_kernel<N, 0, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 1: variant_kernel<N, 1, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 2: variant_kernel<N, 2, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 3: variant_kernel<N, 3, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 4: variant_kernel<N, 4, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 5: variant_kernel<N, 5, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 6: variant_kernel<N, 6, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 7: variant_kernel<N, 7, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 8: variant_kernel<N, 8, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 9: variant_kernel<N, 9, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 10: variant_kernel<N, 10, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 11: variant_kernel<N, 11, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 13: store_kernel<N, 13, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 14: store_kernel<N, 14, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 15: store_kernel<N, 15, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    case 16: store_kernel<N, 16, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
    default: variant_kernel<N, 12, T><<<grid, 256>>>(bytes, n, n, sa, sb, out); break;
  }
}

extern int g_once;
template <typename Launch>
float median_ms(Launch launch) {
  if (g_once) { launch(); CHECK(cudaDeviceSynchronize()); return 0.f; }
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start)); CHECK(cudaEventCreate(&stop));
  launch(); launch();
  std::vector<float> times;
  for (int r = 0; r < 7; ++r) {
    CHECK(cudaEventRecord(start)); launch(); CHECK(cudaEventRecord(stop)); CHECK(cudaEventSynchronize(stop));
    float ms; CHECK(cudaEventElapsedTime(&ms, start, stop)); times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[3];
}

template <int N, typename T>
void run(int64_t n, int sms, bool near_top = false) {
  const int64_t plane = n * n;
  uint8_t* bytes; int *sa, *sb; T* out[kVariants];
  CHECK(cudaMalloc(&bytes, N * plane)); CHECK(cudaMalloc(&sa, n * 4)); CHECK(cudaMalloc(&sb, n * 4));
  for (auto& o : out) CHECK(cudaMalloc(&o, plane * sizeof(T)));
  int log2p = CrtProduct<N>::log2;
  make_bytes<N><<<sms * 32, 256>>>(bytes, plane, log2p - 1, 12345, near_top);
  const int base = std::is_same_v<T, double> ? -60 : -30;
  make_scales<<<sms * 4, 256>>>(sa, n, base, 1);
  make_scales<<<sms * 4, 256>>>(sb, n, base, 2);
  CHECK(cudaDeviceSynchronize());
  std::vector<T> ref(plane), got(plane);
  for (int v = 0; v < kVariants; ++v) {
    const float ms = median_ms([&] { launch_variant<N, T>(v, bytes, n, sa, sb, out[v], sms); });
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy((v == 0 ? ref : got).data(), out[v], plane * sizeof(T), cudaMemcpyDeviceToHost));
    int64_t differ = -1;
    if (v > 0 && kExact[v]) {
      differ = 0;
      for (int64_t t = 0; t < plane; ++t) differ += std::memcmp(&ref[t], &got[t], sizeof(T)) != 0;
    }
    std::printf("%s%s N=%2d %5lld^2 %-28s %.3f ms  differ %lld\n", near_top ? "top " : "", sizeof(T) == 8 ? "f64" : "f32", N, (long long)n,
                kNames[v], ms, (long long)differ);
  }
  CHECK(cudaFree(bytes)); CHECK(cudaFree(sa)); CHECK(cudaFree(sb));
  for (auto& o : out) CHECK(cudaFree(o));
}

int g_once = 0;
int main(int argc, char** argv) {
  int sms; CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (argc > 1) { g_once = 1; run<15, double>(16384, sms); return 0; }
  run<15, double>(16384, sms);
  run<15, double>(16384, sms, true);
  run<16, double>(16384, sms);
  run<8, float>(16384, sms);
  run<15, double>(4096, sms);
  return 0;
}
