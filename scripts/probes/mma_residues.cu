// Probe: scheme II's residue pass with the linear part of every residue on the tensor cores.
//
// The library's pass (residues_kernel in csrc/cuda/crt.cu; residue_parts and symmetric_residue in
// csrc/crt.h) cuts each scaled integer x into three 21-bit fields and, per modulus p, forms
// low c0 + mid c1 + high c2 + bias with three integer multiply-adds, then one remainder: about
// seven instructions per modulus.
//
// Here x + 2^63 (x's bits with the sign bit flipped) is read as eight unsigned bytes u_d, and
//   s_i = sum_d u_d w_di - b_i, w_di = 256^d W_i mod p_i (symmetric, int8), b_i = 2^63 W_i mod p_i
// is congruent to W_i x mod p_i with |s_i| < 2^18. One mma.sync m16n8k16 (s8 weights, 16 moduli x
// 16 digits of which 8 are zero, times u8 digits, 16 digits x 8 entries) gives 16 moduli's sums
// of 8 entries. Two reductions of each sum to the symmetric residue's byte:
// - float32 (the accumulator started at the bits of the float 1.5 2^23 less b_i, so each INT32 sum
//   is the float32 f = 1.5 2^23 + s_i exactly), every step exact:
//     s = f - 1.5 2^23;  q = fma(s, RN(1/p), 1.5 2^23) - 1.5 2^23  (= rint(s / p): |s/p| < 2^11,
//     so s RN(1/p) errs by under 2^-13, and for odd p, s / p lies at least 1/(2p) >= 2^-9 from a
//     half-integer);  fma(-q, p, f) = 1.5 2^23 + r with r = s - q p,
//   whose low byte is r's (for p = 256 either rounding of a tie gives it): four operations;
// - integer (the accumulator started at K p + (p - 1) / 2 - b_i, so the sum s' is in [0, 2^20)):
//   s' - umulhi(s', ceil(2^32 / p)) p - (p - 1) / 2: three operations.
// Measured on the H200 (docs/benchmarks.md, "Residues on the tensor cores"): exact, but slower than
// the library's pass; the reduction alone costs about the issue slots of a whole integer residue.
//
// Each warp takes 256 consecutive entries of a row (8 per lane, as the library's threads), writes
// their x + 2^63 to shared memory, and runs eight rounds of four MMAs: in round R, MMA j's column
// n is entry 32 R + 8 (n / 2) + 2 j + n % 2, so that after the four MMAs lane (g, t) (g = lane / 4,
// t = lane % 4) holds entries 32 R + 8 t .. + 7 of moduli g and g + 8, and stores each modulus's
// eight bytes at once, the library's layout: row r of modulus i at out[(i * rows + r) * k_stride].
//
// The probe checks every byte against a copy of the library's kernel (same crt.h functions, same
// layout), that copy on sampled entries against the host, and times them and the loads and
// stores alone.
//   nvcc -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr scripts/probes/mma_residues.cu \
//        -o /tmp/mma_residues && /tmp/mma_residues
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../../csrc/crt.h"
#include "check.cuh"
#include "random_x.cuh"
#include "timing.cuh"

using namespace ozaki;

constexpr int kGroup = 8;           // entries per lane
constexpr int kWarpEntries = 256;   // entries per warp unit
constexpr int kThreads = 256;

// ---- the library's pass, as residues_kernel does it --------------------------------------------

// Entries [l0, l0 + 8) of a row of k, 0 past k (16-byte loads where k is a multiple of 8).
__device__ __forceinline__ void load_group(const double* row, int64_t l0, int64_t k,
                                           double (&x)[kGroup]) {
  if (k % kGroup == 0 && l0 < k) {
#pragma unroll
    for (int v = 0; v < kGroup / 2; ++v) {
      const double2 loaded = __ldg(reinterpret_cast<const double2*>(row + l0) + v);
      x[2 * v] = loaded.x;
      x[2 * v + 1] = loaded.y;
    }
  } else {
#pragma unroll
    for (int c = 0; c < kGroup; ++c) x[c] = l0 + c < k ? __ldg(row + l0 + c) : 0.0;
  }
}

template <int N, bool weighted>
__global__ void library_kernel(const double* a, int64_t rows, int64_t k, int64_t k_stride,
                               const int* scale, int8_t* out) {
  const int64_t groups_per_row = k_stride / kGroup;
  for (int64_t row = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; row < rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    const RowScaler scaler = row_scaler<double>(scale[row]);
    int8_t* row_out = out + row * k_stride;
    for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups_per_row;
         g += int64_t(gridDim.x) * blockDim.x) {
      const int64_t l0 = g * kGroup;
      double x[kGroup];
      load_group(a + row * k, l0, k, x);
      __align__(8) int8_t residues[N][kGroup];
#pragma unroll
      for (int c = 0; c < kGroup; ++c) {
        const ResidueParts parts = residue_parts(scaler(x[c]));
        for_each_modulus<N>([&](auto index) {
          constexpr int i = decltype(index)::value;
          residues[i][c] = static_cast<int8_t>(
              symmetric_residue<kModuli[i], weighted ? CrtTerm<N, i>::inverse : 1>(parts));
        });
      }
#pragma unroll
      for (int i = 0; i < N; ++i) {
        *reinterpret_cast<uint2*>(row_out + i * rows * k_stride + l0) =
            *reinterpret_cast<const uint2*>(residues[i]);
      }
    }
  }
}

// ---- the tensor-core pass -----------------------------------------------------------------------

constexpr uint32_t kMagicBits = 0x4B400000u;  // the float32 1.5 2^23
constexpr float kMagic = 12582912.0f;

// The constants of modulus i (weight W: 1, or B's CRT weight) for the tensor-core pass.
struct ModulusConstants {
  uint32_t low_weights, high_weights;  // w_di for digits 0-3 and 4-7, as int8 bytes
  int32_t start;                       // the accumulator's start: kMagicBits - b_i
  float p, inverse;
  // integer reduction: start K p + (p - 1) / 2 - b_i keeps the sum s' in [0, 2^20); then
  // floor(s' / p) = umulhi(s', multiplier) (multiplier = ceil(2^32 / p)) and the symmetric residue
  // is s' - floor(s' / p) p - (p - 1) / 2
  int32_t integer_start;
  uint32_t multiplier, modulus, half;
};
constexpr int64_t symmetric_mod(int64_t v, int64_t p) {
  int64_t r = v % p;
  if (r < 0) r += p;
  return r > p / 2 ? r - p : r;
}
template <int N, bool weighted>
constexpr ModulusConstants modulus_constants(int i) {
  ModulusConstants c{};
  if (i >= N) return c;  // padding rows: weights 0, sums never stored
  const int64_t p = kModuli[i];
  const int64_t w = weighted ? partial_inverse(N, i) : 1;
  int64_t power = 1 % p;  // 256^d mod p
  for (int d = 0; d < 8; ++d) {
    const auto byte = static_cast<uint32_t>(static_cast<uint8_t>(
        static_cast<int8_t>(symmetric_mod(power * w, p))));
    if (d < 4) c.low_weights |= byte << (8 * d);
    else c.high_weights |= byte << (8 * (d - 4));
    power = power * 256 % p;
  }
  // 2^63 mod p
  int64_t two63 = 1 % p;
  for (int b = 0; b < 63; ++b) two63 = two63 * 2 % p;
  c.start = static_cast<int32_t>(kMagicBits) - static_cast<int32_t>(two63 * w % p);
  const int64_t half = (p - 1) / 2, k = ((int64_t(1) << 18) + 256 + p - 1) / p;
  c.integer_start = static_cast<int32_t>(k * p + half - two63 * w % p);
  c.multiplier = static_cast<uint32_t>(((int64_t(1) << 32) + p - 1) / p);
  c.modulus = static_cast<uint32_t>(p);
  c.half = static_cast<uint32_t>(half);
  c.p = static_cast<float>(p);
  c.inverse = 1.0f / static_cast<float>(p);
  return c;
}
template <int N, bool weighted>
__device__ __forceinline__ ModulusConstants constants_of(int i) {
  ModulusConstants out{};
  for_each_modulus<16>([&](auto index) {
    constexpr int j = decltype(index)::value;
    constexpr ModulusConstants c = modulus_constants<N, weighted>(j);
    if (j == i) out = c;
  });
  return out;
}

// d = a b + d: a 16 x 16 s8 (a0: row g, k 4t..4t+3; a1: row g + 8), b 16 x 8 u8 (b0: k 4t..4t+3,
// column g), d 16 x 8 s32 (d0, d1: row g, columns 2t, 2t + 1; d2, d3: row g + 8).
__device__ __forceinline__ void mma_weights_digits(int32_t (&d)[4], uint32_t a0, uint32_t a1,
                                                   uint32_t b0, int32_t c_low, int32_t c_high) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%7,%8,%8};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(c_low), "r"(c_high));
}

// The low byte of 1.5 2^23 + (s mod p, symmetric) from the float32 f = 1.5 2^23 + s.
__device__ __forceinline__ uint32_t reduced_bits(int32_t sum, float p, float inverse) {
  const float f = __int_as_float(sum);
  const float s = __fsub_rn(f, kMagic);
  const float q = __fsub_rn(__fmaf_rn(s, inverse, kMagic), kMagic);
  return static_cast<uint32_t>(__float_as_int(__fmaf_rn(-q, p, f)));
}

// The same byte from the integer start's sum s' (integer_start).
__device__ __forceinline__ uint32_t reduced_bits_integer(int32_t sum, const ModulusConstants& m) {
  const auto s = static_cast<uint32_t>(sum);
  return s - __umulhi(s, m.multiplier) * m.modulus - m.half;
}

// Shared word of entry e's x + 2^63 (low word; the high word follows): 4 words of padding every 16
// entries keep a round's loads free of bank conflicts.
__device__ __forceinline__ int entry_word(int e) { return 2 * e + 4 * (e >> 4); }
constexpr int kWarpWords = 2 * kWarpEntries + 4 * (kWarpEntries / 16);

template <int N, bool weighted, bool integer = false>
__global__ void __launch_bounds__(kThreads)
    mma_kernel(const double* a, int64_t rows, int64_t k, int64_t k_stride, const int* scale,
               int8_t* out) {
  static_assert(N <= 16);
  __shared__ uint32_t words[kThreads / 32][kWarpWords];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  uint32_t* my = words[warp];
  const ModulusConstants low = constants_of<N, weighted>(g);
  const ModulusConstants high = constants_of<N, weighted>(g + 8);
  const uint32_t a0 = t == 0 ? low.low_weights : (t == 1 ? low.high_weights : 0u);
  const uint32_t a1 = t == 0 ? high.low_weights : (t == 1 ? high.high_weights : 0u);
  const int64_t units_per_row = (k_stride + kWarpEntries - 1) / kWarpEntries;
  const int64_t units = rows * units_per_row;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t unit = blockIdx.x * int64_t(kThreads / 32) + warp; unit < units; unit += warps) {
    const int64_t row = unit / units_per_row;
    const int64_t u0 = (unit - row * units_per_row) * kWarpEntries;
    const RowScaler scaler = row_scaler<double>(scale[row]);
    double x[kGroup];
    load_group(a + row * k, u0 + kGroup * lane, k, x);
#pragma unroll
    for (int c = 0; c < kGroup; ++c) {
      const uint64_t biased = static_cast<uint64_t>(scaler(x[c])) ^ (uint64_t(1) << 63);
      *reinterpret_cast<uint2*>(my + entry_word(kGroup * lane + c)) =
          make_uint2(static_cast<uint32_t>(biased), static_cast<uint32_t>(biased >> 32));
    }
    __syncwarp();
    int8_t* row_out = out + row * k_stride;
#pragma unroll 2
    for (int round = 0; round < kWarpEntries / 32; ++round) {
      const int64_t l = u0 + 32 * round + 8 * t;  // this lane's eight entries
      int32_t d[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int e = 32 * round + 8 * (g >> 1) + 2 * j + (g & 1);
        const uint32_t b0 = t < 2 ? my[entry_word(e) + t] : 0u;
        if constexpr (integer) {
          mma_weights_digits(d[j], a0, a1, b0, low.integer_start, high.integer_start);
        } else {
          mma_weights_digits(d[j], a0, a1, b0, low.start, high.start);
        }
      }
      if (l >= k_stride) continue;
      // bytes of entries l .. l + 7: (j, column 2t + c) is entry l + 2 j + c
      uint32_t packed[2][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const ModulusConstants& m = h == 0 ? low : high;
        uint32_t pairs[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if constexpr (integer) {
            pairs[j] = __byte_perm(reduced_bits_integer(d[j][2 * h], m),
                                   reduced_bits_integer(d[j][2 * h + 1], m), 0x0040);
          } else {
            pairs[j] = __byte_perm(reduced_bits(d[j][2 * h], m.p, m.inverse),
                                   reduced_bits(d[j][2 * h + 1], m.p, m.inverse), 0x0040);
          }
        }
        packed[h][0] = __byte_perm(pairs[0], pairs[1], 0x5410);
        packed[h][1] = __byte_perm(pairs[2], pairs[3], 0x5410);
      }
      if (g < N) {
        *reinterpret_cast<uint2*>(row_out + g * rows * k_stride + l) =
            make_uint2(packed[0][0], packed[0][1]);
      }
      if (N > 8 && g + 8 < N) {
        *reinterpret_cast<uint2*>(row_out + (g + 8) * rows * k_stride + l) =
            make_uint2(packed[1][0], packed[1][1]);
      }
    }
    __syncwarp();
  }
}

// ---- the loads and stores alone -----------------------------------------------------------------

template <int N>
__global__ void __launch_bounds__(kThreads)
    copy_kernel(const double* a, int64_t rows, int64_t k, int64_t k_stride, int8_t* out) {
  const int64_t groups_per_row = k_stride / kGroup;
  const int64_t groups = rows * groups_per_row;
  for (int64_t gi = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; gi < groups;
       gi += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = gi / groups_per_row, l0 = (gi - row * groups_per_row) * kGroup;
    double x[kGroup];
    load_group(a + row * k, l0, k, x);
    uint2 word{0, 0};
#pragma unroll
    for (int c = 0; c < kGroup; ++c) {
      const auto bits = static_cast<uint64_t>(__double_as_longlong(x[c]));
      word.x ^= static_cast<uint32_t>(bits >> (4 * c));
      word.y ^= static_cast<uint32_t>(bits >> 32);
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
      *reinterpret_cast<uint2*>(out + (i * rows + row) * k_stride + l0) = word;
      word.x += 1;
    }
  }
}

// ---- data, checks and timing --------------------------------------------------------------------

// Entries of several binades, both signs, some zeros and a few NaN/Inf (their residues are 0).
__global__ void fill(double* a, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed ^ i);
    const double u = static_cast<double>(h >> 11) * 0x1p-53 * 2.0 - 1.0;
    double v = ldexp(u, -static_cast<int>((h >> 3) % 40));
    if (h % 53 == 0) v = 0.0;
    if (h % 100003 == 0) v = (h & 1) ? INFINITY : NAN;
    if (h % 10007 == 1) v = ldexp(u, -1050);  // subnormal
    a[i] = v;
  }
}

__global__ void count_differences(const int8_t* x, const int8_t* y, int64_t count,
                                  unsigned long long* differing) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    local += x[i] != y[i];
  }
  if (local) atomicAdd(differing, local);
}

template <int N, bool weighted>
int host_residue_of(int i, double a, int code) {
  const ResidueParts x = residue_parts(row_scaler<double>(code)(a));
  int r = 0;
  for_each_modulus<N>([&](auto index) {
    constexpr int j = decltype(index)::value;
    if (j == i) r = symmetric_residue<kModuli[j], weighted ? CrtTerm<N, j>::inverse : 1>(x);
  });
  return r;
}

int sm_count() {
  int device, count;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

template <int N, bool weighted>
void run(int64_t rows, int64_t k) {
  const int64_t k_stride = (k + 15) / 16 * 16;
  const int64_t entries = rows * k, bytes = N * rows * k_stride;
  double* a;
  int* scale;
  int8_t *mine, *library, *copied;
  unsigned long long* differing;
  CHECK(cudaMalloc(&a, entries * sizeof(double)));
  CHECK(cudaMalloc(&scale, rows * sizeof(int)));
  CHECK(cudaMalloc(&mine, bytes));
  CHECK(cudaMalloc(&library, bytes));
  CHECK(cudaMalloc(&copied, bytes));
  CHECK(cudaMalloc(&differing, sizeof(unsigned long long)));
  fill<<<1024, 256>>>(a, entries, 17 + rows + k);
  // scales (16 + f) 2^(e - 4) with e up to 61: |x| <= 2^62 for |a| < 1
  std::vector<int> codes(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int e = 61 - static_cast<int>(mix(r) % 50);
    codes[r] = 16 * e + static_cast<int>(mix(r + 7) % 16);
  }
  CHECK(cudaMemcpy(scale, codes.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(library, 0xa5, bytes));
  // the library's launch (row_launch with 256 threads, grid capped at 32 blocks per SM)
  const int64_t per_row = k_stride / kGroup;
  int bx = 1;
  while (bx < per_row && bx < kThreads) bx *= 2;
  const int by = kThreads / bx;
  const int64_t cap = std::min<int64_t>((rows * per_row + kThreads - 1) / kThreads,
                                        int64_t(sm_count()) * 32);
  const int grid_x = static_cast<int>(std::min<int64_t>((per_row + bx - 1) / bx, cap));
  const int64_t grid_y =
      std::clamp<int64_t>(cap / grid_x, 1, std::min<int64_t>((rows + by - 1) / by, 65535));
  const dim3 library_grid(grid_x, static_cast<unsigned>(grid_y)), library_block(bx, by);
  const auto launch_library = [&] {
    library_kernel<N, weighted>
        <<<library_grid, library_block>>>(a, rows, k, k_stride, scale, library);
  };
  const int64_t units = rows * ((k_stride + kWarpEntries - 1) / kWarpEntries);
  const auto mma_launch = [&](auto kernel) {
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
    const int blocks = static_cast<int>(std::min<int64_t>(
        (units + kThreads / 32 - 1) / (kThreads / 32), int64_t(sm_count()) * per_sm));
    return [=] { kernel<<<blocks, kThreads>>>(a, rows, k, k_stride, scale, mine); };
  };
  launch_library();
  CHECK(cudaGetLastError());
  // sampled entries of the library's copy against the host (the library's functions)
  std::vector<int8_t> host_out(bytes);
  std::vector<double> host_a(entries);
  CHECK(cudaMemcpy(host_out.data(), library, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(host_a.data(), a, entries * sizeof(double), cudaMemcpyDeviceToHost));
  int64_t sampled = 0, wrong = 0;
  for (int64_t s = 0; s < 20000; ++s) {
    const uint64_t h = mix(s * 31 + 5);
    const int64_t r = static_cast<int64_t>(h % rows);
    const int64_t l = static_cast<int64_t>((h >> 24) % k_stride);
    const int i = static_cast<int>((h >> 50) % N);
    const double value = l < k ? host_a[r * k + l] : 0.0;
    const int expected = host_residue_of<N, weighted>(i, value, codes[r]);
    wrong += host_out[(i * rows + r) * k_stride + l] != static_cast<int8_t>(expected);
    ++sampled;
  }
  const float library_ms = median_ms(launch_library, 11);
  const float copy_ms = median_ms(
      [&] { copy_kernel<N><<<sm_count() * 8, kThreads>>>(a, rows, k, k_stride, copied); }, 11);
  std::printf("N=%2d %s %6lld x %6lld (k_stride %6lld): host samples of the library's kernel wrong "
              "%lld of %lld | library %.3f ms, loads+stores alone %.3f ms\n",
              N, weighted ? "weighted" : "plain   ", (long long)rows, (long long)k,
              (long long)k_stride, (long long)wrong, (long long)sampled, library_ms, copy_ms);
  const auto variant = [&](const char* name, auto launch) {
    CHECK(cudaMemset(mine, 0x5a, bytes));
    launch();
    CHECK(cudaGetLastError());
    CHECK(cudaMemset(differing, 0, sizeof(unsigned long long)));
    count_differences<<<1024, 256>>>(mine, library, bytes, differing);
    unsigned long long host_differing = 0;
    CHECK(cudaMemcpy(&host_differing, differing, sizeof(host_differing), cudaMemcpyDeviceToHost));
    std::printf("    %-34s %.3f ms, bytes differing from the library's %llu of %lld\n", name,
                median_ms(launch, 11), host_differing, (long long)bytes);
  };
  variant("tensor cores, float32 reduction", mma_launch(mma_kernel<N, weighted, false>));
  variant("tensor cores, integer reduction", mma_launch(mma_kernel<N, weighted, true>));
  CHECK(cudaFree(a));
  CHECK(cudaFree(scale));
  CHECK(cudaFree(mine));
  CHECK(cudaFree(library));
  CHECK(cudaFree(copied));
  CHECK(cudaFree(differing));
}

int main() {
  run<15, false>(1000, 1000);
  run<15, false>(77, 4100);
  run<8, false>(333, 2056);
  run<16, true>(1000, 1000);
  run<15, true>(513, 300);
  run<15, false>(4096, 4096);
  run<15, false>(16384, 16384);
  run<15, true>(16384, 16384);
  run<16, false>(16384, 16384);
  run<8, false>(16384, 16384);
  run<15, false>(16384, 1024);
  return 0;
}
