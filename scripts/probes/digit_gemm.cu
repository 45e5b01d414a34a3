// What the one design that could bring conjugate gradients to 1.5x native costs on the GPU
// (docs/limitations.md, "Conjugate gradients"): K read once per product as float64, each entry's
// scaled integer K' = trunc(K 2^e_row) cut on chip into 8 balanced base-256 digits, and the
// digits multiplied by a matrix W of INT8 columns (in the library, P's residues times the
// digits' weights 256^j mod p, for every modulus and right-hand side: 18 x 16 = 288 columns) on
// the tensor cores, INT32 sums split over k and added in a fixed order. Five kernels:
//   mma.sync m16n8k32, 64 rows per block, cp.async stages;
//   wgmma with the digits in registers (mma.sync's m16 A layout per warp, W by CuTe's K-major
//   descriptor without swizzle), one warpgroup, each stage's products waited for;
//   wgmma pipelined: two warpgroups (128 rows), a stage's products left in flight while the next
//   stage's digits are cut, cp.async stages;
//   wgmma fed by the tensor memory accelerator: W stored stage by stage in the shared layout (one
//   bulk copy a stage), K's 128 x 16 tile by a 2-D tensor copy (128-byte swizzle), mbarriers,
//   any number of splits of k;
//   the same with each stage of W multicast to a cluster of two blocks.
// The entries of W here are random: the probe times each kernel and checks its exact sums against
// the host's on sampled rows, with the digits taken by the plain recurrence; against them, one
// read of K alone (its memory floor). Results: docs/benchmarks.md, "The digit GEMM that
// conjugate gradients would need".
//   nvcc -O3 -std=c++17 -arch=sm_90a scripts/probes/digit_gemm.cu -o digit_gemm
//   ./digit_gemm [m k]   (default 6000 6000)
// Macros that leave parts out (the sums are then wrong, the times say what the parts cost):
// -DRAW_WORDS (K's bits stand for the digits); for the pipelined kernel -DNO_LOADS (the first
// stages' data again and again), -DNO_MMA (loads and digits alone), -DNO_FENCE (no proxy fence
// between the copies and the products); -DSTAGE_ENTRIES=16 -DPIPE_STAGES=4 (longer stages).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <type_traits>
#include <vector>

#include "check.cuh"
#include "random_x.cuh"
#include "timing.cuh"

namespace {

constexpr int kCols = 288;          // columns of W per block (18 moduli x 16 right-hand sides)
constexpr int kRows = 64;           // rows of K per block: 2 x 2 warps of 32 rows x 144 columns
constexpr int kWarpCols = kCols / 2;
constexpr int kColTiles = kWarpCols / 8;  // n8 tiles per warp
#ifndef STAGE_ENTRIES
#define STAGE_ENTRIES 8
#endif
constexpr int kStageEntries = STAGE_ENTRIES;  // entries of k per pipeline stage (8: 64 digit columns)
constexpr int kStageParts = kStageEntries / 2;  // 16-byte pieces of a stage's row of K or column of W
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
template <int Rows = kRows, int Threads = kThreads, int Stages = kStages, class WPlace>
__device__ __forceinline__ void load_stage(int stage, int stages, uint8_t* shared, int slot_bytes,
                                           int w_bytes, WPlace w_place, const double* K,
                                           const int8_t* w, int m, int k, int r0, int k0) {
  if (stage < stages) {
    uint8_t* w_slot = shared + (stage % Stages) * slot_bytes;
    uint8_t* k_slot = w_slot + w_bytes;
    const int e0 = k0 + stage * kStageEntries;
    for (int chunk = threadIdx.x; chunk < kCols * kStageParts; chunk += Threads) {
      const int c = chunk / kStageParts, part = chunk % kStageParts;
      copy16(w_slot + w_place(c, part), w + c * (int64_t(8) * k) + int64_t(8) * e0 + part * 16);
    }
    for (int chunk = threadIdx.x; chunk < Rows * kStageParts; chunk += Threads) {
      const int r = chunk / kStageParts, part = chunk % kStageParts;
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

// The warpgroup's sums (CuTe's CLayout_64x144 twice: the thread's rows `first` and first + 8,
// two neighbouring columns per n8 tile), once its products are done, to rows of out (kCols
// apart; rows past m not stored).
__device__ __forceinline__ void store_wgmma_sums(uint32_t (&acc)[2][72], int32_t* out,
                                                 int64_t first, int m, int tig) {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int i = 0; i < 72; ++i) asm volatile("" : "+r"(acc[j][i])::"memory");
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = first + 8 * h;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int nt = 0; nt < 18; ++nt) {
        const int col = j * 144 + nt * 8 + 2 * tig;
        *reinterpret_cast<int2*>(out + r * kCols + col) =
            make_int2(static_cast<int32_t>(acc[j][4 * nt + 2 * h]),
                      static_cast<int32_t>(acc[j][4 * nt + 2 * h + 1]));
      }
    }
  }
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
  store_wgmma_sums(acc, partial + int64_t(blockIdx.y) * m * kCols, r0 + 16 * warp + group, m,
                   tig);
#endif
}

// ---- wgmma, pipelined: two warpgroups of 64 rows (128 rows per block, so each stage of W serves
// twice the rows), each stage's products left in flight while the next stage's digits are cut ----
constexpr int kPipeRows = 128;
constexpr int kPipeThreads = 256;
#ifndef PIPE_STAGES
#define PIPE_STAGES 6
#endif
constexpr int kPipeStages = PIPE_STAGES;
constexpr int kPipeAhead = kPipeStages - 2;  // stages loaded ahead: a slot is refilled two stages
                                             // after its products were issued, once they are done
constexpr int kPipeStage = kWStageCore + kPipeRows * kKPitch;
constexpr int kPipeShared = kPipeStages * kPipeStage;

__global__ void __launch_bounds__(kPipeThreads, 1)
    digit_gemm_pipelined(const double* K, const double* scales, const int8_t* w, int m, int k,
                         int entries_per_split, int32_t* partial) {
#ifdef DIGIT_WGMMA
  extern __shared__ __align__(128) uint8_t shared[];
  const int wg = threadIdx.x / 128;
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, tig = lane % 4;
  const int r0 = blockIdx.x * kPipeRows;
  const int k0 = blockIdx.y * entries_per_split;
  const int stages = entries_per_split / kStageEntries;
  const auto load = [&](int stage) {
    load_stage<kPipeRows, kPipeThreads, kPipeStages>(
        stage, stages, shared, kPipeStage, kWStageCore,
        [](int c, int part) { return (c / 8) * kGroupBytes + part * 128 + (c % 8) * 16; }, K, w,
        m, k, r0, k0);
  };
  uint32_t acc[2][72];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int i = 0; i < 72; ++i) acc[j][i] = 0;
  }
  const int row = 64 * wg + 16 * warp + group;  // the thread's first row in the block
  const double scale[2] = {scales[min(r0 + row, m - 1)], scales[min(r0 + row + 8, m - 1)]};
  // A's digits of the last two stages: a stage's registers are written again only once its
  // products completed (wgmma.wait_group 1 after the next stage's issue).
  uint32_t a[2][kStageEntries / 4][4];
  for (int s = 0; s < kPipeAhead; ++s) load(s);
  const auto run_stage = [&](int stage, auto parity) {
    constexpr int p = decltype(parity)::value;
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPipeAhead - 1));
    __syncthreads();
#ifndef NO_FENCE  // -DNO_FENCE: what the fence costs (the products may then read stale bytes)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
#ifdef NO_LOADS  // -DNO_LOADS: the first stages' data again and again (wrong sums): what the loads cost
    const uint8_t* w_slot = shared + (stage % kPipeAhead) * kPipeStage;
#else
    load(stage + kPipeAhead);
    const uint8_t* w_slot = shared + (stage % kPipeStages) * kPipeStage;
#endif
    const double* k_slot = reinterpret_cast<const double*>(w_slot + kWStageCore);
#pragma unroll
    for (int step = 0; step < kStageEntries / 4; ++step) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const double* entries = k_slot + (row + 8 * h) * (kKPitch / 8) + step * 4;
        a[p][step][h] = digit_word(entries[tig / 2], scale[h], tig % 2);
        a[p][step][2 + h] = digit_word(entries[2 + tig / 2], scale[h], tig % 2);
      }
    }
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int step = 0; step < kStageEntries / 4; ++step) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#ifdef NO_MMA  // -DNO_MMA: loads and digits alone (wrong sums): what the products cost
        acc[j][step] += a[p][step][0] ^ a[p][step][1] ^ a[p][step][2] ^ a[p][step][3];
#else
        wgmma_144(acc[j], a[p][step], w_descriptor(w_slot + (j * 18) * kGroupBytes + step * 256));
#endif
      }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
  };
  for (int stage = 0; stage < stages; stage += 2) {
    run_stage(stage, std::integral_constant<int, 0>{});
    if (stage + 1 < stages) run_stage(stage + 1, std::integral_constant<int, 1>{});
  }
  store_wgmma_sums(acc, partial + int64_t(blockIdx.y) * m * kCols, r0 + row, m, tig);
#endif
}

// ---- wgmma fed by the tensor memory accelerator: each stage one bulk copy of W (stored
// stage-major in global memory, already in the shared layout) and one 2-D tensor copy of K's
// 128 x 16 tile (rows 128 bytes, 128-byte swizzle), completed on an mbarrier; no load
// instructions in the threads ----
constexpr int kTmaEntries = 16;                         // entries of k per stage
constexpr int kTmaGroupBytes = (kTmaEntries * 8 / 16) * 128;  // 8 columns of W, a stage's k
constexpr int kTmaWStage = (kCols / 8) * kTmaGroupBytes;
constexpr int kTmaKStage = kPipeRows * kTmaEntries * 8;
constexpr int kTmaStage = kTmaWStage + kTmaKStage;      // a multiple of 1024 (the swizzle atom)
constexpr int kTmaStages = 4;
constexpr int kTmaShared = kTmaStages * kTmaStage + 1024;  // + room to align the base to 1024

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void barrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count));
}
__device__ __forceinline__ void barrier_expect(uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)),
               "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
__device__ __forceinline__ void barrier_wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(shared_address(bar)), "r"(parity) : "memory");
}

// The cluster's blocks wait for each other (their barriers initialized; none exits while another
// may still write into its shared memory or barriers).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}

// Cluster = 2: two blocks of consecutive rows share W's stages, each copying half of every stage
// into both (multicast), which halves W's reads from L2; a slot is refilled once the products of
// both blocks are done with it (each thread arrives on both blocks' empty barriers).
template <int Cluster>
__global__ void __launch_bounds__(kPipeThreads, 1)
    digit_gemm_tma(const __grid_constant__ CUtensorMap k_map, const double* scales,
                   const int8_t* w_staged, int m, int k, int splits, int32_t* partial) {
#ifdef DIGIT_WGMMA
  extern __shared__ uint8_t shared_raw[];
  __shared__ __align__(8) uint64_t full[kTmaStages], empty[kTmaStages];
  uint8_t* shared = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(shared_raw) + 1023) & ~uintptr_t(1023));
  const int wg = threadIdx.x / 128;
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, tig = lane % 4;
  const int r0 = blockIdx.x * kPipeRows;
  // Split y takes stages [y S / splits, (y + 1) S / splits) of the S = k / 16: any number of
  // splits, so that the blocks fill whole waves.
  const int total_stages = k / kTmaEntries;
  const int first_stage = static_cast<int>(int64_t(blockIdx.y) * total_stages / splits);
  const int k0 = first_stage * kTmaEntries;
  const int stages =
      static_cast<int>(int64_t(blockIdx.y + 1) * total_stages / splits) - first_stage;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kTmaStages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], kPipeThreads * Cluster);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  uint32_t rank = 0;
  if constexpr (Cluster > 1) {
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    cluster_sync();
  }
  // Thread 0 fills slot stage % kTmaStages with the stage's W and K tile.
  const auto load = [&](int stage) {
    if (stage >= stages) return;
    const int slot = stage % kTmaStages;
    uint8_t* w_slot = shared + slot * kTmaStage;
    barrier_expect(&full[slot], kTmaStage);
    const int64_t global_stage = (k0 + int64_t(stage) * kTmaEntries) / kTmaEntries;
    if constexpr (Cluster == 1) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
          ::"r"(shared_address(w_slot)), "l"(w_staged + global_stage * kTmaWStage),
          "r"(kTmaWStage), "r"(shared_address(&full[slot])) : "memory");
    } else {
      constexpr int kPart = kTmaWStage / Cluster;
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
          "[%0], [%1], %2, [%3], %4;\n"
          ::"r"(shared_address(w_slot + rank * kPart)),
          "l"(w_staged + global_stage * kTmaWStage + rank * kPart), "r"(kPart),
          "r"(shared_address(&full[slot])), "h"(static_cast<uint16_t>((1 << Cluster) - 1))
          : "memory");
    }
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(shared_address(w_slot + kTmaWStage)), "l"(&k_map),
        "r"(k0 + stage * kTmaEntries), "r"(r0), "r"(shared_address(&full[slot])) : "memory");
  };
  if (threadIdx.x == 0) {  // every slot is free at the start
    for (int s = 0; s < kTmaStages; ++s) load(s);
  }
  uint32_t acc[2][72];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int i = 0; i < 72; ++i) acc[j][i] = 0;
  }
  const int row = 64 * wg + 16 * warp + group;
  const double scale[2] = {scales[min(r0 + row, m - 1)], scales[min(r0 + row + 8, m - 1)]};
  uint32_t a[2][kTmaEntries / 4][4];
  const auto run_stage = [&](int stage, auto parity) {
    constexpr int p = decltype(parity)::value;
    const int slot = stage % kTmaStages;
    barrier_wait(&full[slot], (stage / kTmaStages) & 1);
    const uint8_t* w_slot = shared + slot * kTmaStage;
    const uint8_t* k_slot = w_slot + kTmaWStage;
#pragma unroll
    for (int step = 0; step < kTmaEntries / 4; ++step) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = row + 8 * h;
        const auto entry = [&](int e) {  // entry e of row r in the 128-byte swizzle
          return *reinterpret_cast<const double*>(k_slot + r * 128 + (((e / 2) ^ (r % 8)) * 16) +
                                                  (e % 2) * 8);
        };
        a[p][step][h] = digit_word(entry(4 * step + tig / 2), scale[h], tig % 2);
        a[p][step][2 + h] = digit_word(entry(4 * step + 2 + tig / 2), scale[h], tig % 2);
      }
    }
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int step = 0; step < kTmaEntries / 4; ++step) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint64_t address = shared_address(w_slot + (j * 18) * kTmaGroupBytes + step * 256);
        const uint64_t descriptor = ((address >> 4) & 0x3FFF) | (uint64_t(128 >> 4) << 16) |
                                    (uint64_t(kTmaGroupBytes >> 4) << 32);
        wgmma_144(acc[j], a[p][step], descriptor);
      }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    // The previous stage's products are done: its slot may be refilled.
    if (stage > 0) {
      const int before = (stage - 1) % kTmaStages;
      barrier_arrive(&empty[before]);
      if constexpr (Cluster > 1) {
        for (uint32_t peer = 0; peer < Cluster; ++peer) {
          if (peer == rank) continue;
          uint32_t remote;
          asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                       : "=r"(remote) : "r"(shared_address(&empty[before])), "r"(peer));
          asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote)
                       : "memory");
        }
      }
      if (threadIdx.x == 0) {
        barrier_wait(&empty[before], ((stage - 1) / kTmaStages) & 1);
        load(stage - 1 + kTmaStages);
      }
    }
  };
  for (int stage = 0; stage < stages; stage += 2) {
    run_stage(stage, std::integral_constant<int, 0>{});
    if (stage + 1 < stages) run_stage(stage + 1, std::integral_constant<int, 1>{});
  }
  store_wgmma_sums(acc, partial + int64_t(blockIdx.y) * m * kCols, r0 + row, m, tig);
  if constexpr (Cluster > 1) cluster_sync();
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
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // every line out at once, also under a time limit
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
  constexpr int kMaxSplits = 15;
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
  CHECK(cudaFuncSetAttribute(digit_gemm_pipelined, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kPipeShared));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, digit_gemm_pipelined,
                                                      kPipeThreads, kPipeShared));
  std::printf("# wgmma pipelined: %d blocks of %d threads per SM, %d bytes of shared memory each\n",
              per_sm, kPipeThreads, kPipeShared);
  // W stage-major for the TMA kernel: stage s's 288 columns x 128 bytes in the shared layout.
  std::vector<int8_t> w_staged(w.size());
  for (int64_t stage = 0; stage < k / kTmaEntries; ++stage) {
    for (int c = 0; c < kCols; ++c) {
      for (int j = 0; j < kTmaEntries * 8; ++j) {
        w_staged[stage * kTmaWStage + (c / 8) * kTmaGroupBytes + (j / 16) * 128 + (c % 8) * 16 +
                 j % 16] = w[int64_t(c) * 8 * k + stage * kTmaEntries * 8 + j];
      }
    }
  }
  int8_t* w_staged_d;
  CHECK(cudaMalloc(&w_staged_d, w_staged.size()));
  CHECK(cudaMemcpy(w_staged_d, w_staged.data(), w_staged.size(), cudaMemcpyHostToDevice));
  // K's tensor map: 128 rows x 16 entries per copy, 128-byte swizzle, rows past m read as zeros.
  using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  void* encode_entry = nullptr;
  cudaDriverEntryPointQueryResult query;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &encode_entry, 12000,
                                         cudaEnableDefault, &query));
  CUtensorMap k_map;
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(m)};
  const cuuint64_t strides[1] = {cuuint64_t(k) * 8};
  const cuuint32_t box[2] = {kTmaEntries, kPipeRows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult encoded = reinterpret_cast<EncodeTiled>(encode_entry)(
      &k_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT64, 2, K_d, dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (encoded != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed (%d)\n", static_cast<int>(encoded));
    return 1;
  }
  CHECK(cudaFuncSetAttribute(digit_gemm_tma<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kTmaShared));
  CHECK(cudaFuncSetAttribute(digit_gemm_tma<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kTmaShared));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, digit_gemm_tma<1>, kPipeThreads,
                                                      kTmaShared));
  std::printf("# wgmma by TMA: %d blocks of %d threads per SM, %d bytes of shared memory each\n",
              per_sm, kPipeThreads, kTmaShared);
  const char* names[] = {"mma.sync", "wgmma", "wgmma pipelined", "wgmma by TMA",
                         "wgmma by TMA, W multicast to 2 blocks"};
  // The TMA kernels take any number of splits (their stages shared out unevenly) where k is a
  // multiple of their stage; the others splits of whole, equal stages.
  const auto runs = [&](int kernel, int splits) {
    if (kernel >= 3) return k % kTmaEntries == 0 && (splits % 2 == 1 || splits == 8 || splits == 14);
    return (k / kStageEntries) % splits == 0;
  };
  for (int kernel = 0; kernel < 5; ++kernel) {
    for (int splits = 1; splits <= kMaxSplits; ++splits) {
      if (!runs(kernel, splits)) continue;
      const int per_split = k / kStageEntries / splits * kStageEntries;
      const int rows = kernel >= 2 ? kPipeRows : kRows;
      const int row_blocks = (m + rows - 1) / rows;
      const dim3 grid(kernel == 4 ? (row_blocks + 1) / 2 * 2 : row_blocks, splits);
      CHECK(cudaMemset(sums, 0, int64_t(m) * kCols * sizeof(int32_t)));
      const auto launch = [&] {
        if (kernel == 4) {
          cudaLaunchConfig_t config = {};
          config.gridDim = grid;
          config.blockDim = dim3(kPipeThreads);
          config.dynamicSmemBytes = kTmaShared;
          cudaLaunchAttribute attribute;
          attribute.id = cudaLaunchAttributeClusterDimension;
          attribute.val.clusterDim.x = 2;
          attribute.val.clusterDim.y = 1;
          attribute.val.clusterDim.z = 1;
          config.attrs = &attribute;
          config.numAttrs = 1;
          CHECK(cudaLaunchKernelEx(&config, digit_gemm_tma<2>, k_map,
                                   static_cast<const double*>(scales_d),
                                   static_cast<const int8_t*>(w_staged_d), m, k, splits, partial));
        } else if (kernel == 3) {
          digit_gemm_tma<1><<<grid, kPipeThreads, kTmaShared>>>(k_map, scales_d, w_staged_d, m, k,
                                                                 splits, partial);
        } else if (kernel == 2) {
          digit_gemm_pipelined<<<grid, kPipeThreads, kPipeShared>>>(K_d, scales_d, w_d, m, k,
                                                                    per_split, partial);
        } else if (kernel == 1) {
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
                  names[kernel], splits, grid.x * grid.y, ms, ops / ms * 1e-9,
                  wrong == 0 ? "exact" : "WRONG", static_cast<long long>(wrong),
                  std::size(sampled) * kCols);
    }
  }
  return 0;
}
