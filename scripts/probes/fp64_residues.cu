// Scheme II's residue pass (csrc/cuda/crt.cu, residues_kernel) with some of its odd moduli taken
// on the FP64 pipe, which the library's pass leaves idle while its integer multiply-adds fill the
// FMA-heavy pipe (docs/benchmarks.md, "What bounds the passes at 2048³"). Per entry, the scaled
// integer x = high 2^42 + mid 2^21 + low (csrc/crt.h, residue_parts) becomes three float64 values
// once (by their bits, without a conversion instruction); per FP64 modulus p,
//   s = low C0 + mid C1 + high C2    (C0 = W, C1 = 2^21 W, C2 = 2^42 W mod p: two or three
//                                      FMAs, exact, |s| < 2^31)
//   q = rint(s / p)                   (an FMA of s by RN(1/p) onto 1.5 2^52: exact, as s / p is
//                                      never within 2^-9 of a half-integer and the product errs by
//                                      under 2^-30)
//   r = s - q p                       (an FMA, exact: the symmetric residue, |r| <= (p - 1) / 2)
// and r's byte is read from the bits of r + 1.5 2^52. The library's integer path takes the other
// moduli. Each variant's bytes are compared with the library's (residues_of, the same header), and
// each is timed against the memory floor of its loads and stores.
//   nvcc -O3 -std=c++20 -fmad=false --ftz=false -arch=sm_90 --expt-relaxed-constexpr \
//        scripts/probes/fp64_residues.cu -o /tmp/fp64_residues && /tmp/fp64_residues [rows k]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../csrc/crt.h"
#include "check.cuh"
#include "random_x.cuh"

using namespace ozaki;

constexpr int kModuliCount = 15;
constexpr int kGroup = 8;  // entries per thread, as the library's kResidueGroup
constexpr int kThreads = 256;
// Blocks per multiprocessor the residue kernels' launch bound asks for (-DBLOCKS_PER_SM=2: up to
// 128 registers; 3: 80, the library's A residues use 72).
#ifndef BLOCKS_PER_SM
#define BLOCKS_PER_SM 3
#endif
constexpr int kBlocksPerSm = BLOCKS_PER_SM;

// Entries a in (-1, 1) with random 53-bit significands and exponents down to 2^-20 (some zeros);
// each row's scale code c = (16 + f) 2^(e - 4) < 2^(e + 1) makes its integers below 2^53, and
// below 2^62 in rows 0 mod 7 (the library's whole range).
__global__ void make_entries(double* a, int64_t count, uint64_t seed) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count;
       t += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed ^ uint64_t(t));
    const double unit = static_cast<double>(h >> 11) * 0x1p-53;
    const int shift = static_cast<int>((h >> 3) % 21);
    a[t] = (h & 7) == 0 ? 0.0 : ((h & 8) ? -1.0 : 1.0) * unit * pow2(-shift);
  }
}
int row_code(int64_t row) {
  const int bits = row % 7 == 0 ? 62 : 53;  // |a c| < c < 2^bits
  return 16 * (bits - 1) + static_cast<int>(row % 16);
}

// fp64_parts and fp64_symmetric_residue: csrc/crt.h (the library's column pass uses them).

// Residues of 8 consecutive entries of a row per thread, every modulus's 8 bytes stored with one
// 8-byte store (the library's layout: plane i at out + i * rows * k). Fp64 < 0: the library's
// loop (residues_of, entry by entry: every modulus of an entry, then the next entry). Else
// modulus by modulus over the 8 entries' parts (so that one modulus's constants are live at a
// time): moduli 1 .. Fp64 (odd) on the FP64 pipe, from the parts as float64 values, the others by
// the library's integer path (symmetric_residue).
template <int Fp64, bool weighted>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    residues_kernel(const double* a, int64_t rows, int64_t k, const int* codes, int8_t* out) {
  const int64_t groups = rows * k / kGroup;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t first = g * kGroup, row = first / k;
    const RowScaler scale = row_scaler<double>(codes[row]);
    double x[kGroup];
    const double2* pairs = reinterpret_cast<const double2*>(a + first);
#pragma unroll
    for (int c = 0; c < kGroup / 2; ++c) {
      const double2 v = pairs[c];
      x[2 * c] = v.x;
      x[2 * c + 1] = v.y;
    }
    const auto store = [&](int i, const int8_t (&bytes)[kGroup]) {
      *reinterpret_cast<uint2*>(out + i * rows * k + first) =
          *reinterpret_cast<const uint2*>(bytes);
    };
    if constexpr (Fp64 < 0) {
      __align__(8) int8_t residues[kModuliCount][kGroup];
#pragma unroll
      for (int c = 0; c < kGroup; ++c) {
        residues_of<kModuliCount, weighted>(x[c], scale, [&](int i, int residue) {
          residues[i][c] = static_cast<int8_t>(residue);
        });
      }
#pragma unroll
      for (int i = 0; i < kModuliCount; ++i) store(i, residues[i]);
    } else {
      ResidueParts parts[kGroup];
#pragma unroll
      for (int c = 0; c < kGroup; ++c) parts[c] = residue_parts(scale(x[c]));
      for_each_modulus<kModuliCount>([&](auto index) {
        constexpr int i = decltype(index)::value;
        if constexpr (i == 0 || i > Fp64) {
          constexpr int w = weighted ? CrtTerm<kModuliCount, i>::inverse : 1;
          __align__(8) int8_t bytes[kGroup];
#pragma unroll
          for (int c = 0; c < kGroup; ++c) {
            bytes[c] = static_cast<int8_t>(symmetric_residue<kModuli[i], w>(parts[c]));
          }
          store(i, bytes);
        }
      });
      Fp64Parts values[kGroup];
#pragma unroll
      for (int c = 0; c < kGroup; ++c) values[c] = fp64_parts(parts[c]);
      for_each_modulus<kModuliCount>([&](auto index) {
        constexpr int i = decltype(index)::value;
        if constexpr (i >= 1 && i <= Fp64) {
          constexpr int w = weighted ? CrtTerm<kModuliCount, i>::inverse : 1;
          __align__(8) int8_t bytes[kGroup];
#pragma unroll
          for (int c = 0; c < kGroup; ++c) {
            bytes[c] = static_cast<int8_t>(
                fp64_symmetric_residue<kModuli[i], w>(values[c]));
          }
          store(i, bytes);
        }
      });
    }
  }
}

// The same loads and stores, with a residue that keeps them (the memory floor of the pass).
__global__ void __launch_bounds__(kThreads)
    loads_only_kernel(const double* a, int64_t rows, int64_t k, int8_t* out) {
  const int64_t groups = rows * k / kGroup;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t first = g * kGroup;
    const double2* pairs = reinterpret_cast<const double2*>(a + first);
    uint32_t bits = 0;
#pragma unroll
    for (int c = 0; c < kGroup / 2; ++c) {
      const double2 v = pairs[c];
      bits ^= __double2loint(v.x) ^ __double2hiint(v.y);
    }
#pragma unroll
    for (int i = 0; i < kModuliCount; ++i) {
      *reinterpret_cast<uint2*>(out + i * rows * k + first) = make_uint2(bits + i, bits);
    }
  }
}

template <typename Launch>
float median_ms(Launch launch, int repeats) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  launch();  // warm-up
  for (int r = 0; r < repeats; ++r) {
    CHECK(cudaEventRecord(start));
    launch();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK(cudaGetLastError());
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int main(int argc, char** argv) {
  const int64_t rows = argc > 2 ? std::atoll(argv[1]) : 4096;
  const int64_t k = argc > 2 ? std::atoll(argv[2]) : 4096;
  if (k % kGroup != 0) {
    std::printf("k must be a multiple of %d, got %lld\n", kGroup, static_cast<long long>(k));
    return 1;
  }
  const int64_t count = rows * k;
  double* a;
  int* codes;
  int8_t *expected, *got;
  CHECK(cudaMalloc(&a, count * sizeof(double)));
  CHECK(cudaMalloc(&codes, rows * sizeof(int)));
  CHECK(cudaMalloc(&expected, count * kModuliCount));
  CHECK(cudaMalloc(&got, count * kModuliCount));
  make_entries<<<1024, 256>>>(a, count, 12345);
  std::vector<int> host_codes(rows);
  for (int64_t r = 0; r < rows; ++r) host_codes[r] = row_code(r);
  CHECK(cudaMemcpy(codes, host_codes.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int blocks = sms * 8;
  std::vector<int8_t> host_expected(count * kModuliCount), host_got(count * kModuliCount);
  const double floor_bytes = double(count) * (sizeof(double) + kModuliCount);
  std::printf("# %lld x %lld entries, %d moduli; memory floor: %.0f MB\n",
              static_cast<long long>(rows), static_cast<long long>(k), kModuliCount,
              floor_bytes / 1e6);
  const float floor_ms =
      median_ms([&] { loads_only_kernel<<<blocks, kThreads>>>(a, rows, k, got); }, 20);
  std::printf("loads and stores alone     %8.1f us  %6.0f GB/s\n", floor_ms * 1e3,
              floor_bytes / floor_ms / 1e6);
  for (const bool weighted : {false, true}) {
    const auto run = [&](auto fp64, int8_t* out) {
      constexpr int kFp64 = decltype(fp64)::value;
      if (weighted) {
        residues_kernel<kFp64, true><<<blocks, kThreads>>>(a, rows, k, codes, out);
      } else {
        residues_kernel<kFp64, false><<<blocks, kThreads>>>(a, rows, k, codes, out);
      }
    };
    run(std::integral_constant<int, -1>{}, expected);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(host_expected.data(), expected, count * kModuliCount, cudaMemcpyDeviceToHost));
    const auto measure = [&](auto fp64) {
      constexpr int kFp64 = decltype(fp64)::value;
      CHECK(cudaMemset(got, 0x5a, count * kModuliCount));
      const float ms = median_ms([&] { run(fp64, got); }, 20);
      CHECK(cudaMemcpy(host_got.data(), got, count * kModuliCount, cudaMemcpyDeviceToHost));
      int64_t differ = 0;
      for (int64_t t = 0; t < count * kModuliCount; ++t) differ += host_got[t] != host_expected[t];
      std::printf("%s, %-22s %8.1f us  %6.0f GB/s  bytes differing from the library's: %lld\n",
                  weighted ? "weighted  " : "unweighted",
                  kFp64 < 0 ? "the library's loop" :
                  (std::to_string(kFp64) + " moduli on FP64").c_str(),
                  ms * 1e3, floor_bytes / ms / 1e6, static_cast<long long>(differ));
    };
    measure(std::integral_constant<int, -1>{});
    measure(std::integral_constant<int, 0>{});
    measure(std::integral_constant<int, 3>{});
    measure(std::integral_constant<int, 5>{});
    measure(std::integral_constant<int, 7>{});
    measure(std::integral_constant<int, 10>{});
    measure(std::integral_constant<int, 14>{});
  }
  return 0;
}
