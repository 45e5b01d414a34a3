// Probe: A's residues made inside the residue-product kernel from A's float64 entries, for skinny
// products (docs/limitations.md, "Skinny products"): what that costs on the GPU against the two
// passes of the library (A's residues written by the residue pass, read again by the reduced GEMM)
// and against the memory floor of one read of A; and the residue arithmetic alone at full
// occupancy (residues_only_kernel), the bar for producer warps that would make them once.
//
// A warp owns 16 rows of A, 16 columns of B and all N = 15 moduli. Per 32 entries of k it loads its
// 16 entries of A, and per 16 of them scales each entry to an integer and cuts it once
// (scaled_integer, residue_parts: csrc/crt.h), makes each modulus's INT8 residues in registers
// (symmetric_residue) and multiplies them with B's weighted residues (mma.sync m16n8k16, INT32
// sums, exact as in the library's GEMMs); at the end each sum becomes u_i in [0, p_i)
// (unsigned_residue), one byte per entry and modulus, the reduced GEMM's output. Warps of a block
// take the four 16-column quarters of 64 columns (each makes the residues of the same rows again)
// or, for 16 columns, four row tiles; k may be split over blocks (grid y), each split writing its
// own bytes (a reduction mod p would add them). The host checks sampled entries: the sum over k
// of the host's residues (the same crt.h functions) times B's, mod p, summed over the splits.
//   nvcc -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr scripts/probes/skinny_residues.cu \
//        -o /tmp/skinny_residues && /tmp/skinny_residues [--sixteen]
// (-DPROBE_MODULI=5 or 10: fewer moduli, to see how the time scales with them)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../csrc/crt.h"
#include "check.cuh"
#include "random_x.cuh"

using namespace ozaki;

#ifndef PROBE_MODULI
#define PROBE_MODULI 15
#endif
constexpr int kN = PROBE_MODULI;  // moduli (-DPROBE_MODULI=N: fewer, to see how the time scales)
constexpr int kWarps = 4;    // per block
constexpr int kTileRows = 16, kTileCols = 16, kStep = 32;

// One 32-bit register of four INT8 residues of modulus I, from four entries' parts.
template <int I>
__device__ __forceinline__ uint32_t packed_residues(const ResidueParts (&x)[8], int first) {
  uint32_t word = 0;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int r = symmetric_residue<kModuli[I], 1>(x[first + b]);
    word |= (static_cast<uint32_t>(r) & 0xffu) << (8 * b);
  }
  return word;
}

// d += a b for a 16 x 16 INT8 fragment a (a0: row g, k 4q..4q+3; a1: row g + 8) and a 16 x 8
// fragment b (b0: k 4q..4q+3, column g), INT32 sums (c0, c1: row g, columns 2q, 2q + 1; c2, c3:
// row g + 8).
__device__ __forceinline__ void mma_s8(int32_t (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

// a: m x k float64 row-major; codes: the rows' scale codes; b: N planes of n rows of k_stride
// bytes (B's columns, weighted residues); out: splits x N planes of m x n bytes.
// Quarters: warps of a block take column quarters of the same 16 rows (n = 64), else row tiles.
template <bool kQuarters>
__global__ void __launch_bounds__(kWarps * 32)
    skinny_kernel(const double* __restrict__ a, const int* __restrict__ codes,
                  const int8_t* __restrict__ b, int64_t m, int64_t k, int64_t n, int64_t k_stride,
                  int64_t k_split, uint8_t* __restrict__ out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, quad = lane % 4;
  const int64_t row0 = (int64_t(blockIdx.x) * (kQuarters ? 1 : kWarps) + (kQuarters ? 0 : warp)) *
                       kTileRows;
  const int64_t col0 = kQuarters ? warp * kTileCols : 0;
  const int64_t split = blockIdx.y;
  const int64_t k_begin = split * k_split, k_end = k_begin + k_split < k ? k_begin + k_split : k;
  if (row0 >= m) return;
  const int64_t rows[2] = {row0 + group, row0 + group + 8};
  RowScaler scale[2];
  const double* row_data[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = rows[h] < m ? rows[h] : m - 1;
    scale[h] = row_scaler<double>(codes[r]);
    row_data[h] = a + r * k;
  }
  int32_t sums[kN][2][4] = {};
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kStep) {
    // v[8 half + 4 h + c]: row h (g or g + 8), k k0 + 16 half + 4 quad + c
    double v[16];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t l = k0 + 16 * half + 4 * quad;
        const double2 p0 = *reinterpret_cast<const double2*>(row_data[h] + l);
        const double2 p1 = *reinterpret_cast<const double2*>(row_data[h] + l + 2);
        double* e = v + 8 * half + 4 * h;
        e[0] = p0.x; e[1] = p0.y; e[2] = p1.x; e[3] = p1.y;
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // entries 4 h + c of this half: row h (g or g + 8), k k0 + 16 half + 4 quad + c
      ResidueParts x[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = residue_parts(scale[e / 4](v[8 * half + e]));
      for_each_modulus<kN>([&](auto index) {
        constexpr int i = decltype(index)::value;
        const uint32_t a0 = packed_residues<i>(x, 0), a1 = packed_residues<i>(x, 4);
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          // B's column col0 + 8 t + group, bytes k0 + 16 half + 4 quad .. + 3
          const int8_t* column = b + (int64_t(i) * n + col0 + 8 * t + group) * k_stride + k0 +
                                 16 * half + 4 * quad;
          mma_s8(sums[i][t], a0, a1, __ldg(reinterpret_cast<const unsigned*>(column)));
        }
      });
    }
  }
  // c0, c1: row g, columns 2 quad, 2 quad + 1 of the tile; c2, c3: row g + 8
  for_each_modulus<kN>([&](auto index) {
    constexpr int i = decltype(index)::value;
#pragma unroll
    for (int t = 0; t < 2; ++t) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t r = rows[c / 2], j = col0 + 8 * t + 2 * quad + c % 2;
        if (r < m) {
          out[((split * kN + i) * m + r) * n + j] =
              static_cast<uint8_t>(unsigned_residue<i>(sums[i][t][c]));
        }
      }
    }
  });
}

// The residue arithmetic alone at full occupancy: every entry of A scaled, cut and reduced for
// all N moduli as the kernel above does, the residues folded into one word per thread (so that
// none is dropped) instead of multiplied: what a set of producer warps making each entry's
// residues once would cost.
__global__ void residues_only_kernel(const double2* __restrict__ a, const int* __restrict__ codes,
                                     int64_t m, int64_t k, uint32_t* __restrict__ sink) {
  uint32_t folded = 0;
  for (int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    const RowScaler scale = row_scaler<double>(codes[row]);
    for (int64_t l = threadIdx.x; l < k / 2; l += blockDim.x) {
      const double2 v = a[row * (k / 2) + l];
      const ResidueParts x[2] = {residue_parts(scale(v.x)), residue_parts(scale(v.y))};
      for_each_modulus<kN>([&](auto index) {
        constexpr int i = decltype(index)::value;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          folded = (folded << 3 | folded >> 29) ^
                   static_cast<uint32_t>(symmetric_residue<kModuli[i], 1>(x[e]));
        }
      });
    }
  }
  sink[blockIdx.x * int64_t(blockDim.x) + threadIdx.x] = folded;
}

// One read of A, summed (the memory floor of the kernel above).
__global__ void read_kernel(const double2* a, int64_t count, double* sink) {
  double s = 0;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count;
       t += int64_t(gridDim.x) * blockDim.x) {
    const double2 v = a[t];
    s += v.x + v.y;
  }
  if (s == 1.2345) *sink = s;
}

__global__ void fill_a(double* a, int64_t count, uint64_t seed) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count;
       t += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed ^ t);
    // (-1, 1) with a few binades of spread and some zeros
    const double u = static_cast<double>(h >> 11) * 0x1p-53 * 2.0 - 1.0;
    a[t] = (h % 61 == 0) ? 0.0 : ldexp(u, -static_cast<int>((h >> 4) % 6));
  }
}

int symmetric_random(uint64_t h, int p) {
  if (p == 256) return static_cast<int>(h % 256) - 128;
  return static_cast<int>(h % p) - (p - 1) / 2;
}

// The host's residue of entry a scaled by code, modulus index i (crt.h, as the kernel).
template <int I>
int host_residue(double a, int code) {
  return symmetric_residue<kModuli[I], 1>(residue_parts(row_scaler<double>(code)(a)));
}
int host_residue_of(int i, double a, int code) {
  int r = 0;
  for_each_modulus<kN>([&](auto index) {
    constexpr int j = decltype(index)::value;
    if (j == i) r = host_residue<j>(a, code);
  });
  return r;
}

void run(int64_t m, int64_t k, int64_t n, int splits) {
  const int64_t k_stride = (k + 15) / 16 * 16;
  const int64_t k_split = ((k + splits - 1) / splits + kStep - 1) / kStep * kStep;
  if (k % kStep != 0 || (n != 16 && n != 64)) {
    std::printf("skip %lld %lld %lld: k a multiple of 32, n 16 or 64\n", (long long)m,
                (long long)k, (long long)n);
    return;
  }
  double* a;
  int* codes;
  int8_t* b;
  uint8_t* out;
  double* sink;
  CHECK(cudaMalloc(&a, m * k * sizeof(double)));
  CHECK(cudaMalloc(&codes, m * sizeof(int)));
  CHECK(cudaMalloc(&b, kN * n * k_stride));
  CHECK(cudaMalloc(&out, int64_t(splits) * kN * m * n));
  CHECK(cudaMalloc(&sink, sizeof(double)));
  fill_a<<<1024, 256>>>(a, m * k, 7);
  std::vector<int> host_codes(m);
  for (int64_t r = 0; r < m; ++r) host_codes[r] = 16 * 44 + static_cast<int>(r % 16);  // |x| < 2^45
  CHECK(cudaMemcpy(codes, host_codes.data(), m * sizeof(int), cudaMemcpyHostToDevice));
  std::vector<int8_t> host_b(kN * n * k_stride, 0);
  for (int i = 0; i < kN; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t l = 0; l < k; ++l) {
        host_b[(i * n + j) * k_stride + l] =
            static_cast<int8_t>(symmetric_random(mix(99 + (i * n + j) * k + l), kModuli[i]));
      }
    }
  }
  CHECK(cudaMemcpy(b, host_b.data(), host_b.size(), cudaMemcpyHostToDevice));
  const bool quarters = n == 64;
  const dim3 grid(static_cast<unsigned>(quarters ? (m + kTileRows - 1) / kTileRows
                                                 : (m + kWarps * kTileRows - 1) / (kWarps * kTileRows)),
                  static_cast<unsigned>(splits));
  const auto launch = [&] {
    if (quarters) {
      skinny_kernel<true><<<grid, kWarps * 32>>>(a, codes, b, m, k, n, k_stride, k_split, out);
    } else {
      skinny_kernel<false><<<grid, kWarps * 32>>>(a, codes, b, m, k, n, k_stride, k_split, out);
    }
  };
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  const auto timed = [&](auto f) {
    f();
    CHECK(cudaDeviceSynchronize());
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
      CHECK(cudaEventRecord(start));
      f();
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      best = ms < best ? ms : best;
    }
    CHECK(cudaGetLastError());
    return best;
  };
  const float product_ms = timed(launch);
  const float read_ms = timed([&] {
    read_kernel<<<132 * 8, 256>>>(reinterpret_cast<const double2*>(a), m * k / 2, sink);
  });
  uint32_t* folded;
  CHECK(cudaMalloc(&folded, 132 * 8 * 256 * sizeof(uint32_t)));
  const float residues_ms = timed([&] {
    residues_only_kernel<<<132 * 8, 256>>>(reinterpret_cast<const double2*>(a), codes, m, k,
                                           folded);
  });
  CHECK(cudaFree(folded));
  // sampled entries against the host
  std::vector<uint8_t> host_out(int64_t(splits) * kN * m * n);
  CHECK(cudaMemcpy(host_out.data(), out, host_out.size(), cudaMemcpyDeviceToHost));
  std::vector<double> row(k);
  int checked = 0, wrong = 0;
  for (int s = 0; s < 24; ++s) {
    const int64_t r = static_cast<int64_t>(mix(1000 + s) % m);
    const int64_t j = static_cast<int64_t>(mix(2000 + s) % n);
    const int i = static_cast<int>(mix(3000 + s) % kN);
    CHECK(cudaMemcpy(row.data(), a + r * k, k * sizeof(double), cudaMemcpyDeviceToHost));
    int64_t sum = 0;
    for (int64_t l = 0; l < k; ++l) {
      sum += int64_t(host_residue_of(i, row[l], host_codes[r])) * host_b[(i * n + j) * k_stride + l];
    }
    const int64_t p = kModuli[i];
    const int64_t expected = ((sum % p) + p) % p;
    int64_t got = 0;
    for (int t = 0; t < splits; ++t) got += host_out[((int64_t(t) * kN + i) * m + r) * n + j];
    got %= p;
    ++checked;
    if (got != expected) ++wrong;
  }
  const double bytes = double(m) * k * 8;
  std::printf("%6lld x %6lld x %3lld, %d splits, %d moduli: product %.3f ms, one read of A %.3f ms "
              "(%.2f TB/s), A's residues alone %.3f ms; sampled sums mod p: %d of %d differ\n",
              (long long)m, (long long)k, (long long)n, splits, kN, product_ms, read_ms,
              bytes / read_ms / 1e9, residues_ms, wrong, checked);
  CHECK(cudaFree(a));
  CHECK(cudaFree(codes));
  CHECK(cudaFree(b));
  CHECK(cudaFree(out));
  CHECK(cudaFree(sink));
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--sixteen") {  // the 16-column shapes alone
    run(16384, 16384, 16, 1);
    run(6016, 6016, 16, 8);
    return 0;
  }
  run(16384, 16384, 64, 1);
  run(16384, 16384, 16, 1);
  run(6016, 6016, 16, 8);
  run(6016, 6016, 16, 1);
  return 0;
}
