// Scheme II's fused residue products: one thread block owns a tile of the output and, modulus by
// modulus, accumulates the INT8 products of its rows' and columns' residues over k on the tensor
// cores (mma.sync m16n8k32, operands through a cp.async pipeline), reduces each INT32 sum mod p
// and keeps it on chip as 8 bits. The INT32 products never reach global memory; the caller rebuilds
// and rounds the tile from the kept residues (crt.cu, fused_crt_kernel). The sums are the exact
// integers cuBLAS's INT8 GEMM returns, so both paths give the same bits.
#pragma once

#include <cstdint>

#include "../crt.h"
#include "tma.cuh"

namespace ozaki::cuda {

// A tile of Rows x Cols outputs, one warp per WarpRows x WarpCols block of it; k goes through
// shared memory Depth bytes at a time in Stages buffers. After the products, shared memory holds
// every modulus's reduced residue of every entry of the tile.
template <int Rows, int Cols, int WarpRows = 32, int WarpCols = 32, int Depth = 128, int Stages = 3>
struct FusedTile {
  static_assert(Rows % WarpRows == 0 && Cols % WarpCols == 0 && WarpRows % 16 == 0 &&
                WarpCols % 16 == 0 && (Depth == 64 || Depth == 128));
  static constexpr int kRows = Rows;
  static constexpr int kCols = Cols;
  static constexpr int kWarpRows = WarpRows;
  static constexpr int kWarpCols = WarpCols;
  static constexpr int kWarpsAcross = Cols / WarpCols;
  static constexpr int kThreads = (Rows / WarpRows) * kWarpsAcross * 32;
  static constexpr int kDepth = Depth;
  static constexpr int kChunks = kDepth / 16;  // 16-byte chunks per row of a stage
  static constexpr int kStages = Stages;
  static constexpr int kStageBytes = (Rows + Cols) * kDepth;
  static constexpr int64_t shared_bytes(int moduli) {
    return int64_t(kStages) * kStageBytes + int64_t(moduli) * Rows * Cols;
  }
};

// The INT8 residues of a chunk's `count` rows, as launch_residues writes them: row r of modulus i
// of element e at data + ((e * N + i) * plane + r) * k_stride, k_stride a multiple of 16, zero
// past k; plane = count for a chunk's own residues, the operand's row count for prepared ones
// (data then points at the chunk's first row).
struct ResidueRows {
  const int8_t* data;
  int64_t count;
  int64_t plane;
};

// 16 bytes from global to shared memory without passing through registers; zeros when !valid.
__device__ __forceinline__ void copy_async_16(uint32_t destination, const void* source,
                                              bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(bytes));
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// Four 8 x 16-byte matrices from shared memory, one register of each per thread.
__device__ __forceinline__ void load_matrices(uint32_t (&out)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
               : "r"(address));
}

// c += a (16 x 32, row-major) times b (32 x 8, column-major), INT8 in, INT32 accumulated exactly.
__device__ __forceinline__ void multiply_add_int8(int32_t (&c)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Byte offset of 16-byte chunk q of row r in a stage buffer of Depth-byte rows. The chunks are
// permuted by row so that the 8 rows one ldmatrix phase reads fall in distinct banks.
template <int Depth>
__device__ __forceinline__ int swizzled(int r, int q) {
  if constexpr (Depth == 128) return r * 128 + ((q ^ (r & 7)) << 4);
  return r * 64 + ((q ^ ((r >> 1) & 3)) << 4);
}

// The operand pipeline of a tile: stage after stage, modulus by modulus and k in order, into
// Tile::kStages buffers of Tile::kStageBytes at `buffers`, one cp.async group per stage.
template <int N, typename Tile>
struct StageLoader {
  ResidueRows a, b;
  int64_t k_stride, e, row0, col0;
  uint8_t* buffers;
  int k_tiles;  // stages per modulus
  int modulus = 0, kt = 0;  // the next stage to load

  // k bytes [kt * Depth, (kt + 1) * Depth) of modulus i's residues of the tile's Rows rows of a
  // (at buffer) and Cols rows of b (after them), each row swizzled; zeros past the operands' rows
  // and k_stride.
  __device__ __forceinline__ void load(int modulus, int kt, uint8_t* buffer) const {
    constexpr int Rows = Tile::kRows, Cols = Tile::kCols, Chunks = Tile::kChunks;
    const int64_t k0 = int64_t(kt) * Tile::kDepth;
    for (int c = threadIdx.x; c < (Rows + Cols) * Chunks; c += Tile::kThreads) {
      const bool is_a = c < Rows * Chunks;
      const int local = is_a ? c : c - Rows * Chunks;
      const int r = local / Chunks, q = local % Chunks;
      const ResidueRows& operand = is_a ? a : b;
      const int64_t row = (is_a ? row0 : col0) + r;
      const int64_t k = k0 + q * 16;
      const bool valid = row < operand.count && k < k_stride;
      const int8_t* source = operand.data;
      if (valid) source += ((e * N + modulus) * operand.plane + row) * k_stride + k;
      copy_async_16(shared_address(buffer + (is_a ? 0 : Rows * Tile::kDepth) +
                                   swizzled<Tile::kDepth>(r, q)),
                    source, valid);
    }
  }

  // The next stage into buffer `stage` (no commit).
  __device__ __forceinline__ void next(int stage) {
    load(modulus, kt, buffers + stage * Tile::kStageBytes);
    if (++kt == k_tiles) {
      kt = 0;
      ++modulus;
    }
  }

  // The first kStages - 1 stages of `total`, one group each.
  __device__ __forceinline__ void start(int total) {
    for (int s = 0; s < Tile::kStages - 1; ++s) {
      if (s < total) next(s);
      commit_async();
    }
  }
};

// Keeps two reduced residues of modulus I, entries (r, c) and (r, c + 1), in the plane.
template <int I, int Cols>
__device__ __forceinline__ void keep_pair(uint8_t* plane, int r, int c, int32_t first,
                                          int32_t second) {
  const uint32_t low = unsigned_residue<I>(first), high = unsigned_residue<I>(second);
  *reinterpret_cast<uint16_t*>(plane + r * Cols + c) = static_cast<uint16_t>(low | (high << 8));
}

// The residue products of the tile at (row0, col0) of element e, for the N moduli: returns the
// shared memory holding, for entry (r, c) of the tile, u_i = (A'B')_rc * y_i mod p_i at
// [(i * Rows + r) * Cols + c] (y_i the weight carried by B's residues). All threads of the block
// call it; it ends with a barrier.
template <int N, typename Tile>
__device__ const uint8_t* fused_residue_tile(ResidueRows a, ResidueRows b, int64_t k_stride,
                                             int64_t e, int64_t row0, int64_t col0,
                                             uint8_t* shared) {
  constexpr int Rows = Tile::kRows, Cols = Tile::kCols, Stages = Tile::kStages;
  constexpr int MI = Tile::kWarpRows / 16, NI = Tile::kWarpCols / 8;  // mma tiles per warp
  uint8_t* kept = shared + int64_t(Stages) * Tile::kStageBytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_row = (warp / Tile::kWarpsAcross) * Tile::kWarpRows;
  const int warp_col = (warp % Tile::kWarpsAcross) * Tile::kWarpCols;
  const int k_tiles = static_cast<int>((k_stride + Tile::kDepth - 1) / Tile::kDepth);
  const int total = N * k_tiles;

  StageLoader<N, Tile> loader{a, b, k_stride, e, row0, col0, shared, k_tiles};
  loader.start(total);

  int32_t acc[MI][NI][4] = {};
  int modulus = 0, kt = 0;
  for (int t = 0; t < total; ++t) {
    wait_async<Stages - 2>();
    __syncthreads();  // stage t is in; every warp is done with the stage loaded next
    if (t + Stages - 1 < total) loader.next((t + Stages - 1) % Stages);
    commit_async();

    const uint8_t* buffer = shared + (t % Stages) * Tile::kStageBytes;
    const uint32_t a_base = shared_address(buffer);
    const uint32_t b_base = shared_address(buffer + Rows * Tile::kDepth);
#pragma unroll
    for (int step = 0; step < Tile::kDepth / 32; ++step) {  // k32 steps per stage
      uint32_t a_parts[MI][4], b_parts[NI / 2][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int r = warp_row + mi * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        load_matrices(a_parts[mi], a_base + swizzled<Tile::kDepth>(r, step * 2 + lane / 16));
      }
#pragma unroll
      for (int np = 0; np < NI / 2; ++np) {
        const int r = warp_col + np * 16 + (lane % 8) + (lane / 16) * 8;
        load_matrices(b_parts[np], b_base + swizzled<Tile::kDepth>(r, step * 2 + (lane / 8) % 2));
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const uint32_t(&bp)[4] = b_parts[ni / 2];
          multiply_add_int8(acc[mi][ni], a_parts[mi], bp[(ni % 2) * 2], bp[(ni % 2) * 2 + 1]);
        }
      }
    }

    if (++kt == k_tiles) {  // modulus done: keep its residues, start the next one from zero
      for_each_modulus<N>([&](auto index) {
        constexpr int I = decltype(index)::value;
        if (I != modulus) return;
        uint8_t* plane = kept + int64_t(I) * Rows * Cols;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) {
            const int r = warp_row + mi * 16 + lane / 4, c = warp_col + ni * 8 + (lane % 4) * 2;
            keep_pair<I, Cols>(plane, r, c, acc[mi][ni][0], acc[mi][ni][1]);
            keep_pair<I, Cols>(plane, r + 8, c, acc[mi][ni][2], acc[mi][ni][3]);
          }
        }
      });
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
#pragma unroll
          for (int x = 0; x < 4; ++x) acc[mi][ni][x] = 0;
        }
      }
      kt = 0;
      ++modulus;
    }
  }
  wait_async<0>();
  __syncthreads();
  return kept;
}

}  // namespace ozaki::cuda
