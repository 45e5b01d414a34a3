// Host check of the float64-first rounding (round_quotient_float64, csrc/crt.h): crt_reconstruct
// with it against the exact path alone, bit for bit, on the residues of exact integers X drawn
// across magnitudes, exact ties and near-ties (also just below powers of two), exact quotients,
// small X at the 64-bit words' borders, and scales that push results to overflow and subnormals;
// then the float64 rounding alone with a reciprocal off by up to 2^-40 (as the device's may be),
// against round_quotient_to_format. tests/test_float64_rounding.py runs it.
//   g++ -O2 -std=c++20 -ffp-contract=off -Icsrc scripts/probes/reconstruct_float64_check.cpp -o /tmp/check
//   /tmp/check 20000000
// Prints, per moduli count, the draws, how many differ from the exact path (0 expected), how many
// the float64 rounding decided, and the exact ties met and decided by it (0 expected: a tie is the
// exact path's).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

uint64_t bits_of_double(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
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

// Whether |X| / divisor lies exactly halfway between two float64 neighbours (as a significand;
// the power of two 2^unit moves no tie while the result stays normal).
bool is_tie(int128 x, int64_t divisor) {
  const int128 magnitude = x < 0 ? -x : x;
  if (magnitude % divisor != 0) return false;
  const int128 quotient = magnitude / divisor;
  const int length = bit_length(quotient);
  if (length < 54) return false;
  const int dropped = length - 54;  // the 54th significant bit is the half ulp's
  return ((quotient >> dropped) & 1) == 1 && quotient % (int128(1) << dropped) == 0;
}

// One X of the given kind, |X| <= half.
int128 draw_x(int kind, int128 half, int top, int64_t divisor, uint64_t r0, uint64_t r1,
              uint64_t r2) {
  const bool negative = (r2 >> 51) & 1;
  int128 v;
  if (kind <= 2) {  // random magnitudes, kind 2 the largest ones
    const int bits = kind == 2 ? top - int((r2 >> 44) % 8) : int((r2 >> 44) % (top + 1));
    v = (int128(r1) << 64) | r0;
    v &= bits >= 127 ? ~int128(0) : (int128(1) << bits) - 1;
    v = std::min(v, half);
  } else if (kind == 3) {  // a tie: divisor times a 54-bit odd integer times 2^e, then +-0..2
    const int e = int((r2 >> 44) % 60);
    v = divisor * ((int128(1) << 53) + (r0 & ((uint64_t(1) << 52) - 1)) * 2 + 1);
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
  } else if (kind == 5) {  // ties just below a power of two: quotient 2^54 - 1 (times 2^j), +-0..2
    v = (int128(divisor) * ((int128(1) << 54) - 1)) << int((r2 >> 44) % 64);
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

template <int N>
Counts check_moduli(long long draws) {
  const int128 half = moduli_product<N>() / 2 - moduli_product<N>() / (int128(1) << 30);
  const int top = bit_length(half) - 1;  // 2^top <= half
  Counts counts;
  for (long long n = 0; n < draws; ++n) {
    const uint64_t r0 = next_random(), r1 = next_random(), r2 = next_random();
    const RowScale c_a{16 + int(r2 % 16), int((r2 >> 4) % 1200) - 600};
    const RowScale c_b{16 + int((r2 >> 16) % 16), int((r2 >> 24) % 1200) - 600};
    const int64_t divisor = c_a.significand * c_b.significand;
    const int128 x = draw_x(int((r2 >> 40) % 7), half, top, divisor, r0, r1, r2);
    int32_t residues[N];
    reduced_residues<N>(x, residues);
    const double exact = crt_reconstruct<N, true, false>(residues, c_a, c_b, kFloat64Format);
    const double first = crt_reconstruct<N, true, true>(residues, c_a, c_b, kFloat64Format);
    bool decided;
    round_quotient_float64(static_cast<uint64_t>(static_cast<unsigned __int128>(x) >> 64),
                           static_cast<uint64_t>(x), static_cast<uint32_t>(divisor),
                           divisor_reciprocal(static_cast<uint32_t>(divisor)),
                           -(int64_t(c_a.exponent) + c_b.exponent), &decided);
    const bool tie = is_tie(x, divisor);
    ++counts.draws;
    counts.decided += decided;
    counts.ties += tie;
    counts.ties_decided += tie && decided;
    if (bits_of_double(exact) != bits_of_double(first)) {
      if (counts.differing < 10) std::printf("N=%d differ: exact %a, first %a\n", N, exact, first);
      ++counts.differing;
    }
  }
  std::printf("N=%d draws %lld differing %lld decided %lld ties %lld ties_decided %lld\n", N,
              counts.draws, counts.differing, counts.decided, counts.ties, counts.ties_decided);
  return counts;
}

// The float64 rounding alone on random 128-bit X with a reciprocal within 2^-40 of 1 / divisor.
Counts check_perturbed_reciprocal(long long draws) {
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
    const int64_t unit = int64_t((r2 >> 40) % 2200) - 1100;
    const double error = std::ldexp(double((r2 >> 50) % 1024), -50);  // below 2^-40
    const double reciprocal = (1.0 / divisor) * (1.0 + ((r2 >> 60) & 1 ? error : -error));
    bool decided;
    const double first =
        round_quotient_float64(signed_high, signed_low, divisor, reciprocal, unit, &decided);
    ++counts.draws;
    if (!decided) continue;
    ++counts.decided;
    const double exact = high == 0 && low == 0
                             ? 0.0
                             : round_quotient_to_format(high, low, divisor, negative, unit,
                                                        kFloat64Format);
    if (bits_of_double(exact) != bits_of_double(first)) {
      if (counts.differing < 10) std::printf("perturbed differ: exact %a, first %a\n", exact, first);
      ++counts.differing;
    }
  }
  std::printf("perturbed draws %lld differing %lld decided %lld\n", counts.draws,
              counts.differing, counts.decided);
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  const long long draws = argc > 1 ? std::atoll(argv[1]) : 1000000;
  long long differing = 0;
  differing += check_moduli<15>(draws).differing;
  differing += check_moduli<16>(draws).differing;
  differing += check_moduli<8>(draws).differing;
  differing += check_moduli<12>(draws).differing;
  differing += check_perturbed_reciprocal(draws).differing;
  return differing == 0 ? 0 : 1;
}
