// Scheme II's residue GEMMs with reduced results (reduced_gemm.cu): every modulus's exact INT8
// product on Hopper's warpgroup tensor cores (CUTLASS), each INT32 sum reduced mod p in the
// epilogue and written as one byte, so the products take a quarter of the INT32 path's memory and
// traffic. Built only for sm_90a with the CUTLASS headers (setup.py defines
// OZAKI_REDUCED_GEMM); reduced_gemm_available says whether this build and device run it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ozaki::cuda {

// mod p of an INT32 sum of residue products (|sum| <= k 2^14 for inner dimension k), for
// 64 < p <= 256. Where k is at most kShortSumInner (k 2^15 + p < 2^31), in four 32-bit operations:
// x = sum + offset (a multiple of p at least k 2^14) lies in [0, 2^31); with p in (2^s, 2^(s + 1)]
// and magic = ceil(2^(32 + s) / p) < 2^32, floor(x magic / 2^(32 + s)) = floor(x / p), as
// x (magic p - 2^(32 + s)) < 2^31 p <= 2^(32 + s). Otherwise (|sum| < 2^31 - 2^14) in five: x =
// sum + offset is below 2^32; with x = h 2^16 + l, t = x + h (c - 2^16) = h c + l for c = 2^16
// mod p is congruent to x and below 2^16 p <= 2^24 (no wrap-around in 32 bits), and with magic =
// ceil(2^32 / p), floor(t magic / 2^32) = floor(t / p), as t (magic p - 2^32) < 2^16 p (p - 1)
// < 2^32.
constexpr int64_t kShortSumInner = ((int64_t(1) << 31) - 256) >> 15;
// Both forms subtract q p as one multiply-add, x + q (2^32 - p) modulo 2^32 (negated), which
// the compiler would otherwise emit as a negation of q and a multiply-add.
struct ModulusDivisor {
  uint32_t modulus;
  uint32_t negated;  // 2^32 - p
  uint32_t offset;
  uint32_t fold;   // long sums: (2^16 mod p) - 2^16, modulo 2^32
  uint32_t magic;
  uint32_t shift;  // short sums: s
  bool short_sums;

  // The divisor of sums over an inner dimension of k (padded) entries.
  static ModulusDivisor of(uint32_t p, int64_t k) {
    if (k <= kShortSumInner) {
      uint32_t s = 0;
      while ((uint32_t(2) << s) < p) ++s;  // p in (2^s, 2^(s + 1)]
      const uint64_t bound = static_cast<uint64_t>(k) << 14;
      return ModulusDivisor{p, 0u - p, static_cast<uint32_t>((bound + p - 1) / p * p), 0,
                            static_cast<uint32_t>(((uint64_t(1) << (32 + s)) + p - 1) / p), s,
                            true};
    }
    const uint32_t bound = (uint32_t(1) << 31) - (uint32_t(1) << 14);
    const uint32_t fold = (uint32_t(1) << 16) % p - (uint32_t(1) << 16);
    return ModulusDivisor{p, 0u - p, (bound + p - 1) / p * p, fold,
                          static_cast<uint32_t>(((uint64_t(1) << 32) + p - 1) / p), 0, false};
  }
#ifdef __CUDACC__
  // kShort: short_sums, known to the caller at compile time
  template <bool kShort>
  __device__ __forceinline__ uint32_t reduce(int32_t sum) const {
    const uint32_t x = static_cast<uint32_t>(sum) + offset;
    if constexpr (kShort) {
      return x + (__umulhi(x, magic) >> shift) * negated;
    } else {
      const uint32_t t = x + (x >> 16) * fold;
      return t + __umulhi(t, magic) * negated;
    }
  }
#endif
};

// Up to this many moduli per launch (exact scheme II's largest set).
constexpr int kReducedMaxModuli = 40;

// The planes of one launch: plane l = e * moduli + i (element e, modulus i) multiplies a's rows
// (a + l * a_plane, rows x k_stride, K contiguous) by b's (b + l * b_plane, cols x k_stride) and
// writes (sum mod p_i) as a byte at out + l * out_plane + r * ld + c.
struct ReducedGemm {
  const int8_t* a;
  int64_t a_plane;
  const int8_t* b;
  int64_t b_plane;
  uint8_t* out;
  int64_t out_plane;
  int64_t ld;
  int64_t rows, cols, k_stride;
  int64_t planes;
  int moduli;
  ModulusDivisor divisors[kReducedMaxModuli];
};

// The plan estimate of scheme II (ozaki::crt_magnitude) on the same kernel: plane e multiplies the
// INT8 magnitude digits of element e's rows of a (a + e * a_plane, rows x k_stride) by those of
// bt's (b + e * b_plane, cols x k_stride) and lowers *smallest (set to INT32_MAX before) to the
// least exact sum over the rows r and columns c with usable_a[e * rows + r] and
// usable_b[e * cols + c]; no product is stored.
struct MagnitudeMinGemm {
  const int8_t* a;
  int64_t a_plane;
  const int8_t* b;
  int64_t b_plane;
  int64_t rows, cols, k_stride;
  int64_t planes;
  const bool* usable_a;
  const bool* usable_b;
  int32_t* smallest;
};

// Runs every plane of `gemm` on `stream` (magnitude_min_gemm.cu); fails with a message where the
// build has no reduced GEMM or CUTLASS refuses the shape.
void magnitude_min_gemms(const MagnitudeMinGemm& gemm, cudaStream_t stream);

// Whether this build has the reduced GEMM and the current device (compute capability 9.0) runs it.
bool reduced_gemm_available();

// Runs every plane of `gemm` on `stream` (one launch); fails with a message if CUTLASS refuses
// the shape.
void reduced_residue_gemms(const ReducedGemm& gemm, cudaStream_t stream);

// Products narrower than this take the narrow tiles.
constexpr int64_t kWideTileColumns = 256;
// The wide tiles' rows, and their clusters' (tiles side by side along the rows).
constexpr int64_t kWideTileRows = 128;
constexpr int64_t kWideClusterRows = 2;

// The tile configurations reduced_residue_gemms chooses from, one translation unit each
// (reduced_gemm_wide.cu, reduced_gemm_narrow.cu): 128 x 256 output tiles for products of 256
// columns or more, 128 x 64 for narrower ones (where a 256-wide tile would be mostly empty).
void reduced_gemms_wide(const ReducedGemm& gemm, cudaStream_t stream);
void reduced_gemms_narrow(const ReducedGemm& gemm, cudaStream_t stream);

}  // namespace ozaki::cuda
