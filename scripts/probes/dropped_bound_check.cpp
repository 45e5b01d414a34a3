// Host check of the interval that rounding="nearest" leaves for the dropped part of a split
// (dropped_bound and widen_by_dropped, csrc/exact.h): for every slice count, both fast modes and
// inner dimensions up to the INT8 limit (k < 2^29, where k (2 s + 1) passes 2^32), the interval's
// ends around 0, in the limbs nearest_from_level_sums clears, must be exactly -bound and +bound,
// bound = multiple * 2^shift; and LongInteger::add_wide, which both that bound and the level sums
// go through, against 128-bit integers. tests/test_nearest.py runs it.
//   g++ -O2 -std=c++20 -Icsrc scripts/probes/dropped_bound_check.cpp -o /tmp/check && /tmp/check
// Prints the cases checked and how many were wrong (0 expected).
#include <cstdint>
#include <cstdio>
#include <initializer_list>

#include "exact.h"

using namespace ozaki;

namespace {

// Whether x, normalized, is exactly `multiple` * 2^shift in magnitude with the sign `negative`.
bool holds(LongInteger<kLevelLimbs> x, bool negative, int64_t multiple, int shift) {
  if (x.normalize() != negative || x.any_below(shift)) return false;
  if (x.bits(shift, 40) != static_cast<uint64_t>(multiple)) return false;
  for (int64_t bit = shift + 40; bit < 32 * int64_t(x.count); bit += 60) {
    if (x.bits(bit, 60) != 0) return false;
  }
  return true;
}

// Whether add_wide(n, bit) of a cleared integer, then of n2 at bit2, gives n 2^bit + n2 2^bit2
// (128-bit), for n, n2 of either sign up to 2^62 in magnitude and bits up to 60.
long wrong_wide_sums(long* cases) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  const auto next = [&state] {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  long wrong = 0;
  for (int draw = 0; draw < 200000; ++draw) {
    const auto drawn = [&] {
      const int width = static_cast<int>(next() % 63);  // |n| < 2^width <= 2^62
      const int64_t magnitude = static_cast<int64_t>(next() & ((uint64_t(1) << width) - 1));
      return next() & 1 ? -magnitude : magnitude;
    };
    const int64_t n = drawn(), n2 = drawn();
    const int bit = static_cast<int>(next() % 61), bit2 = static_cast<int>(next() % 61);
    LongInteger<kLevelLimbs> x;
    x.clear(6);
    x.add_wide(n, bit);
    x.add_wide(n2, bit2);
    const __int128 expected = (__int128(n) << bit) + (__int128(n2) << bit2);
    const bool negative = x.normalize();
    const unsigned __int128 magnitude =
        expected < 0 ? -static_cast<unsigned __int128>(expected)
                     : static_cast<unsigned __int128>(expected);
    const unsigned __int128 got =
        (static_cast<unsigned __int128>(x.bits(64, 60)) << 64) | x.bits(0, 60) |
        (static_cast<unsigned __int128>(x.bits(60, 4)) << 60);
    ++*cases;
    if (negative != (expected < 0) || got != magnitude || x.bits(124, 60) != 0) ++wrong;
  }
  return wrong;
}

}  // namespace

int main() {
  const int64_t ks[] = {1, 1000, (int64_t(1) << 22), (int64_t(1) << 27) + 1, 264306883,
                        (int64_t(1) << 28), (int64_t(1) << 29) - 1};
  long cases = 0, wrong = 0;
  for (const int64_t k : ks) {
    for (const bool int8 : {false, true}) {
      if (!int8 && k > (int64_t(1) << 22)) continue;  // FP16 digits stop there
      const int beta = int8 ? int8_digit_bits_for(k) : digit_bits_for(k);
      if (beta < 1) continue;
      for (int s = 1; s <= kMaxSlices; ++s) {
        for (const bool fast : {false, true}) {
          PairLayout layout{};
          layout.slices = s;
          layout.fast = fast;
          // spans past what s slices capture: the bound is never zero
          const int span = bits_captured(s, beta) + 1;
          const DroppedBound dropped = dropped_bound(layout, beta, k, span, span);
          const int w = grid_step_bits(beta);
          LongInteger<kLevelLimbs> low;
          low.clear((layout.top_level() * w + 64) / 32 + 1);
          LongInteger<kLevelLimbs> high = low;
          widen_by_dropped(low, high, dropped);
          ++cases;
          if (!holds(low, true, dropped.multiple, dropped.shift) ||
              !holds(high, false, dropped.multiple, dropped.shift)) {
            ++wrong;
            if (wrong <= 5) {
              std::printf("wrong: k %lld int8 %d s %d fast %d multiple %lld shift %d\n",
                          static_cast<long long>(k), int8, s, fast,
                          static_cast<long long>(dropped.multiple), dropped.shift);
            }
          }
        }
      }
    }
  }
  wrong += wrong_wide_sums(&cases);
  std::printf("cases %ld wrong %ld\n", cases, wrong);
  return wrong == 0 ? 0 : 1;
}
