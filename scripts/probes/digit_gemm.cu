// What the one design that could bring conjugate gradients to 1.5x native costs on the GPU
// (docs/limitations.md, "Conjugate gradients"): K read once per product as float64, each entry's
// scaled integer K' = trunc(K 2^e_row) cut on chip into 8 balanced base-256 digits, and the
// digits multiplied by a matrix W of INT8 columns (in the library, P's residues times the
// digits' weights 256^j mod p, for every modulus and right-hand side: 18 x 16 = 288 columns) on
// the tensor cores (mma.sync m16n8k32, then wgmma with the digits in registers), INT32 sums
// split over k and added in a fixed order. The mma.sync kernel ran on the H100 on 2026-11-28
// (docs/limitations.md); the wgmma kernel is compiled (sm_90a: four IGMMA.64x144x32 per stage,
// 218 registers, no spills) but was not yet run on a GPU, its layouts (CuTe's K-major descriptor
// without swizzle, A in mma.sync's m16 layout per warp) unchecked until its sampled sums are.
// The entries of W here are random: the probe times the kernel and checks its exact sums against
// the host's on sampled rows, with the digits taken by the plain recurrence. Against it: one read
// of K alone (its memory floor), and, from torch in the same run, native DGEMM of the same shape.
//   nvcc -O3 -std=c++17 -arch=sm_90a scripts/probes/digit_gemm.cu -o digit_gemm
//   ./digit_gemm [m k]   (default 6000 6000; built with -DRAW_WORDS, K's bits stand for the
//   digits, the sums are wrong, and the time says what cutting the digits costs)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <vector>

#include "check.cuh"
#include "random_x.cuh"
#include "timing.cuh"

namespace {

constexpr int kCols = 288;          // columns of W per block (18 moduli x 16 right-hand sides)
constexpr int kRows = 64;           // rows of K per block: 2 x 2 warps of 32 rows x 144 columns
constexpr int kWarpCols = kCols / 2;
constexpr int kColTiles = kWarpCols / 8;  // n8 tiles per warp
constexpr int kStageEntries = 8;    // entries of k per pipeline stage (64 digit columns)
constexpr int kStages = 4;
constexpr int kThreads = 128;
// Shared rows 16 bytes beyond their width: the 8 rows a ldmatrix (or a warp's K loads) reads at
// once fall in distinct banks.
constexpr int kWPitch = kStageEntries * 8 + 16;  // bytes per column of W in a stage
constexpr int kKPitch = kStageEntries * 8 + 16;  // bytes per row of K in a stage
constexpr int kWStage = kCols * kWPitch;
constexpr int kKStage = kRows * kKPitch;
constexpr int kShared = kStages * (kWStage + kKStage);

__device__ __forceinline__ void copy16(void* shared, const void* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}

// The four balanced base-256 digits of K' = trunc(x scale) that a thread's fragment holds: the
// low four (high = false) or the high four, packed as INT8 in one word. With y = K' + 0x80808080,
// digit j < 4 is byte j of y minus 128, and the rest of K' after them is y >> 32 (arithmetic).
__device__ __forceinline__ uint32_t digit_word(double x, double scale, bool high) {
#ifdef RAW_WORDS  // -DRAW_WORDS: K's own bits as the digits (wrong sums): what the cutting costs
  const uint64_t bits = __double_as_longlong(x);
  return static_cast<uint32_t>(high ? bits >> 32 : bits);
#endif
  const long long y = __double2ll_rz(x * scale) + 0x80808080LL;
  const uint32_t low = static_cast<uint32_t>(y);
  const uint32_t rest = static_cast<uint32_t>(y >> 32) + 0x80808080u;
  return (high ? rest : low) ^ 0x80808080u;
}

// Stage `stage` of a block's k range (entries k0 + 8 stage..) into slot stage % kStages of
// `shared` (slot_bytes each) by cp.async, as one commit group (empty past the last stage): W's
// 288 columns, their 16-byte chunk (c, part) at w_place(c, part) in the slot, then K's 64 rows
// from w_bytes on, kKPitch apart (rows past m: any row's, never stored).
template <class WPlace>
__device__ __forceinline__ void load_stage(int stage, int stages, uint8_t* shared, int slot_bytes,
                                           int w_bytes, WPlace w_place, const double* K,
                                           const int8_t* w, int m, int k, int r0, int k0) {
  if (stage < stages) {
    uint8_t* w_slot = shared + (stage % kStages) * slot_bytes;
    uint8_t* k_slot = w_slot + w_bytes;
    const int e0 = k0 + stage * kStageEntries;
    for (int chunk = threadIdx.x; chunk < kCols * 4; chunk += kThreads) {
      const int c = chunk / 4, part = chunk % 4;
      copy16(w_slot + w_place(c, part), w + c * (int64_t(8) * k) + int64_t(8) * e0 + part * 16);
    }
    for (int chunk = threadIdx.x; chunk < kRows * 4; chunk += kThreads) {
      const int r = chunk / 4, part = chunk % 4;
      const int row = min(r0 + r, m - 1);
      copy16(k_slot + r * kKPitch + part * 16, K + int64_t(row) * k + e0 + part * 2);
    }
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

// Block (rows r0.., split s): partial[s][r][c] = sum over its k range of the digits of K'[r][kk]
// times W[c][8 kk + d]. K row-major (m x k), w: W's columns, 8 k bytes each.
__global__ void __launch_bounds__(kThreads, 2)
    digit_gemm(const double* K, const double* scales, const int8_t* w, int m, int k,
               int entries_per_split, int32_t* partial) {
  extern __shared__ __align__(128) uint8_t shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, tig = lane % 4;
  const int warp_row = warp / 2, warp_col = warp % 2;
  const int r0 = blockIdx.x * kRows;
  const int k0 = blockIdx.y * entries_per_split;
  const int stages = entries_per_split / kStageEntries;
  // W's columns kWPitch bytes apart
  const auto load = [&](int stage) {
    load_stage(stage, stages, shared, kWStage + kKStage, kWStage,
               [](int c, int part) { return c * kWPitch + part * 16; }, K, w, m, k, r0, k0);
  };

  int32_t acc[2][kColTiles][4] = {};
  double scale[2][2];
  for (int mt = 0; mt < 2; ++mt) {
    for (int h = 0; h < 2; ++h) {
      scale[mt][h] = scales[min(r0 + warp_row * 32 + mt * 16 + group + 8 * h, m - 1)];
    }
  }
  for (int s = 0; s < kStages - 1; ++s) load(s);
  for (int stage = 0; stage < stages; ++stage) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2));
    __syncthreads();
    load(stage + kStages - 1);
    const uint8_t* w_slot = shared + (stage % kStages) * (kWStage + kKStage);
    const double* k_slot = reinterpret_cast<const double*>(w_slot + kWStage);
#pragma unroll
    for (int step = 0; step < kStageEntries / 4; ++step) {
      // A fragments: rows group (+8) of each m16 tile, digit columns 4 tig.. (entry tig / 2,
      // its low or high digits) and 16 + 4 tig.. (entry 2 + tig / 2).
      uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp_row * 32 + mt * 16 + group + 8 * h;
          const double* row = k_slot + r * (kKPitch / 8) + step * 4;
          a[mt][h] = digit_word(row[tig / 2], scale[mt][h], tig % 2);
          a[mt][2 + h] = digit_word(row[2 + tig / 2], scale[mt][h], tig % 2);
        }
      }
#pragma unroll
      for (int nt = 0; nt < kColTiles; nt += 2) {
        // b0, b1 of tiles nt and nt + 1: four 8 x 16-byte matrices, one row address per lane
        const int q = lane / 8;
        const uint8_t* at =
            w_slot + (warp_col * kWarpCols + (nt + q / 2) * 8 + lane % 8) * kWPitch +
            step * 32 + (q % 2) * 16;
        uint32_t b[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                     : "r"(static_cast<unsigned>(__cvta_generic_to_shared(at))));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int t = 0; t < 2; ++t) {
            int32_t* c = acc[mt][nt + t];
            asm volatile(
                "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                : "r"(a[mt][0]), "r"(a[mt][1]), "r"(a[mt][2]), "r"(a[mt][3]), "r"(b[2 * t]),
                  "r"(b[2 * t + 1]));
          }
        }
      }
    }
  }
  int32_t* out = partial + int64_t(blockIdx.y) * m * kCols;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + warp_row * 32 + mt * 16 + group + 8 * h;
      if (row >= m) continue;
#pragma unroll
      for (int nt = 0; nt < kColTiles; ++nt) {
        const int col = warp_col * kWarpCols + nt * 8 + 2 * tig;
        *reinterpret_cast<int2*>(out + int64_t(row) * kCols + col) =
            make_int2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
      }
    }
  }
}

// ---- the same product on wgmma (sm_90a): one warpgroup per block of 64 rows x 288 columns ----

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
#define DIGIT_WGMMA 1
#endif

// W's stage in wgmma's K-major layout without swizzle: core matrices of 8 columns x 16 bytes
// (128 contiguous bytes), the stage's four 16-byte chunks of k of a group of 8 columns side by
// side (LBO 128 bytes), the groups 512 bytes apart (SBO).
constexpr int kGroupBytes = (kStageEntries * 8 / 16) * 128;
constexpr int kWStageCore = (kCols / 8) * kGroupBytes;
constexpr int kWgmmaStage = kWStageCore + kKStage;
constexpr int kWgmmaShared = kStages * kWgmmaStage;

// The descriptor of a 32 x 144 tile of W: start (a shared address), LBO 128, SBO kGroupBytes.
__device__ __forceinline__ uint64_t w_descriptor(const uint8_t* start) {
  const uint64_t address = static_cast<uint32_t>(__cvta_generic_to_shared(start));
  return ((address >> 4) & 0x3FFF) | (uint64_t((128 >> 4) & 0x3FFF) << 16) |
         (uint64_t((kGroupBytes >> 4) & 0x3FFF) << 32);
}

// One wgmma of the warpgroup: d (64 x 144 INT32 sums, CuTe's CLayout_64x144) += a (64 x 32
// INT8 digits in registers, mma.sync's m16 A layout per warp) times the 32 x 144 INT8 tile of W
// that descriptor `b` points at (K-major, no swizzle).
__device__ __forceinline__ void wgmma_144(uint32_t (&d)[72], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %77, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n144k32.s32.s8.s8 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11,"
      "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23,"
      "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35,"
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59,"
      "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71"
      "}, {%72, %73, %74, %75}, %76, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]),
        "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

__global__ void __launch_bounds__(kThreads, 2)
    digit_gemm_wgmma(const double* K, const double* scales, const int8_t* w, int m, int k,
                     int entries_per_split, int32_t* partial) {
#ifdef DIGIT_WGMMA
  extern __shared__ __align__(128) uint8_t shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, tig = lane % 4;
  const int r0 = blockIdx.x * kRows;
  const int k0 = blockIdx.y * entries_per_split;
  const int stages = entries_per_split / kStageEntries;
  // W's columns in core matrices (w_descriptor)
  const auto load = [&](int stage) {
    load_stage(stage, stages, shared, kWgmmaStage, kWStageCore,
               [](int c, int part) { return (c / 8) * kGroupBytes + part * 128 + (c % 8) * 16; },
               K, w, m, k, r0, k0);
  };

  uint32_t acc[2][72];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int i = 0; i < 72; ++i) acc[j][i] = 0;
  }
  const double scale[2] = {scales[min(r0 + 16 * warp + group, m - 1)],
                           scales[min(r0 + 16 * warp + group + 8, m - 1)]};
  for (int s = 0; s < kStages - 1; ++s) load(s);
  for (int stage = 0; stage < stages; ++stage) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2));
    __syncthreads();
    // the copies' writes visible to wgmma's reads (the async proxy)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    load(stage + kStages - 1);
    const uint8_t* w_slot = shared + (stage % kStages) * kWgmmaStage;
    const double* k_slot = reinterpret_cast<const double*>(w_slot + kWStageCore);
    uint32_t a[kStageEntries / 4][4];
#pragma unroll
    for (int step = 0; step < kStageEntries / 4; ++step) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const double* row = k_slot + (16 * warp + group + 8 * h) * (kKPitch / 8) + step * 4;
        a[step][h] = digit_word(row[tig / 2], scale[h], tig % 2);
        a[step][2 + h] = digit_word(row[2 + tig / 2], scale[h], tig % 2);
      }
    }
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int step = 0; step < kStageEntries / 4; ++step) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wgmma_144(acc[j], a[step], w_descriptor(w_slot + (j * 18) * kGroupBytes + step * 256));
      }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    // the sums stay in their registers across the asynchronous products (no copies meanwhile)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int i = 0; i < 72; ++i) asm volatile("" : "+r"(acc[j][i])::"memory");
    }
  }
  int32_t* out = partial + int64_t(blockIdx.y) * m * kCols;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = r0 + 16 * warp + group + 8 * h;
    if (row >= m) continue;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int nt = 0; nt < 18; ++nt) {
        const int col = j * 144 + nt * 8 + 2 * tig;
        *reinterpret_cast<int2*>(out + int64_t(row) * kCols + col) =
            make_int2(static_cast<int32_t>(acc[j][4 * nt + 2 * h]),
                      static_cast<int32_t>(acc[j][4 * nt + 2 * h + 1]));
      }
    }
  }
#endif
}

// The splits' partial sums added in split order (integers: any order gives the same sums).
__global__ void add_splits(const int32_t* partial, int splits, int64_t count, int32_t* out) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count;
       t += int64_t(gridDim.x) * blockDim.x) {
    int32_t sum = 0;
    for (int s = 0; s < splits; ++s) sum += partial[s * count + t];
    out[t] = sum;
  }
}

// One read of K: its memory floor (the sum keeps the loads).
__global__ void read_once(const double2* K, int64_t count, double* out) {
  double sum = 0.0;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count;
       t += int64_t(gridDim.x) * blockDim.x) {
    const double2 v = __ldg(K + t);
    sum += v.x + v.y;
  }
  if (sum == 1.2345) *out = sum;
}

}  // namespace

int main(int argc, char** argv) {
  const int m = argc > 2 ? std::atoi(argv[1]) : 6000;
  const int k = argc > 2 ? std::atoi(argv[2]) : 6000;
  if (k % kStageEntries != 0) {
    std::printf("k must be a multiple of %d\n", kStageEntries);
    return 1;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, m = %d, k = %d, %d columns of W, 8 digits per entry\n", prop.name, m, k,
              kCols);
  // K: random significands times 2^(-3..3), with rows of their own scales; e_row so that
  // |K'| < 2^62 (8 balanced digits hold below 2^63 - 2^55).
  std::vector<double> K(int64_t(m) * k), scales(m);
  for (int64_t t = 0; t < int64_t(m) * k; ++t) {
    const uint64_t h = mix(t);
    K[t] = (static_cast<double>(h >> 11) * 0x1p-53 - 0.5) * std::ldexp(1.0, int(h % 7) - 3);
  }
  for (int r = 0; r < m; ++r) {
    double largest = 0.0;
    for (int c = 0; c < k; ++c) largest = std::max(largest, std::fabs(K[int64_t(r) * k + c]));
    scales[r] = std::ldexp(1.0, 61 - std::ilogb(largest));
  }
  std::vector<int8_t> w(int64_t(kCols) * 8 * k);
  for (int64_t t = 0; t < int64_t(w.size()); ++t) w[t] = static_cast<int8_t>(mix(~t) % 255) - 127;

  double *K_d, *scales_d, *sink;
  int8_t* w_d;
  int32_t *partial, *sums;
  constexpr int kMaxSplits = 6;
  CHECK(cudaMalloc(&K_d, K.size() * sizeof(double)));
  CHECK(cudaMalloc(&scales_d, m * sizeof(double)));
  CHECK(cudaMalloc(&w_d, w.size()));
  CHECK(cudaMalloc(&partial, int64_t(kMaxSplits) * m * kCols * sizeof(int32_t)));
  CHECK(cudaMalloc(&sums, int64_t(m) * kCols * sizeof(int32_t)));
  CHECK(cudaMalloc(&sink, sizeof(double)));
  CHECK(cudaMemcpy(K_d, K.data(), K.size() * sizeof(double), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(scales_d, scales.data(), m * sizeof(double), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w_d, w.data(), w.size(), cudaMemcpyHostToDevice));
  CHECK(cudaFuncSetAttribute(digit_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, digit_gemm, kThreads, kShared));
  std::printf("# %d blocks of %d threads per SM, %d bytes of shared memory each, %d SMs\n",
              per_sm, kThreads, kShared, prop.multiProcessorCount);

  // The host's sums on sampled rows, the digits by the recurrence d = low byte (signed),
  // x = (x - d) / 256.
  const int sampled[] = {0, 1, 31, 63, 64, m / 2, m - 1};
  std::vector<int64_t> reference(std::size(sampled) * kCols, 0);
  for (size_t i = 0; i < std::size(sampled); ++i) {
    const int r = sampled[i];
    for (int kk = 0; kk < k; ++kk) {
      long long x = static_cast<long long>(K[int64_t(r) * k + kk] * scales[r]);
      for (int d = 0; d < 8; ++d) {
        const int digit = static_cast<int8_t>(x & 255);
        x = (x - digit) / 256;
        for (int c = 0; c < kCols; ++c) {
          reference[i * kCols + c] += digit * w[int64_t(c) * 8 * k + 8 * kk + d];
        }
      }
      if (x != 0) std::printf("entry (%d, %d): 8 digits do not hold it\n", r, kk);
    }
  }

  const int64_t read_count = int64_t(m) * k / 2;
  const float floor_ms = median_ms(
      [&] {
        read_once<<<prop.multiProcessorCount * 8, 256>>>(reinterpret_cast<const double2*>(K_d),
                                                         read_count, sink);
      },
      21);
  std::printf("one read of K (%.0f MB): %.4f ms (%.0f GB/s)\n", K.size() * 8e-6, floor_ms,
              K.size() * 8e-6 / floor_ms);
  const double ops = 2.0 * m * 8.0 * k * kCols;
  CHECK(cudaFuncSetAttribute(digit_gemm_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kWgmmaShared));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, digit_gemm_wgmma, kThreads,
                                                      kWgmmaShared));
  std::printf("# wgmma: %d blocks of %d threads per SM, %d bytes of shared memory each\n", per_sm,
              kThreads, kWgmmaShared);
  for (const bool wgmma : {false, true}) {
    for (int splits = 1; splits <= kMaxSplits; ++splits) {
      const int entries = k / kStageEntries;
      if (entries % splits != 0) continue;
      const int per_split = entries / splits * kStageEntries;
      const dim3 grid((m + kRows - 1) / kRows, splits);
      CHECK(cudaMemset(sums, 0, int64_t(m) * kCols * sizeof(int32_t)));
      const auto launch = [&] {
        if (wgmma) {
          digit_gemm_wgmma<<<grid, kThreads, kWgmmaShared>>>(K_d, scales_d, w_d, m, k, per_split,
                                                             partial);
        } else {
          digit_gemm<<<grid, kThreads, kShared>>>(K_d, scales_d, w_d, m, k, per_split, partial);
        }
        add_splits<<<prop.multiProcessorCount * 4, 256>>>(partial, splits, int64_t(m) * kCols,
                                                          sums);
      };
      const float ms = median_ms(launch, 21);
      CHECK(cudaGetLastError());
      std::vector<int32_t> got(int64_t(m) * kCols);
      CHECK(cudaMemcpy(got.data(), sums, got.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
      int64_t wrong = 0;
      for (size_t i = 0; i < std::size(sampled); ++i) {
        for (int c = 0; c < kCols; ++c) {
          wrong += got[int64_t(sampled[i]) * kCols + c] != reference[i * kCols + c];
        }
      }
      std::printf("digit GEMM on %s, %d split(s) of k (%u blocks): %.4f ms (%.0f TOPS), sampled "
                  "sums %s (%lld of %zu differ)\n",
                  wgmma ? "wgmma" : "mma.sync", splits, grid.x * grid.y, ms, ops / ms * 1e-9,
                  wrong == 0 ? "exact" : "WRONG", static_cast<long long>(wrong),
                  std::size(sampled) * kCols);
    }
  }
  return 0;
}
