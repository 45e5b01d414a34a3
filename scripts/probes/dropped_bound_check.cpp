// Host check of the interval that rounding="nearest" leaves for the dropped part of a split
// (dropped_bound and widen_by_dropped, csrc/exact.h): for every slice count, both fast modes and
// inner dimensions up to the INT8 limit (k < 2^29, where k (2 s + 1) passes 2^32), the interval's
// ends around 0, in the limbs nearest_from_level_sums clears, must be exactly -bound and +bound,
// bound = multiple * 2^shift. tests/test_nearest.py runs it.
//   g++ -O2 -std=c++20 -Icsrc scripts/probes/dropped_bound_check.cpp -o /tmp/check && /tmp/check
// Prints the cases checked and how many were wrong (0 expected).
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
  std::printf("cases %ld wrong %ld\n", cases, wrong);
  return wrong == 0 ? 0 : 1;
}
