// The fused scheme-II tile (csrc/cuda/crt_fused.cuh) alone, per tile shape, and a wgmma variant
// (below): residue products of N = 15 moduli over random INT8 residues, kept on chip, timed against
// cuBLAS's INT8 GEMMs of the same shape (one per modulus, INT32 out) in the same run. Every shape
// must give the same checksum of the kept residues. csrc/cuda/crt.cu's tile follows from these.
//   nvcc -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr scripts/probes/fused_tiles.cu \
//        -lcublas -o /tmp/fused_tiles && /tmp/fused_tiles [m n k]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "../../csrc/cuda/crt_fused.cuh"
#include "check.cuh"

using namespace ozaki;
using namespace ozaki::cuda;

constexpr int N = 15;

// ---- A wgmma tile (sm_90a): the same kept residues from Hopper's warpgroup MMA -------------------
// It measured no faster than the mma.sync tiles (the operand traffic of a 64 x 128 tile bounds
// both), so the library keeps mma.sync, which builds for plain sm_90.

// One warpgroup (4 warps) owns a 64 x 128 tile. Its operands go through Stages shared buffers in
// the 128-byte-swizzled K-major layout that wgmma reads directly (swizzled<128>, with every 8-row
// group 1024 bytes long and each buffer 1024-byte aligned); each stage is four m64n128k32 products.
struct WgmmaTile {
  static constexpr int kRows = 64;
  static constexpr int kCols = 128;
  static constexpr int kThreads = 128;
  static constexpr int kDepth = 128;
  static constexpr int kChunks = kDepth / 16;
  static constexpr int kStages = 4;
  static constexpr int kStageBytes = (kRows + kCols) * kDepth;  // a multiple of 1024
  static constexpr int kAlign = 1024;
  static constexpr int64_t shared_bytes(int moduli) {
    return kAlign + int64_t(kStages) * kStageBytes + int64_t(moduli) * kRows * kCols;
  }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define OZAKI_HAS_WGMMA 1

// wgmma's shared memory descriptor of a K-major operand in the 128-byte swizzle: start address,
// 8-row groups 1024 bytes apart (the leading offset is unused in this layout).
__device__ __forceinline__ uint64_t swizzled_operand(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (uint64_t(1) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Makes the shared memory written by cp.async visible to wgmma's reads (the async proxy).
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// d (64 x 128 INT32, the warpgroup's fragments) = a b^T (+ d when accumulate): a 64 x 32 and
// b 128 x 32 INT8, both K-major in shared memory.
__device__ __forceinline__ void wgmma_int8(int32_t (&d)[64], uint64_t a, uint64_t b,
                                           bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// fused_residue_tile on the wgmma path: the same kept residues, for WgmmaTile.
template <int N>
__device__ const uint8_t* wgmma_residue_tile(ResidueRows a, ResidueRows b, int64_t k_stride,
                                             int64_t e, int64_t row0, int64_t col0,
                                             uint8_t* shared) {
  using Tile = WgmmaTile;
  constexpr int Rows = Tile::kRows, Cols = Tile::kCols, Stages = Tile::kStages;
  const uint32_t raw = shared_address(shared);
  uint8_t* base = shared + ((Tile::kAlign - raw % Tile::kAlign) % Tile::kAlign);
  uint8_t* kept = base + int64_t(Stages) * Tile::kStageBytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k_tiles = static_cast<int>((k_stride + Tile::kDepth - 1) / Tile::kDepth);
  const int total = N * k_tiles;
  StageLoader<N, Tile> loader{a, b, k_stride, e, row0, col0, base, k_tiles};
  loader.start(total);

  int32_t acc[64];
  int modulus = 0, kt = 0;
  for (int t = 0; t < total; ++t) {
    wait_async<Stages - 2>();
    fence_async_shared();
    __syncthreads();  // stage t is in; the products of stage t - 1 are complete in every warp
    if (t + Stages - 1 < total) loader.next((t + Stages - 1) % Stages);
    commit_async();

    const uint32_t a_base = shared_address(base + (t % Stages) * Tile::kStageBytes);
    const uint32_t b_base = a_base + Rows * Tile::kDepth;
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < Tile::kDepth / 32; ++step) {
      wgmma_int8(acc, swizzled_operand(a_base + step * 32), swizzled_operand(b_base + step * 32),
                 kt > 0 || step > 0);
    }
    wgmma_commit();
    wgmma_wait_all();

    if (++kt == k_tiles) {  // modulus done: keep its residues (the next one starts from zero)
      for_each_modulus<N>([&](auto index) {
        constexpr int I = decltype(index)::value;
        if (I != modulus) return;
        uint8_t* plane = kept + int64_t(I) * Rows * Cols;
        const int r = warp * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < Cols / 8; ++j) {
          const int c = j * 8 + (lane % 4) * 2;
          keep_pair<I, Cols>(plane, r, c, acc[4 * j], acc[4 * j + 1]);
          keep_pair<I, Cols>(plane, r + 8, c, acc[4 * j + 2], acc[4 * j + 3]);
        }
      });
      kt = 0;
      ++modulus;
    }
  }
  wait_async<0>();
  __syncthreads();
  return kept;
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL


__global__ void random_residues(int8_t* x, int64_t count, uint32_t seed) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count;
       t += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(t) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[t] = static_cast<int8_t>(static_cast<int>(h % 255) - 127);
  }
}

// The tile's kept residues summed per block (so nothing is optimised away), into sums[block].
template <typename Tile>
__global__ void __launch_bounds__(Tile::kThreads)
    tile_kernel(ResidueRows a, ResidueRows b, int64_t k_stride, unsigned long long* sum) {
  extern __shared__ __align__(128) uint8_t shared[];
  const int64_t row0 = int64_t(blockIdx.y) * Tile::kRows, col0 = int64_t(blockIdx.x) * Tile::kCols;
  const uint8_t* kept;
  if constexpr (std::is_same_v<Tile, WgmmaTile>) {
#ifdef OZAKI_HAS_WGMMA
    kept = wgmma_residue_tile<N>(a, b, k_stride, 0, row0, col0, shared);
#else
    return;
#endif
  } else {
    kept = fused_residue_tile<N, Tile>(a, b, k_stride, 0, row0, col0, shared);
  }
  unsigned long long local = 0;
  for (int t = threadIdx.x; t < N * Tile::kRows * Tile::kCols; t += Tile::kThreads) local += kept[t];
  atomicAdd(sum, local);  // a checksum only (order-free integer sum)
}

template <typename Tile>
void run(const char* name, ResidueRows a, ResidueRows b, int64_t k, double ops, double cublas_ms) {
  const auto kernel = tile_kernel<Tile>;
  const int bytes = static_cast<int>(Tile::shared_bytes(N));
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  int blocks_per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, Tile::kThreads, bytes));
  unsigned long long* sum;
  CHECK(cudaMalloc(&sum, sizeof(*sum)));
  const dim3 grid((b.count + Tile::kCols - 1) / Tile::kCols, (a.count + Tile::kRows - 1) / Tile::kRows);
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  float best = 1e30f;
  for (int r = 0; r < 4; ++r) {
    CHECK(cudaMemset(sum, 0, sizeof(*sum)));
    CHECK(cudaEventRecord(start));
    kernel<<<grid, Tile::kThreads, bytes>>>(a, b, k, sum);
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaGetLastError());
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0 && ms < best) best = ms;
  }
  unsigned long long host_sum;
  CHECK(cudaMemcpy(&host_sum, sum, sizeof(host_sum), cudaMemcpyDeviceToHost));
  std::printf("%-34s %2d warps %d blocks/SM %6d KiB  %8.3f ms  %6.0f TOPS  %.2fx cuBLAS  sum %llu\n",
              name, Tile::kThreads / 32, blocks_per_sm, bytes / 1024, best, ops / best * 1e-9,
              cublas_ms / best, host_sum);
  CHECK(cudaFree(sum));
}

int main(int argc, char** argv) {
  const int64_t m = argc > 3 ? std::atoll(argv[1]) : 4096;
  const int64_t n = argc > 3 ? std::atoll(argv[2]) : 4096;
  const int64_t k = argc > 3 ? std::atoll(argv[3]) : 4096;  // a multiple of 16
  int8_t *a, *b;
  int32_t* c;
  CHECK(cudaMalloc(&a, N * m * k));
  CHECK(cudaMalloc(&b, N * n * k));
  CHECK(cudaMalloc(&c, N * m * n * sizeof(int32_t)));
  random_residues<<<1024, 256>>>(a, N * m * k, 1);
  random_residues<<<1024, 256>>>(b, N * n * k, 2);
  const double ops = 2.0 * N * m * n * k;

  cublasHandle_t handle;
  cublasCreate(&handle);
  const int32_t one = 1, zero = 0;
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  float cublas_ms = 1e30f;
  for (int r = 0; r < 4; ++r) {
    CHECK(cudaEventRecord(start));
    for (int i = 0; i < N; ++i) {  // row-major C (m x n) = A (m x k) B (n x k)^T: TN in cuBLAS
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b + i * n * k, CUDA_R_8I, k,
                   a + i * m * k, CUDA_R_8I, k, &zero, c + i * m * n, CUDA_R_32I, n,
                   CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
    }
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0 && ms < cublas_ms) cublas_ms = ms;
  }
  std::printf("m %lld n %lld k %lld, %d moduli: cuBLAS INT8 GEMMs %.3f ms, %.0f TOPS\n",
              (long long)m, (long long)n, (long long)k, N, cublas_ms, ops / cublas_ms * 1e-9);
  const ResidueRows ra{a, m, m}, rb{b, n, n};
  run<WgmmaTile>("64x128 wgmma depth 128 x4", ra, rb, k, ops, cublas_ms);
  run<FusedTile<128, 64, 32, 32, 128, 3>>("128x64 warp 32x32 depth 128 x3", ra, rb, k, ops, cublas_ms);
  run<FusedTile<128, 64, 32, 32, 128, 4>>("128x64 warp 32x32 depth 128 x4", ra, rb, k, ops, cublas_ms);
  run<FusedTile<128, 64, 32, 32, 64, 4>>("128x64 warp 32x32 depth 64 x4", ra, rb, k, ops, cublas_ms);
  run<FusedTile<128, 64, 64, 32, 128, 3>>("128x64 warp 64x32 depth 128 x3", ra, rb, k, ops, cublas_ms);
  run<FusedTile<128, 64, 32, 64, 128, 3>>("128x64 warp 32x64 depth 128 x3", ra, rb, k, ops, cublas_ms);
  run<FusedTile<64, 128, 32, 64, 128, 3>>("64x128 warp 32x64 depth 128 x3", ra, rb, k, ops, cublas_ms);
  run<FusedTile<64, 64, 32, 32, 128, 3>>("64x64 warp 32x32 depth 128 x3", ra, rb, k, ops, cublas_ms);
  run<FusedTile<64, 64, 32, 32, 64, 4>>("64x64 warp 32x32 depth 64 x4", ra, rb, k, ops, cublas_ms);
  run<FusedTile<64, 64, 64, 64, 128, 3>>("64x64 warp 64x64 depth 128 x3", ra, rb, k, ops, cublas_ms);
  run<FusedTile<64, 32, 32, 32, 128, 4>>("64x32 warp 32x32 depth 128 x4", ra, rb, k, ops, cublas_ms);
  return 0;
}
