// ozaki::fingerprint: a 64-bit digest of a matrix's entries and their positions, by which a kept
// left operand (ozaki/repeated.py) is found unchanged before its kept parts serve a product, also
// after writes that its version counter did not see (a CUDA graph's replay, a NumPy or DLPack
// view). The digest is the sum modulo 2^64 of one mixed term per entry: order-free, so every
// backend and launch shape gives the same bits.
#pragma once

#include <cstdint>

#include "scheme.h"

namespace ozaki {

// The term of the entry with bits `bits` at row-major position `index` (row * k + column):
// splitmix64's finalizer of the bits and the position's multiple of the golden ratio, so that a
// change of any bit, or two entries trading places, changes the term.
OZAKI_HD uint64_t fingerprint_term(uint64_t bits, uint64_t index) {
  uint64_t z = bits ^ (index * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The bits of an entry, zero-extended (float32 entries keep their 32 bits).
OZAKI_HD uint64_t entry_bits(double x) { return bits_of(x); }
OZAKI_HD uint64_t entry_bits(float x) {
#ifdef __CUDA_ARCH__
  return static_cast<uint32_t>(__float_as_uint(x));
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

}  // namespace ozaki
