// Host check of the rounding in float64 arithmetic first (round_quotient_float64 and
// round_quotient_float32, csrc/crt.h): crt_reconstruct with it against the exact path alone, bit
// for bit, for float64 and float32 results, on the residues of exact integers X drawn across
// magnitudes, exact ties and near-ties (also just below powers of two), exact quotients, small X
// at the 64-bit words' borders, and scales that push results to overflow and subnormals; then the
// float64 arithmetic's rounding alone with a reciprocal off by up to 2^-40 (as the device's may
// be), against round_quotient_to_format. tests/test_float64_rounding.py runs it.
//   g++ -O2 -std=c++20 -ffp-contract=off -Icsrc scripts/probes/reconstruct_float64_check.cpp -o /tmp/check
//   /tmp/check 20000000
// Prints, per format and moduli count, the draws, how many differ from the exact path (0
// expected), how many the float64 arithmetic decided, and the exact ties met and decided by it (0
// expected: a tie is the exact path's).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "crt.h"

using namespace ozaki;
using int128 = __int128;

namespace {

uint64_t g_state = 0x9E3779B97F4A7C15ull;
uint64_t next_random() {  // xorshift64
  g_state ^= g_state << 13;
  g_state ^= g_state >> 7;
  g_state ^= g_state << 17;
  return g_state;
}

template <int N>
int128 moduli_product() {
  int128 product = 1;
  for (int i = 0; i < N; ++i) product *= kModuli[i];
  return product;
}

// The reduced residues crt_reconstruct<N, true> takes for X: u_i = X y_i mod p_i in [0, p_i).
template <int N>
void reduced_residues(int128 x, int32_t* residues) {
  for_each_modulus<N>([&](auto index) {
    constexpr int i = decltype(index)::value;
    const int64_t p = kModuli[i];
    int64_t r = static_cast<int64_t>(x % p);
    if (r < 0) r += p;
    residues[i] = static_cast<int32_t>(r * CrtTerm<N, i>::inverse % p);
  });
}

int bit_length(int128 v) {
  int length = 0;
  while (v > 0) {
    v >>= 1;
    ++length;
  }
  return length;
}

// Whether |X| / divisor lies exactly halfway between two neighbours of `precision` significant
// bits (the power of two 2^unit moves no tie while the result stays normal).
bool is_tie(int128 x, int64_t divisor, int precision) {
  const int128 magnitude = x < 0 ? -x : x;
  if (magnitude % divisor != 0) return false;
  const int128 quotient = magnitude / divisor;
  const int length = bit_length(quotient);
  if (length <= precision) return false;
  const int dropped = length - (precision + 1);  // the bit after the last kept one is the half's
  return ((quotient >> dropped) & 1) == 1 && quotient % (int128(1) << dropped) == 0;
}

// One X of the given kind, |X| <= half, for results of `precision` significant bits.
int128 draw_x(int kind, int128 half, int top, int64_t divisor, int precision, uint64_t r0,
              uint64_t r1, uint64_t r2) {
  const bool negative = (r2 >> 51) & 1;
  int128 v;
  if (kind <= 2) {  // random magnitudes, kind 2 the largest ones
    const int bits = kind == 2 ? top - int((r2 >> 44) % 8) : int((r2 >> 44) % (top + 1));
    v = (int128(r1) << 64) | r0;
    v &= bits >= 127 ? ~int128(0) : (int128(1) << bits) - 1;
    v = std::min(v, half);
  } else if (kind == 3) {  // a tie: divisor times an odd integer of precision + 1 bits times 2^e,
                           // then +-0..2
    const int e = int((r2 >> 44) % 60);
    const uint64_t odd_part = r0 & ((uint64_t(1) << (precision - 1)) - 1);
    v = divisor * ((int128(1) << precision) + int128(odd_part) * 2 + 1);
    if (e > 0) v <<= e - 1;
    while (v > half) v >>= 1;
    v += int64_t((r2 >> 52) % 5) - 2;
  } else if (kind == 4) {  // exact quotients: divisor times powers of two or random integers
    const int e = int((r2 >> 44) % 100);
    const int128 quotient =
        (r2 >> 58) & 1 ? int128(1) << e : int128(r0 >> (r2 % 64)) << (e / 2);
    v = divisor * quotient;
    while (v > half) v >>= 1;
    v += int64_t((r2 >> 52) % 3) - 1;
  } else if (kind == 5) {  // ties just below a power of two: quotient 2^(precision + 1) - 1, +-0..2
    v = (int128(divisor) * ((int128(1) << (precision + 1)) - 1)) << int((r2 >> 44) % 64);
    while (v > half) v >>= 1;
    v += int64_t((r2 >> 52) % 5) - 2;
  } else {  // small X around the 64-bit words' borders
    v = (int128(1) << (int((r2 >> 44) % 4) * 32)) + int64_t(r0 % 2001) - 1000;
    v = std::min(v, half);
  }
  return negative ? -v : v;
}

struct Counts {
  long long draws = 0, differing = 0, decided = 0, ties = 0, ties_decided = 0;
};

// Scale exponents in [-600, 600) for float64 results and [-100, 100) for float32 ones, so that
// both reach past their formats' overflow and subnormal thresholds.
template <int N>
Counts check_moduli(long long draws, RoundingFormat format) {
  const int128 half = moduli_product<N>() / 2 - moduli_product<N>() / (int128(1) << 30);
  const int top = bit_length(half) - 1;  // 2^top <= half
  const bool float64 = format.precision == kFloat64Format.precision;
  const int exponents = float64 ? 1200 : 200;
  Counts counts;
  for (long long n = 0; n < draws; ++n) {
    const uint64_t r0 = next_random(), r1 = next_random(), r2 = next_random();
    const RowScale c_a{16 + int(r2 % 16), int((r2 >> 4) % exponents) - exponents / 2};
    const RowScale c_b{16 + int((r2 >> 16) % 16), int((r2 >> 24) % exponents) - exponents / 2};
    const int64_t divisor = c_a.significand * c_b.significand;
    const int128 x =
        draw_x(int((r2 >> 40) % 7), half, top, divisor, format.precision, r0, r1, r2);
    int32_t residues[N];
    reduced_residues<N>(x, residues);
    const double exact = crt_reconstruct<N, true, false>(residues, c_a, c_b, format);
    const double first = crt_reconstruct<N, true, true>(residues, c_a, c_b, format);
    const uint32_t d = static_cast<uint32_t>(divisor);
    const auto high = static_cast<uint64_t>(static_cast<unsigned __int128>(x) >> 64);
    const auto low = static_cast<uint64_t>(x);
    const int64_t unit = -(int64_t(c_a.exponent) + c_b.exponent);
    bool decided;
    round_quotient_in_float64(high, low, d, divisor_reciprocal(d), unit, format, &decided);
    const bool tie = is_tie(x, divisor, format.precision);
    ++counts.draws;
    counts.decided += decided;
    counts.ties += tie;
    counts.ties_decided += tie && decided;
    if (bits_of(exact) != bits_of(first)) {
      if (counts.differing < 10) std::printf("N=%d differ: exact %a, first %a\n", N, exact, first);
      ++counts.differing;
    }
  }
  std::printf("%s N=%d draws %lld differing %lld decided %lld ties %lld ties_decided %lld\n",
              float64 ? "float64" : "float32", N, counts.draws, counts.differing, counts.decided,
              counts.ties, counts.ties_decided);
  return counts;
}

// The float64 arithmetic's rounding alone on random 128-bit X with a reciprocal within 2^-40 of
// 1 / divisor (units in [-1100, 1100) for float64 results, [-200, 200) for float32 ones).
Counts check_perturbed_reciprocal(long long draws, RoundingFormat format) {
  const bool float64 = format.precision == kFloat64Format.precision;
  const int units = float64 ? 2200 : 400;
  Counts counts;
  for (long long n = 0; n < draws; ++n) {
    const uint64_t r0 = next_random(), r1 = next_random(), r2 = next_random();
    const int bits = int(r2 % 127);
    uint64_t high = bits > 64 ? r1 & ((uint64_t(1) << (bits - 64)) - 1) : 0;
    const uint64_t low = bits >= 64 ? r0 : bits == 0 ? 0 : r0 & ((uint64_t(1) << bits) - 1);
    high &= (uint64_t(1) << 62) - 1;
    const bool negative = (r2 >> 20) & 1;
    uint64_t signed_high = high, signed_low = low;
    if (negative) {
      signed_low = ~low + 1;
      signed_high = ~high + (signed_low == 0 ? 1 : 0);
    }
    const uint32_t divisor = 256 + uint32_t((r2 >> 30) % 768);
    const int64_t unit = int64_t((r2 >> 40) % units) - units / 2;
    const double error = std::ldexp(double((r2 >> 50) % 1024), -50);  // below 2^-40
    const double reciprocal = (1.0 / divisor) * (1.0 + ((r2 >> 60) & 1 ? error : -error));
    bool decided;
    const double first = round_quotient_in_float64(signed_high, signed_low, divisor, reciprocal,
                                                   unit, format, &decided);
    ++counts.draws;
    if (!decided) continue;
    ++counts.decided;
    const double exact = high == 0 && low == 0
                             ? 0.0
                             : round_quotient_to_format(high, low, divisor, negative, unit,
                                                        format);
    if (bits_of(exact) != bits_of(first)) {
      if (counts.differing < 10) std::printf("perturbed differ: exact %a, first %a\n", exact, first);
      ++counts.differing;
    }
  }
  std::printf("%s perturbed draws %lld differing %lld decided %lld\n",
              float64 ? "float64" : "float32", counts.draws, counts.differing, counts.decided);
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  const long long draws = argc > 1 ? std::atoll(argv[1]) : 1000000;
  long long differing = 0;
  differing += check_moduli<15>(draws, kFloat64Format).differing;
  differing += check_moduli<16>(draws, kFloat64Format).differing;
  differing += check_moduli<8>(draws, kFloat64Format).differing;
  differing += check_moduli<12>(draws, kFloat64Format).differing;
  differing += check_moduli<7>(draws, kFloat32Format).differing;
  differing += check_moduli<8>(draws, kFloat32Format).differing;
  differing += check_moduli<15>(draws, kFloat32Format).differing;
  differing += check_perturbed_reciprocal(draws, kFloat64Format).differing;
  differing += check_perturbed_reciprocal(draws, kFloat32Format).differing;
  return differing == 0 ? 0 : 1;
}
