// Random data the scheme-II probes share: a 64-bit hash, and random exact integers X (the
// reconstruction's inputs) with their residues.
#pragma once

#include <cstdint>

// splitmix64's finaliser: a well-mixed 64-bit value per input.
__host__ __device__ inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// X = (-1)^negative (high 2^64 + low).
struct RandomX {
  uint64_t high, low;
  bool negative;
};

// Entry t's X: |X| < 2^bits, bits random up to max_bits and often max_bits itself, some zeros
// (near_top: bits within 8 of max_bits for every entry); returns the hash that chose them too.
__device__ inline RandomX random_x(uint64_t seed, int64_t t, int max_bits, bool near_top = false) {
  const uint64_t h0 = mix(seed ^ (t * 3)), h1 = mix(seed ^ (t * 3 + 1));
  const uint64_t h2 = mix(seed ^ (t * 3 + 2));
  int bits = static_cast<int>(h2 % (max_bits + 1));
  if (h2 % 97 == 0) bits = 0;
  if (h2 % 5 == 0) bits = max_bits;  // many near the top
  if (near_top) bits = max_bits - static_cast<int>(h2 % 9);
  uint64_t low = h0, high = h1;
  if (bits <= 64) {
    high = 0;
    low = bits == 64 ? low : (bits == 0 ? 0 : low & ((uint64_t(1) << bits) - 1));
  } else {
    high &= (uint64_t(1) << (bits - 64)) - 1;
  }
  return {high, low, ((h2 >> 40) & 1) != 0};
}

// X mod p in [0, p), from high 2^64 + low (2^64 mod p = ((2^32 mod p)^2) mod p).
__device__ inline int64_t residue_of_x(const RandomX& x, int64_t p) {
  const int64_t two32 = (int64_t(1) << 32) % p;
  const int64_t two64 = two32 * two32 % p;
  const int64_t high = static_cast<int64_t>(x.high % p), low = static_cast<int64_t>(x.low % p);
  const int64_t r = (high * two64 + low) % p;
  return x.negative ? (p - r) % p : r;
}
