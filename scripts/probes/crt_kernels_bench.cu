// Standalone timing of scheme II's element-wise passes (csrc/crt.h) on a GPU against the memory
// floor of the same loads and stores, and a check that the GPU's reconstruction returns the host's
// bits (the same crt_reconstruct compiled for the CPU) on valid residues: exact integers X with
// |X| < 2^(floor(log2 P) - 1) <= P/2, their weighted residues plus random multiples of the moduli.
//   nvcc -O3 -std=c++20 -fmad=false --ftz=false -arch=sm_90 --expt-relaxed-constexpr \
//        scripts/probes/crt_kernels_bench.cu -o /tmp/crt_kernels_bench && /tmp/crt_kernels_bench
// (--bytes: the reduced path's reconstruction at 16384^2 alone, three times over; --wide: the same
// with 4, 8 or 16 entries per thread; --pipelined: with the next items' loads in flight; --tma:
// fed by the tensor memory accelerator, see reconstruct_tma; -DFLOAT64_FIRST=0: the GPU's
// reconstructions by the exact path alone, without the library's rounding in float64 first)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <cstdio>
#include <vector>

#include "../../csrc/crt.h"
#include "../../csrc/cuda/tma.cuh"
#include "check.cuh"
#include "random_x.cuh"
#include "timing.cuh"

using namespace ozaki;
using ozaki::cuda::barrier_init;
using ozaki::cuda::barrier_wait;
using ozaki::cuda::copy_box_3d;
using ozaki::cuda::fence_shared_before_copies;
using ozaki::cuda::shared_address;

// The GPU's reconstructions, of float64 and float32 results, try the rounding in float64
// arithmetic first (round_quotient_float64, round_quotient_float32 in csrc/crt.h), as the
// library's do; -DFLOAT64_FIRST=0 leaves them the exact path alone. The host's reference takes
// the exact path either way.
#ifndef FLOAT64_FIRST
#define FLOAT64_FIRST 1
#endif
constexpr bool kFloat64First = FLOAT64_FIRST != 0;


// ---- valid residue products -----------------------------------------------------------------

// Entry t: X random with |X| < 2^bits, bits random up to max_bits (< log2 P - 1: |X| < P/2) and
// often max_bits itself, some zeros; R_i = y_i X mod p_i plus a random multiple of p_i within
// +-(2^31 - 2^14).
template <int N>
__global__ void make_products(int32_t* products, int64_t plane, int max_bits, uint64_t seed) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < plane;
       t += int64_t(gridDim.x) * blockDim.x) {
    const RandomX x_value = random_x(seed, t, max_bits);
    for_each_modulus<N>([&](auto index) {
      constexpr int i = decltype(index)::value;
      constexpr int64_t p = kModuli[i];
      const int64_t x = residue_of_x(x_value, p);
      const int64_t r = x * CrtTerm<N, i>::inverse % p;
      const int64_t span = ((int64_t(1) << 31) - (int64_t(1) << 14)) / p - 1;
      const uint64_t h = mix(seed ^ (t * 31 + i + 7));
      const int64_t multiple = static_cast<int64_t>(h % uint64_t(2 * span + 1)) - span;
      products[i * plane + t] = static_cast<int32_t>(r + multiple * p - (r > p / 2 ? p : 0));
    });
  }
}

// ---- the kernels ----------------------------------------------------------------------------

constexpr int kColumns = 4;

// Calls f(row, j0) for every row < rows and every group of four columns j0 = 4 g, g < groups, of
// it: rows along grid y and the threads' y, groups along grid x and the threads' x; each thread
// stores its four entries itself (the library's reconstruct_kernel passes a warp's 128 values
// through shared memory first, csrc/cuda/crt.cu).
template <typename F>
__device__ void for_each_four_columns(int64_t rows, int64_t groups, F f) {
  for (int64_t row = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; row < rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups;
         g += int64_t(gridDim.x) * blockDim.x) {
      f(row, 4 * g);
    }
  }
}

enum Variant { kLibrary = 0, kLoadsOnly = 1 };

// One entry's value: its reconstruction (kLibrary), or a sum of its residues that keeps the loads
// (kLoadsOnly).
template <int N, int V, bool reduced, typename T>
__device__ double entry_value(const int32_t (&residues)[N], RowScale c_a, int code_b) {
  if constexpr (V == kLoadsOnly) {
    int64_t sum = 0;
#pragma unroll
    for (int m = 0; m < N; ++m) sum += residues[m];
    return static_cast<double>(sum);
  } else {
    return crt_reconstruct<N, reduced, kFloat64First>(residues, c_a, row_scale(code_b),
                                                      format_of<T>());
  }
}

// P: int32_t for the INT32 sums of cuBLAS's GEMMs, uint8_t for the reduced GEMMs' residues.
template <int N, int V, typename T, typename P>
__global__ void reconstruct(const P* products, int64_t rows, int64_t ld, const int* scale_a,
                            const int* scale_b, T* out) {
  const int64_t plane = rows * ld;
  for_each_four_columns(rows, ld / kColumns, [&](int64_t row, int64_t j0) {
    const RowScale c_a = row_scale(scale_a[row]);
    const FourEntriesOf<N, P> loaded(products + row * ld + j0, plane);
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
      const int64_t j = j0 + c;
      int32_t residues[N];
      loaded.of_entry(c, residues);
      constexpr bool reduced = std::is_same_v<P, uint8_t>;
      out[row * ld + j] = static_cast<T>(entry_value<N, V, reduced, T>(residues, c_a, scale_b[j]));
    }
  });
}

// The reconstruction from bytes with E consecutive entries per thread (E = 4, 8 or 16: one 4-,
// 8- or 16-byte load per modulus), for --wide: whether wider loads, more bytes in flight per
// thread, bring the kernel nearer its memory floor. Rows of ld entries, ld a multiple of E.
template <int N, int E, int V, typename T>
__global__ void reconstruct_wide(const uint8_t* bytes, int64_t rows, int64_t ld,
                                 const int* scale_a, const int* scale_b, T* out) {
  static_assert(E == 4 || E == 8 || E == 16);
  using Word = std::conditional_t<E == 4, unsigned, std::conditional_t<E == 8, uint2, uint4>>;
  const int64_t plane = rows * ld, groups = ld / E;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < rows * groups;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = t / groups, j0 = (t - row * groups) * E;
    uint32_t words[N][E / 4];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const Word w = __ldg(reinterpret_cast<const Word*>(bytes + i * plane + row * ld + j0));
      std::memcpy(words[i], &w, sizeof(Word));
    }
    const RowScale c_a = row_scale(scale_a[row]);
#pragma unroll
    for (int c = 0; c < E; ++c) {
      int32_t residues[N];
#pragma unroll
      for (int i = 0; i < N; ++i) {
        residues[i] = static_cast<int32_t>(__byte_perm(words[i][c / 4], 0, 0x4440 + c % 4));
      }
      out[row * ld + j0 + c] =
          static_cast<T>(entry_value<N, V, true, T>(residues, c_a, scale_b[j0 + c]));
    }
  }
}

// The reconstruction from bytes (four entries per thread, as the library's kernel) with the next
// item's loads in flight while the current one is rebuilt, for --pipelined: Stages = 0 keeps the
// next item's N words in registers; Stages >= 2 copies them into the thread's own slots of shared
// memory with cp.async (no registers held, Stages - 1 items ahead; a thread reads only its own
// slots, so no barrier). Items (row, group) in the order of for_each_four_columns.
#ifndef PIPELINED_MIN_BLOCKS  // -DPIPELINED_MIN_BLOCKS=4: at most 64 registers
#define PIPELINED_MIN_BLOCKS 1
#endif
template <int N, int Stages, typename T>
__global__ void __launch_bounds__(256, PIPELINED_MIN_BLOCKS)
    reconstruct_pipelined(const uint8_t* bytes, int64_t rows, int64_t ld, const int* scale_a,
                          const int* scale_b, T* out) {
  const int64_t plane = rows * ld, groups = ld / kColumns;
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y;
  const int64_t group_step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first_group = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t row = blockIdx.y * int64_t(blockDim.y) + threadIdx.y, group = first_group;
  if (first_group >= groups) return;
  const auto advance = [&](int64_t& r, int64_t& g) {
    g += group_step;
    if (g >= groups) {
      g = first_group;
      r += row_step;
    }
  };
  const auto rebuild = [&](int64_t r, int64_t g, const uint32_t (&words)[N]) {
    const RowScale c_a = row_scale(scale_a[r]);
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
      int32_t residues[N];
#pragma unroll
      for (int i = 0; i < N; ++i) {
        residues[i] = static_cast<int32_t>(__byte_perm(words[i], 0, 0x4440 + c));
      }
      const int64_t j = kColumns * g + c;
      const double value = entry_value<N, kLibrary, true, T>(residues, c_a, scale_b[j]);
      out[r * ld + j] = static_cast<T>(value);
    }
  };
  const auto word_address = [&](int64_t r, int64_t g, int i) {
    return reinterpret_cast<const unsigned*>(bytes + i * plane + r * ld + kColumns * g);
  };
  if constexpr (Stages == 0) {
    uint32_t words[N];
    if (row < rows) {
#pragma unroll
      for (int i = 0; i < N; ++i) words[i] = __ldg(word_address(row, group, i));
    }
    while (row < rows) {
      int64_t next_row = row, next_group = group;
      advance(next_row, next_group);
      uint32_t next[N];
      if (next_row < rows) {
#pragma unroll
        for (int i = 0; i < N; ++i) next[i] = __ldg(word_address(next_row, next_group, i));
      }
      rebuild(row, group, words);
#pragma unroll
      for (int i = 0; i < N; ++i) words[i] = next[i];
      row = next_row;
      group = next_group;
    }
  } else {
    extern __shared__ uint32_t slots[];  // [Stages][N][blockDim.x * blockDim.y]
    const int threads = blockDim.x * blockDim.y, me = threadIdx.y * blockDim.x + threadIdx.x;
    const auto slot = [&](int stage, int i) { return slots + (stage * N + i) * threads + me; };
    const auto issue = [&](int stage, int64_t r, int64_t g) {
      if (r < rows) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
          const auto to = static_cast<unsigned>(__cvta_generic_to_shared(slot(stage, i)));
          asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(to),
                       "l"(word_address(r, g, i))
                       : "memory");
        }
      }
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    // Items ahead: issue_row/issue_group is the next one to copy, Stages - 1 ahead of row/group.
    int64_t issue_row = row, issue_group = group;
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
      issue(s, issue_row, issue_group);
      advance(issue_row, issue_group);
    }
    for (int stage = 0; row < rows; stage = stage + 1 == Stages ? 0 : stage + 1) {
      issue(stage == 0 ? Stages - 1 : stage - 1, issue_row, issue_group);
      advance(issue_row, issue_group);
      asm volatile("cp.async.wait_group %0;\n" ::"n"(Stages - 1) : "memory");
      uint32_t words[N];
#pragma unroll
      for (int i = 0; i < N; ++i) words[i] = *slot(stage, i);
      rebuild(row, group, words);
      advance(row, group);
    }
  }
}

// The reconstruction from bytes fed by the tensor memory accelerator, for --tma: each block takes
// tiles of kTmaRows rows x 128 columns in turn; one 3-D tensor copy brings a tile's N planes into
// shared memory (Stages slots, each completed on its mbarrier, refilled Stages tiles ahead once
// every warp has read it), so the loads stay in flight whatever the warps compute. Warp w rebuilds
// row w of the tile, its lanes four columns each (one shared word per modulus), and writes the
// row's 128 results through shared memory with one bulk copy (1 KiB, coalesced), waited for only
// before its buffer is written again. Rows of ld entries, ld and rows multiples of 128 and
// kTmaRows.
constexpr int kTmaRows = 8;  // warps per block: rows per tile
constexpr int kTmaColumns = 128;
#ifndef TMA_MIN_BLOCKS  // -DTMA_MIN_BLOCKS=6: at most 40 registers, for more warps per SM
#define TMA_MIN_BLOCKS 1
#endif
#ifndef TMA_DIRECT_STORES  // -DTMA_DIRECT_STORES=1: results stored by the lanes (two 16-byte
#define TMA_DIRECT_STORES 0  // stores each), no shared buffer: more blocks fit
#endif
constexpr int kTmaOutBuffers = TMA_DIRECT_STORES ? 0 : 2;

template <int N, int Stages, typename T>
__global__ void __launch_bounds__(kTmaRows * 32, TMA_MIN_BLOCKS)
    reconstruct_tma(const __grid_constant__ CUtensorMap planes, int64_t rows, int64_t ld,
                    const int* scale_a, const int* scale_b, T* out) {
  constexpr int kStageBytes = N * kTmaRows * kTmaColumns;
  constexpr int kOutBytes = kTmaRows * kTmaColumns * int(sizeof(T));
  extern __shared__ __align__(128) uint8_t shared[];
  uint8_t* slots = shared;                                   // [Stages][N][kTmaRows][128]
  T* results = reinterpret_cast<T*>(shared + Stages * kStageBytes);  // [2][kTmaRows][128]
  __shared__ __align__(8) uint64_t full[Stages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t col_tiles = ld / kTmaColumns;
  const int64_t tiles = rows / kTmaRows * col_tiles;
  const auto load = [&](int slot, int64_t tile) {
    const int row0 = static_cast<int>(tile / col_tiles * kTmaRows);
    const int col0 = static_cast<int>(tile % col_tiles * kTmaColumns);
    copy_box_3d(slots + slot * kStageBytes, planes, col0, row0, 0, &full[slot], kStageBytes);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < Stages; ++s) barrier_init(&full[s]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int s = 0; s < Stages; ++s) {
      const int64_t tile = blockIdx.x + int64_t(s) * gridDim.x;
      if (tile < tiles) load(s, tile);
    }
  }
  int it = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++it) {
    const int slot = it % Stages;
    barrier_wait(&full[slot], (it / Stages) & 1);
    uint32_t words[N];
    const uint8_t* mine = slots + slot * kStageBytes + warp * kTmaColumns + 4 * lane;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      words[i] = *reinterpret_cast<const uint32_t*>(mine + i * kTmaRows * kTmaColumns);
    }
    fence_shared_before_copies();  // the reads complete before the copy that refills the slot
    __syncthreads();  // every warp has read the slot: refill it, Stages tiles ahead
    if (threadIdx.x == 0) {
      const int64_t next = tile + int64_t(Stages) * gridDim.x;
      if (next < tiles) load(slot, next);
    }
    const int64_t row = tile / col_tiles * kTmaRows + warp;
    const int64_t j0 = tile % col_tiles * kTmaColumns + 4 * lane;
    const RowScale c_a = row_scale(scale_a[row]);
    const int4 codes = __ldg(reinterpret_cast<const int4*>(scale_b + j0));
    const int code_b[4] = {codes.x, codes.y, codes.z, codes.w};
    T values[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      int32_t residues[N];
#pragma unroll
      for (int i = 0; i < N; ++i) {
        residues[i] = static_cast<int32_t>(__byte_perm(words[i], 0, 0x4440 + c));
      }
      values[c] = static_cast<T>(
          crt_reconstruct<N, true, kFloat64First>(residues, c_a, row_scale(code_b[c]),
                                                  format_of<T>()));
    }
    if constexpr (TMA_DIRECT_STORES) {
      T* to = out + row * ld + j0;
      if constexpr (sizeof(T) == 8) {
        reinterpret_cast<double2*>(to)[0] = make_double2(values[0], values[1]);
        reinterpret_cast<double2*>(to)[1] = make_double2(values[2], values[3]);
      } else {
        *reinterpret_cast<float4*>(to) = make_float4(values[0], values[1], values[2], values[3]);
      }
      continue;
    }
    // this warp's result buffer of two tiles ago is free once its bulk copy has read it
    if (lane == 0) asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
    __syncwarp();
    T* row_buffer = results + ((it & 1) * kTmaRows + warp) * kTmaColumns;
#pragma unroll
    for (int c = 0; c < 4; ++c) row_buffer[4 * lane + c] = values[c];
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncwarp();
    if (lane == 0) {
      asm volatile(
          "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
          "cp.async.bulk.commit_group;\n" ::"l"(out + row * ld + (j0 - 4 * lane)),
          "r"(shared_address(row_buffer)), "r"(kTmaColumns * int(sizeof(T)))
          : "memory");
    }
  }
  if (lane == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  (void)kOutBytes;
}

// The reduced GEMMs' bytes of the same products: each sum reduced to [0, p_i).
template <int N>
__global__ void reduce_products(const int32_t* products, int64_t plane, uint8_t* bytes) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < plane;
       t += int64_t(gridDim.x) * blockDim.x) {
    for_each_modulus<N>([&](auto index) {
      constexpr int i = decltype(index)::value;
      bytes[i * plane + t] = static_cast<uint8_t>(unsigned_residue<i>(products[i * plane + t]));
    });
  }
}

__global__ void make_scales(int* scales, int64_t count, int base, uint64_t seed) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count;
       t += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed ^ t);
    scales[t] = 16 * (base + static_cast<int>(h % 5)) + static_cast<int>((h >> 8) % 16);
  }
}

// The residues pass (crt.cu's residues_kernel without the row blocks): 8 entries per thread, and
// its memory floor (the same loads and stores, a byte of the input as every residue).
template <int N, bool Compute>
__global__ void residues(const double* a, int64_t rows, int64_t k, const int* scale, int8_t* out) {
  const int64_t groups = k / 8;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const RowScaler c = row_scaler<double>(scale[row]);
    for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups;
         g += int64_t(gridDim.x) * blockDim.x) {
      const int64_t l0 = g * 8;
      double x[8];
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const double2 d = __ldg(reinterpret_cast<const double2*>(a + row * k + l0) + v);
        x[2 * v] = d.x;
        x[2 * v + 1] = d.y;
      }
      __align__(8) int8_t res[N][8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if constexpr (Compute) {
          residues_of<N, false>(x[e], c, [&](int i, int r) { res[i][e] = static_cast<int8_t>(r); });
        } else {
          const uint64_t b = bits_of(x[e]);
#pragma unroll
          for (int i = 0; i < N; ++i) res[i][e] = static_cast<int8_t>(b >> (4 * i));
        }
      }
#pragma unroll
      for (int i = 0; i < N; ++i) {
        *reinterpret_cast<uint2*>(out + (i * rows + row) * k + l0) =
            *reinterpret_cast<const uint2*>(res[i]);
      }
    }
  }
}

__global__ void make_entries(double* a, int64_t count, uint64_t seed) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count;
       t += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed ^ t);
    // (u - 0.5) e^(0.5 z)-like spread: a random significand times 2^(-3 .. 3)
    a[t] = (static_cast<double>(h >> 11) * 0x1p-53 - 0.5) * pow2(static_cast<int>(h % 7) - 3);
  }
}

// ---- timing ---------------------------------------------------------------------------------

bool g_wide = false;  // --wide: also the reconstruction from bytes with more entries per thread
bool g_pipelined = false;  // --pipelined: also the reconstruction from bytes with loads ahead
bool g_tma = false;  // --tma: also the reconstruction from bytes fed by the tensor memory accelerator
int g_repeats = 7;  // 1 with --profile: no warm-up either
bool g_check = true;  // the host's bits on sampled entries (--bytes: on the first round only)

dim3 grid_2d(int64_t rows, int64_t per_row, int threads, int sms) {
  const int64_t x =
      std::max<int64_t>(1, std::min<int64_t>((per_row + threads - 1) / threads, sms * 32));
  const int64_t cap = std::min<int64_t>((rows * per_row + threads - 1) / threads, sms * 32);
  const int64_t y = std::clamp<int64_t>(cap / x, 1, std::min<int64_t>(rows, 65535));
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

// reduced: the kernel reads the products as the reduced GEMMs' bytes.
template <int N, typename T, bool reduced = false>
void run_reconstruct(int64_t n, int sms, const char* label) {
  const int64_t plane = n * n;
  int32_t* products;
  uint8_t* bytes = nullptr;
  int *scale_a, *scale_b;
  T* out[2];
  CHECK(cudaMalloc(&products, N * plane * sizeof(int32_t)));
  CHECK(cudaMalloc(&scale_a, n * sizeof(int)));
  CHECK(cudaMalloc(&scale_b, n * sizeof(int)));
  for (auto& o : out) CHECK(cudaMalloc(&o, plane * sizeof(T)));
  // |X| < P/2 - P 2^-20: bits up to floor(log2 P) - 2
  int log2p = 0;
  {
    const Limbs l = product_limbs(N, -1);
    for (int w = 3; w >= 0; --w) {
      if (l.w[w]) {
        log2p = 32 * w + highest_set_bit(l.w[w]);
        break;
      }
    }
  }
  make_products<N><<<sms * 32, 256>>>(products, plane, log2p - 1, 12345);
  // Scale exponents that keep the quotients inside the output format's range.
  const int base = std::is_same_v<T, double> ? -60 : -30;
  make_scales<<<sms * 4, 256>>>(scale_a, n, base, 1);
  make_scales<<<sms * 4, 256>>>(scale_b, n, base, 2);
  CHECK(cudaDeviceSynchronize());
  if (reduced) {
    CHECK(cudaMalloc(&bytes, N * plane));
    reduce_products<N><<<sms * 32, 256>>>(products, plane, bytes);
    CHECK(cudaDeviceSynchronize());
  }
  const dim3 grid = grid_2d(n, n / kColumns, 256, sms);
  const auto launch = [&](auto variant, T* o) {
    constexpr int V = decltype(variant)::value;
    if (reduced) {
      reconstruct<N, V, T><<<grid, 256>>>(bytes, n, n, scale_a, scale_b, o);
    } else {
      reconstruct<N, V, T><<<grid, 256>>>(products, n, n, scale_a, scale_b, o);
    }
  };
  const float library =
      median_ms([&] { launch(std::integral_constant<int, kLibrary>{}, out[0]); }, g_repeats);
  const float floor =
      median_ms([&] { launch(std::integral_constant<int, kLoadsOnly>{}, out[1]); }, g_repeats);
  CHECK(cudaGetLastError());
  // The host's bits for a sample of entries (every 61st).
  int64_t checked = 0, differing = 0, zeros = 0;
  if (g_check) {
    std::vector<T> device(plane);
    std::vector<int32_t> products_host(N * plane);
    std::vector<int> scales_a(n), scales_b(n);
    CHECK(cudaMemcpy(device.data(), out[0], plane * sizeof(T), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(products_host.data(), products, N * plane * sizeof(int32_t),
                     cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(scales_a.data(), scale_a, n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(scales_b.data(), scale_b, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int64_t t = 0; t < plane; t += 61) {
      int32_t residues[N];
      for (int m = 0; m < N; ++m) residues[m] = products_host[m * plane + t];
      const T host = static_cast<T>(crt_reconstruct<N, false, false>(
          residues, row_scale(scales_a[t / n]), row_scale(scales_b[t % n]), format_of<T>()));
      differing += std::memcmp(&host, &device[t], sizeof(T)) != 0;
      zeros += host == 0;
      ++checked;
    }
  }
  if (reduced && g_wide) {
    std::vector<T> reference(plane), wide(plane);
    CHECK(cudaMemcpy(reference.data(), out[0], plane * sizeof(T), cudaMemcpyDeviceToHost));
    const auto time_wide = [&](auto entries) {
      constexpr int E = decltype(entries)::value;
      const int blocks = sms * 16;
      const float ms = median_ms([&] {
        reconstruct_wide<N, E, kLibrary, T><<<blocks, 256>>>(bytes, n, n, scale_a, scale_b, out[1]);
      }, g_repeats);
      CHECK(cudaMemcpy(wide.data(), out[1], plane * sizeof(T), cudaMemcpyDeviceToHost));
      const bool same = std::memcmp(wide.data(), reference.data(), plane * sizeof(T)) == 0;
      const float loads = median_ms([&] {
        reconstruct_wide<N, E, kLoadsOnly, T><<<blocks, 256>>>(bytes, n, n, scale_a, scale_b,
                                                                out[1]);
      }, g_repeats);
      std::printf("  %2d entries per thread: %.3f ms, loads and stores only %.3f ms, %s\n", E, ms,
                  loads, same ? "the same bits" : "OTHER BITS");
    };
    time_wide(std::integral_constant<int, 4>{});
    time_wide(std::integral_constant<int, 8>{});
    time_wide(std::integral_constant<int, 16>{});
  }
  if (reduced && g_pipelined) {  // (instantiated for every N; run for the reduced ones)
    std::vector<T> reference(plane), other(plane);
    CHECK(cudaMemcpy(reference.data(), out[0], plane * sizeof(T), cudaMemcpyDeviceToHost));
    const auto time_pipelined = [&](auto stages, bool resident) {
      constexpr int S = decltype(stages)::value;
      const auto kernel = reconstruct_pipelined<N, S, T>;
      const size_t shared = S * N * 256 * sizeof(uint32_t);
      if (shared > 48 * 1024) {
        CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(shared)));
      }
      int per_sm = 0;
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, shared));
      // resident: as many blocks as stay resident, so every thread loops over more items
      dim3 g = grid;
      if (resident) g.y = std::max<unsigned>(1, per_sm * sms / g.x);
      CHECK(cudaMemset(out[1], 0, plane * sizeof(T)));
      const float ms = median_ms([&] {
        kernel<<<g, 256, shared>>>(bytes, n, n, scale_a, scale_b, out[1]);
      }, g_repeats);
      CHECK(cudaGetLastError());
      CHECK(cudaMemcpy(other.data(), out[1], plane * sizeof(T), cudaMemcpyDeviceToHost));
      const bool same = std::memcmp(other.data(), reference.data(), plane * sizeof(T)) == 0;
      std::printf("  %s, %s grid (%u x %u blocks, %d per SM): %.3f ms, %s\n",
                  S == 0   ? "next item in registers"
                  : S == 2 ? "cp.async, 2 stages"
                           : "cp.async, 3 stages",
                  resident ? "resident" : "library's", g.x, g.y, per_sm, ms,
                  same ? "the same bits" : "OTHER BITS");
    };
    for (bool resident : {false, true}) {
      time_pipelined(std::integral_constant<int, 0>{}, resident);
      time_pipelined(std::integral_constant<int, 2>{}, resident);
      time_pipelined(std::integral_constant<int, 3>{}, resident);
    }
  }
  if (reduced && g_tma) {  // (instantiated for every N; run for the reduced ones)
    std::vector<T> reference(plane), other(plane);
    CHECK(cudaMemcpy(reference.data(), out[0], plane * sizeof(T), cudaMemcpyDeviceToHost));
    CUtensorMap map;
    const uint64_t dims[3] = {uint64_t(n), uint64_t(n), uint64_t(N)};
    const uint64_t strides[2] = {uint64_t(n), uint64_t(plane)};
    const uint32_t box[3] = {kTmaColumns, kTmaRows, N};
    if (!ozaki::cuda::encode_byte_map(&map, bytes, dims, strides, box)) {
      std::printf("the tensor map of the planes could not be made\n");
      std::exit(1);
    }
    const auto time_tma = [&](auto stages) {
      constexpr int S = decltype(stages)::value;
      const auto kernel = reconstruct_tma<N, S, T>;
      const int shared =
          S * N * kTmaRows * kTmaColumns + kTmaOutBuffers * kTmaRows * kTmaColumns * int(sizeof(T));
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
      int per_sm = 0;
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kTmaRows * 32, shared));
      const int64_t tiles = n / kTmaRows * (n / kTmaColumns);
      const int blocks = static_cast<int>(std::min<int64_t>(tiles, int64_t(per_sm) * sms));
      CHECK(cudaMemset(out[1], 0, plane * sizeof(T)));
      const float ms = median_ms([&] {
        kernel<<<blocks, kTmaRows * 32, shared>>>(map, n, n, scale_a, scale_b, out[1]);
      }, g_repeats);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(other.data(), out[1], plane * sizeof(T), cudaMemcpyDeviceToHost));
      const bool same = std::memcmp(other.data(), reference.data(), plane * sizeof(T)) == 0;
      std::printf("  fed by TMA, %d slots, %s (%d blocks, %d per SM, %d bytes of shared memory): "
                  "%.3f ms, %s\n", S, TMA_DIRECT_STORES ? "lanes' stores" : "bulk stores", blocks,
                  per_sm, shared, ms,
                  same ? "the same bits" : "OTHER BITS");
    };
    time_tma(std::integral_constant<int, 2>{});
    time_tma(std::integral_constant<int, 3>{});
    time_tma(std::integral_constant<int, 4>{});
  }
  const double moved = double(plane) * (N * (reduced ? 1 : 4) + sizeof(T));
  std::printf("reconstruct %s%s %5lld^2 N=%2d: %.3f ms (%.2f TB/s) | "
              "loads and stores only %.3f ms (%.2f TB/s) | "
              "host bits differ in %lld of %lld sampled entries (%lld zeros)\n",
              label, reduced ? " from bytes" : "", (long long)n, N, library,
              moved / library * 1e-9, floor, moved / floor * 1e-9, (long long)differing,
              (long long)checked, (long long)zeros);
  CHECK(cudaFree(products));
  if (bytes != nullptr) CHECK(cudaFree(bytes));
  CHECK(cudaFree(scale_a));
  CHECK(cudaFree(scale_b));
  for (auto& o : out) CHECK(cudaFree(o));
}

template <int N>
void run_residues(int64_t n, int sms) {
  double* a;
  int8_t* out;
  int* scale;
  CHECK(cudaMalloc(&a, n * n * sizeof(double)));
  CHECK(cudaMalloc(&out, N * n * n));
  CHECK(cudaMalloc(&scale, n * sizeof(int)));
  make_entries<<<sms * 32, 256>>>(a, n * n, 7);
  make_scales<<<sms * 4, 256>>>(scale, n, 50 - 2, 3);
  CHECK(cudaDeviceSynchronize());
  const dim3 grid = grid_2d(n, n / 8, 256, sms);
  const float t0 = median_ms([&] { residues<N, true><<<grid, 256>>>(a, n, n, scale, out); }, g_repeats);
  const float t1 = median_ms([&] { residues<N, false><<<grid, 256>>>(a, n, n, scale, out); }, g_repeats);
  CHECK(cudaGetLastError());
  const double bytes = double(n) * n * (8 + N);
  std::printf("residues    float64 %5lld^2 N=%2d: %.3f ms (%.2f TB/s) | "
              "loads and stores only %.3f ms (%.2f TB/s)\n",
              (long long)n, N, t0, bytes / t0 * 1e-9, t1, bytes / t1 * 1e-9);
  CHECK(cudaFree(a));
  CHECK(cudaFree(out));
  CHECK(cudaFree(scale));
}

int main(int argc, char** argv) {
  int sms;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc > 1 && std::string(argv[1]) == "--bytes") {  // the reduced path's reconstruction alone
    for (int repeat = 0; repeat < 3; ++repeat) {
      run_reconstruct<15, double, true>(16384, sms, "float64");
      run_reconstruct<16, double, true>(16384, sms, "float64");
      run_reconstruct<8, float, true>(16384, sms, "float32");
      g_check = false;
    }
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "--wide") {
    g_wide = true;
    g_check = false;
    for (int repeat = 0; repeat < 2; ++repeat) {
      run_reconstruct<15, double, true>(16384, sms, "float64");
      run_reconstruct<8, float, true>(16384, sms, "float32");
    }
    return 0;
  }
  // two rounds of the reconstruction from bytes with one more variant timed (and 4096^2 too)
  const auto variant_rounds = [&](bool* variant, bool with_4096) {
    *variant = true;
    g_check = false;
    for (int repeat = 0; repeat < 2; ++repeat) {
      run_reconstruct<15, double, true>(16384, sms, "float64");
      run_reconstruct<16, double, true>(16384, sms, "float64");
      run_reconstruct<8, float, true>(16384, sms, "float32");
      if (with_4096) run_reconstruct<15, double, true>(4096, sms, "float64");
    }
    return 0;
  };
  if (argc > 1 && std::string(argv[1]) == "--tma") return variant_rounds(&g_tma, false);
  if (argc > 1 && std::string(argv[1]) == "--pipelined") return variant_rounds(&g_pipelined, true);
  if (argc > 1 && std::string(argv[1]) == "--profile") {  // one launch per kernel, for ncu
    g_repeats = 1;
    run_reconstruct<15, double>(8192, sms, "float64");
    run_reconstruct<15, double, true>(8192, sms, "float64");
    run_reconstruct<7, float>(8192, sms, "float32");
    run_residues<15>(8192, sms);
    return 0;
  }
  for (int64_t n : {8192, 16384}) {
    run_reconstruct<15, double>(n, sms, "float64");
    run_reconstruct<15, double, true>(n, sms, "float64");
    run_reconstruct<16, double, true>(n, sms, "float64");
    run_reconstruct<8, float, true>(n, sms, "float32");
    run_reconstruct<16, double>(n, sms, "float64");
    run_reconstruct<7, float>(n, sms, "float32");
    run_reconstruct<8, float>(n, sms, "float32");
    run_residues<15>(n, sms);
    run_residues<7>(n, sms);
  }
  run_reconstruct<3, double>(4096, sms, "float64");
  run_reconstruct<1, float>(4096, sms, "float32");
  return 0;
}
