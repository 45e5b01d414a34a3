// The reduced residue GEMM (csrc/cuda/reduced_kernel.cuh) alone, for one tile, cluster and
// schedule chosen at build time, over the shapes given on the command line and the tile
// scheduler's swizzles: milliseconds, INT8 TOPS and the rate at which a's bytes are read per
// shape (beside one plain read of them, the floor of products with few columns), sampled entries
// checked against a plain INT32 dot product mod p, and a hash of every byte written (equal across
// builds when their bits are). reduced_tiles.sh builds and runs a set of them.
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
//        -I<cutlass include> -DTILE_M=128 -DTILE_N=256 -DTILE_K=128 -DCLUSTER_M=1 -DCLUSTER_N=2
//        -DSCHEDULE=0 (0 cooperative, 1 ping-pong) [-DDISCARD=1: the epilogue stores nothing;
//        2 to 9: parts of it, see PartialEpilogue] [-DOVERLAP=1: the kernel of
//        reduced_overlap.cuh instead (TILE_M 128, CLUSTER_N 1); -DPARTS=0 to 2: its parts, see
//        OverlapKernel] [-DRESIDENT_BLOCKS=b -DSTAGES=n: the kernel of reduced_resident_blocks.cuh
//        instead (TILE_M 128), b blocks per multiprocessor, n k stages each]
//   reduced_tiles M,N,K,PLANES ...
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../../csrc/cuda/reduced_kernel.cuh"
#include "reduced_overlap.cuh"
#include "reduced_resident_blocks.cuh"
#include "check.cuh"

using namespace ozaki::cuda;

#ifndef DISCARD
#define DISCARD 0
#endif
#ifndef OVERLAP
#define OVERLAP 0
#endif
#ifndef PARTS
#define PARTS 3
#endif
#ifndef RESIDENT_BLOCKS
#define RESIDENT_BLOCKS 0
#endif

// The kernel without its stores: what the main loop alone costs. The sums still feed a store
// that cannot happen (no thread has that index), so the MMAs are kept.
// -DEXTRA_SHARED_KB=n: this epilogue holds n KiB more shared memory, which the main loop's stages
// then go without (what a kernel that stages its INT32 sums for other warps would leave it).
#ifndef EXTRA_SHARED_KB
#define EXTRA_SHARED_KB 0
#endif
struct DiscardingEpilogue : reduced::ReducedResidueEpilogue<TILE_M, TILE_N> {
  using Base = reduced::ReducedResidueEpilogue<TILE_M, TILE_N>;
  using Base::Base;
  struct SharedStorage {
    alignas(16) uint8_t bytes[sizeof(typename Base::SharedStorage) + EXTRA_SHARED_KB * 1024];
  };
  using TensorStorage = SharedStorage;
  template <class ProblemShape, class TileShape, class TileCoord, class Engine, class Layout,
            class TiledMma, class Residue>
  CUTLASS_DEVICE void operator()(ProblemShape, TileShape, TileCoord coord,
                                 const cute::Tensor<Engine, Layout>& accumulators, TiledMma,
                                 Residue, int thread_idx, char*) {
    uint32_t folded = 0;
    for (int i = 0; i < cute::size(accumulators); ++i) folded ^= uint32_t(accumulators(i));
    if (folded == 0x9e3779b9u && thread_idx == 1000) this->params_.out[0] = uint8_t(cute::get<3>(coord));
  }
};

// Parts of the library's epilogue as it was at 5164ad7 (each row's bytes packed into 4-byte words
// through a lane exchange; the library now stores two bytes at a time), to see what each costs
// (cooperative schedule, the short division; unlike DiscardingEpilogue's, their folds are kept).
// Bits of Parts:
// 1 reduce mod p (else the low bytes), 2 pack and exchange with the neighbouring lane, 4 store
// the words into the staging buffer, 8 the barriers and the proxy fence around it, 16 the bulk
// copies out, 32 with 4 and 16: each warp stages and copies out its own 16 rows, synchronized
// within the warp only. Whatever is not stored is folded into a store that cannot happen, as
// above. DISCARD=2: 1; 3: 1+2+4+8; 4: 2+4+8+16; 5: 1+2; 6: 1+2+4; 7: 1+8; 8: 1+2+4+16+32;
// 9: 2+4.
template <int Parts>
struct PartialEpilogue : reduced::ReducedResidueEpilogue<TILE_M, TILE_N> {
  using Base = reduced::ReducedResidueEpilogue<TILE_M, TILE_N>;
  using Base::Base;
  static constexpr bool kReduce = Parts & 1, kPack = Parts & 2, kStage = Parts & 4,
                        kBarriers = Parts & 8, kStore = Parts & 16, kWarpRows = Parts & 32;
  template <class ProblemShape, class TileShape, class TileCoord, class Engine, class Layout,
            class TiledMma, class Residue>
  CUTLASS_DEVICE void operator()(ProblemShape problem, TileShape, TileCoord coord,
                                 const cute::Tensor<Engine, Layout>& accumulators,
                                 TiledMma tiled_mma, Residue, int thread_idx, char* shared) {
    using namespace cute;
    const auto [m_coord, n_coord, k_coord, l_coord] = coord;
    const ModulusDivisor divisor =
        this->params_.divisors[static_cast<int>(l_coord) % this->params_.moduli];
    constexpr int kSums = decltype(size(accumulators))::value;
    constexpr int kThreads = decltype(size(tiled_mma))::value;
    uint32_t residues[kSums];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kSums; ++i) {
      residues[i] = kReduce ? divisor.template reduce<true>(accumulators(i))
                            : (uint32_t(accumulators(i)) & 255u);
    }
    uint8_t* staged = reinterpret_cast<typename Base::SharedStorage*>(shared)->bytes;
    constexpr int kPitch = Base::kPitch;
    Tensor tile_coords = tiled_mma.get_thread_slice(thread_idx).partition_C(
        make_identity_tensor(make_shape(Int<TILE_M>{}, Int<TILE_N>{})));
    if constexpr (kBarriers) {
      cute::tma_store_wait<0>();
      cutlass::arch::NamedBarrier::sync(kThreads, 0);
    }
    if constexpr (kWarpRows) {
      cute::tma_store_wait<0>();
      __syncwarp();
    }
    uint32_t folded = 0;
    const bool odd_lane = (threadIdx.x % 32) % 2 == 1;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kSums; i += 4) {
      const auto at = tile_coords(i);
      const uint32_t* bytes = residues + i;
      if constexpr (kPack) {
        const uint32_t row_r = __byte_perm(bytes[0], bytes[1], 0x1140);
        const uint32_t row_r8 = __byte_perm(bytes[2], bytes[3], 0x1140);
        const uint32_t other = __shfl_xor_sync(0xffffffffu, odd_lane ? row_r : row_r8, 1);
        const int row = get<0>(at) + (odd_lane ? 8 : 0);
        const int col = get<1>(at) - (odd_lane ? 2 : 0);
        const uint32_t word =
            odd_lane ? __byte_perm(other, row_r8, 0x5410) : __byte_perm(row_r, other, 0x5410);
        if constexpr (kStage) {
          *reinterpret_cast<uint32_t*>(staged + row * kPitch + col) = word;
        } else {
          folded ^= word;
        }
      } else {
        folded ^= bytes[0] ^ bytes[1] ^ bytes[2] ^ bytes[3];
      }
    }
    if constexpr (kBarriers) {
      cutlass::arch::fence_view_async_shared();
      cutlass::arch::NamedBarrier::sync(kThreads, 0);
    }
    if constexpr (kWarpRows) {
      cutlass::arch::fence_view_async_shared();
      __syncwarp();
    }
    // a store that depends on every folded value and that the compiler cannot rule out (a
    // thread index past the block's would be: then the whole epilogue is dead code)
    if (folded == static_cast<uint32_t>(this->params_.out_plane) + 0x9e3779b9u) {
      this->params_.out[0] = uint8_t(l_coord);
    }
    const int64_t row0 = int64_t(m_coord) * TILE_M, col0 = int64_t(n_coord) * TILE_N;
    uint8_t* out =
        this->params_.out + l_coord * this->params_.out_plane + row0 * this->params_.ld + col0;
    const bool whole =
        row0 + TILE_M <= int64_t(get<0>(problem)) && col0 + TILE_N <= int64_t(get<1>(problem));
    if constexpr (kWarpRows) {
      // lane 0 holds the warp's first row (its even lanes rows r, odd lanes r + 8)
      const int first = __shfl_sync(0xffffffffu, int(get<0>(tile_coords(0))), 0);
      const int lane = threadIdx.x % 32;
      if (whole && lane < 16) {
        cute::SM90_BULK_COPY_S2G::copy(staged + (first + lane) * kPitch,
                                       out + (first + lane) * this->params_.ld, TILE_N);
        cute::tma_store_arrive();
      }
      return;
    }
    if (kStore && whole && thread_idx < TILE_M) {
      cute::SM90_BULK_COPY_S2G::copy(staged + thread_idx * kPitch,
                                     out + thread_idx * this->params_.ld, TILE_N);
      cute::tma_store_arrive();
    }
  }
};

using Tile = cute::Shape<cute::Int<TILE_M>, cute::Int<TILE_N>, cute::Int<TILE_K>>;
using Cluster = cute::Shape<cute::Int<CLUSTER_M>, cute::Int<CLUSTER_N>, cute::_1>;
using Schedule = std::conditional_t<SCHEDULE == 0, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                    cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
using Config = reduced::ReducedKernel<
    Tile, Cluster, Schedule,
    std::conditional_t<
        DISCARD == 1, DiscardingEpilogue,
        std::conditional_t<DISCARD == 0, reduced::ReducedResidueEpilogue<TILE_M, TILE_N>,
                           PartialEpilogue<(DISCARD == 2   ? 1
                                            : DISCARD == 3 ? 1 + 2 + 4 + 8
                                            : DISCARD == 4 ? 2 + 4 + 8 + 16
                                            : DISCARD == 5 ? 1 + 2
                                            : DISCARD == 6 ? 1 + 2 + 4
                                            : DISCARD == 7 ? 1 + 8
                                            : DISCARD == 8 ? 1 + 2 + 4 + 16 + 32
                                                           : 2 + 4)>>>>;
#if OVERLAP
static_assert(TILE_M == 128 && CLUSTER_N == 1 && DISCARD == 0);
using Overlap = reduced::OverlapKernel<TILE_N, TILE_K, CLUSTER_M, 3, PARTS>;
#endif
#if RESIDENT_BLOCKS
static_assert(TILE_M == 128 && DISCARD == 0 && OVERLAP == 0);
using Resident =
    reduced::ResidentBlocksKernel<TILE_N, TILE_K, STAGES, CLUSTER_M, CLUSTER_N, RESIDENT_BLOCKS>;
#endif

__global__ void fill(int8_t* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed ^ unsigned(i >> 32) * 40503u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = int8_t(int(h % 255u) - 127);
  }
}

// Sum over every byte of planes x rows x cols (row stride ld) of byte * (a hash of its index).
__global__ void hash_bytes(const uint8_t* out, int64_t planes, int64_t rows, int64_t cols,
                           int64_t ld, unsigned long long* hash) {
  unsigned long long local = 0;
  const int64_t total = planes * rows * cols;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = t % cols, r = (t / cols) % rows, l = t / (rows * cols);
    const unsigned long long index = uint64_t(t) * 0x9e3779b97f4a7c15ull;
    local += (index >> 20) * out[(l * rows + r) * ld + c];
  }
  atomicAdd(hash, local);
}

// Entries (l, r, c) picked by a hash: the INT32 dot product mod p against the byte written.
__global__ void check_samples(const int8_t* a, const int8_t* b, const uint8_t* out,
                              ReducedGemm g, int samples, int* wrong) {
  for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < samples; s += gridDim.x * blockDim.x) {
    unsigned h = unsigned(s) * 2654435761u + 12345u;
    h ^= h >> 16;
    h *= 2246822519u;
    const int64_t l = h % g.planes, r = (h / 7) % g.rows, c = (h / 13) % g.cols;
    const int8_t* x = a + l * g.a_plane + r * g.k_stride;
    const int8_t* y = b + l * g.b_plane + c * g.k_stride;
    int sum = 0;
    for (int64_t i = 0; i < g.k_stride; ++i) sum += int(x[i]) * int(y[i]);
    const int p = int(g.divisors[l % g.moduli].modulus);
    const int expected = ((sum % p) + p) % p;
    const int got = out[l * g.out_plane + r * g.ld + c];
    if (got != expected && atomicAdd(wrong, 1) < 4) {
      printf("  wrong: plane %lld row %lld col %lld p %d: %d, expected %d (sum %d)\n",
             (long long)l, (long long)r, (long long)c, p, got, expected, sum);
    }
  }
}

// The 16-byte vectors p[0, vectors) read once each, folded into one word that feeds a store no
// thread makes: the memory floor of a GEMM that reads a's residues once.
__global__ void read_bytes_once(const uint4* p, size_t vectors, unsigned* sink) {
  unsigned folded = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < vectors;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(p + i);
    folded ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (folded == 0x9e3779b9u && threadIdx.x == 1000) *sink = folded;
}

// Milliseconds of read_bytes_once over a's bytes (median of 11): the floor printed beside each
// shape.
float read_floor_ms(const int8_t* a, size_t bytes, int sms, unsigned* sink) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int r = -2; r < 11; ++r) {
    CHECK(cudaEventRecord(start));
    read_bytes_once<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(a), bytes / 16, sink);
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r >= 0) times.push_back(ms);
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

const char* const kDiscardNames[] = {"", " discard", " reduce only", " reduce and stage",
                                     " stage and store", " reduce and exchange",
                                     " reduce, exchange, shared stores", " reduce and barriers",
                                     " warp-local staging and copies",
                                     " exchange and shared stores of low bytes"};

int main(int argc, char** argv) {
  // The moduli of the planes in turn: REDUCED_MODULI (comma-separated) or 15 of scheme II's.
  std::vector<int> moduli = {256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197};
  if (const char* given = std::getenv("REDUCED_MODULI")) {
    moduli.clear();
    for (const char* at = given; *at;) {
      moduli.push_back(std::atoi(at));
      while (*at && *at != ',') ++at;
      if (*at == ',') ++at;
    }
  }
  int device = 0, sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const cutlass::KernelHardwareInfo hardware{device, sms};
  // LONG_SUMS=1: the reduction for any inner dimension up to 2^17, as above 65535
  const char* long_given = std::getenv("LONG_SUMS");
  const bool long_sums = long_given != nullptr && std::atoi(long_given) == 1;
#if RESIDENT_BLOCKS
  printf("config tile %dx%dx%d cluster %dx%d one warpgroup per block, %d blocks per "
         "multiprocessor%s (%d stages, %d KiB of shared memory per block)\n", TILE_M, TILE_N,
         TILE_K, CLUSTER_M, CLUSTER_N, RESIDENT_BLOCKS, long_sums ? " long sums" : "", STAGES,
         Resident::kSharedBytes / 1024);
#elif OVERLAP
  printf("config tile %dx%dx%d cluster %dx%d overlapped epilogue, parts %d, 3 chunk buffers%s "
         "(%d stages, %d KiB of shared memory for the epilogue, %d in all)\n", TILE_M, TILE_N,
         TILE_K, CLUSTER_M, CLUSTER_N, PARTS, long_sums ? " long sums" : "",
         int(Overlap::Mainloop::DispatchPolicy::Stages),
         int(sizeof(typename Overlap::EpilogueStorage) / 1024), Overlap::kSharedBytes / 1024);
#else
  printf("config tile %dx%dx%d cluster %dx%d %s%s%s (%d stages, %d KiB of shared memory for the "
         "epilogue)\n", TILE_M, TILE_N, TILE_K, CLUSTER_M, CLUSTER_N,
         SCHEDULE == 0 ? "cooperative" : "pingpong", kDiscardNames[DISCARD],
         long_sums ? " long sums" : "", int(Config::Mainloop::DispatchPolicy::Stages),
         int(sizeof(typename Config::Epilogue::SharedStorage) / 1024));
#endif
  for (int argi = 1; argi < argc; ++argi) {
    long long m, n, k, planes;
    if (sscanf(argv[argi], "%lld,%lld,%lld,%lld", &m, &n, &k, &planes) != 4) {
      printf("shape %s: expected M,N,K,PLANES\n", argv[argi]);
      return 2;
    }
    ReducedGemm g{};
    g.rows = m;
    g.cols = n;
    g.k_stride = k;
    g.planes = planes;
    g.moduli = std::min<int>(int(moduli.size()), int(planes));
    for (int i = 0; i < g.moduli; ++i) {
      g.divisors[i] = ModulusDivisor::of(moduli[i], long_sums ? kShortSumInner + 1 : k);
    }
    // as the library pads reduced rows (16 bytes: TMA stores), or REDUCED_LD_ALIGN (4: the
    // epilogue's row copies and words)
    const char* align_given = std::getenv("REDUCED_LD_ALIGN");
    const int64_t align = align_given != nullptr ? std::atoi(align_given) : 16;
    g.ld = (n + align - 1) / align * align;
    g.a_plane = m * k;
    g.b_plane = n * k;
    g.out_plane = m * g.ld;
    int8_t *a, *b;
    uint8_t* out;
    CHECK(cudaMalloc(&a, size_t(planes * m * k)));
    CHECK(cudaMalloc(&b, size_t(planes * n * k)));
    CHECK(cudaMalloc(&out, size_t(planes * g.out_plane)));
    fill<<<1024, 256>>>(a, size_t(planes * m * k), 1u);
    fill<<<1024, 256>>>(b, size_t(planes * n * k), 2u);
    g.a = a;
    g.b = b;
    g.out = out;
    unsigned long long* hash;
    int* wrong;
    CHECK(cudaMalloc(&hash, sizeof(*hash)));
    CHECK(cudaMalloc(&wrong, sizeof(*wrong)));
    const double ops = 2.0 * m * n * k * planes;
    const double a_bytes = double(m) * k * planes;
    unsigned* sink;
    CHECK(cudaMalloc(&sink, sizeof(*sink)));
    const float floor_ms = read_floor_ms(a, size_t(planes * m * k) / 16 * 16, sms, sink);
    printf("%lldx%lldx%lld planes %lld: one read of a's bytes %.3f ms (%.0f GB/s)\n", m, n, k,
           planes, floor_ms, a_bytes / floor_ms / 1e6);
    CHECK(cudaFree(sink));
    // (the kernel of one block per tile has no tile scheduler to swizzle)
    const std::vector<int> swizzles =
        RESIDENT_BLOCKS ? std::vector<int>{1} : std::vector<int>{1, 2, 4, 8};
    for (int swizzle : swizzles) {
#if RESIDENT_BLOCKS
      if (!Resident::can_implement(g)) {
        printf("%lldx%lldx%lld planes %lld: cannot implement\n", m, n, k, planes);
        break;
      }
      void* workspace = nullptr;
      CHECK(cudaMemset(out, 0, size_t(planes * g.out_plane)));
      auto run = [&] {
        return reduced::launch_resident_blocks<Resident>(g, nullptr) == cudaSuccess;
      };
#elif OVERLAP
      if (!Overlap::can_implement(g)) {
        printf("%lldx%lldx%lld planes %lld: cannot implement\n", m, n, k, planes);
        break;
      }
      void* workspace = nullptr;
      CHECK(cudaMemset(out, 0, size_t(planes * g.out_plane)));
      auto run = [&] {
        return reduced::launch_overlap<Overlap>(g, hardware, swizzle, nullptr) == cudaSuccess;
      };
#else
      auto arguments = Config::arguments(g, hardware, swizzle);
      typename Config::Gemm op;
      if (op.can_implement(arguments) != cutlass::Status::kSuccess) {
        printf("%lldx%lldx%lld planes %lld: cannot implement\n", m, n, k, planes);
        break;
      }
      void* workspace = nullptr;
      const size_t workspace_bytes = Config::Gemm::get_workspace_size(arguments);
      if (workspace_bytes) CHECK(cudaMalloc(&workspace, workspace_bytes));
      CHECK(cudaMemset(out, 0, size_t(planes * g.out_plane)));
      if (op.initialize(arguments, workspace) != cutlass::Status::kSuccess) {
        printf("initialize failed\n");
        return 1;
      }
      auto run = [&] { return op.run() == cutlass::Status::kSuccess; };
#endif
      const int reps = ops > 2e13 ? 3 : (ops > 1e12 ? 10 : 50);
      cudaEvent_t start, stop;
      CHECK(cudaEventCreate(&start));
      CHECK(cudaEventCreate(&stop));
      std::vector<float> times;
      for (int r = -2; r < reps; ++r) {
        CHECK(cudaEventRecord(start));
        if (!run()) {
          printf("run failed\n");
          return 1;
        }
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (r >= 0) times.push_back(ms);
      }
      CHECK(cudaGetLastError());
      std::sort(times.begin(), times.end());
      const float ms = times[times.size() / 2];
      unsigned long long hash_value = 0;
      int wrong_count = -1;
      // the configurations that store every byte
      if ((DISCARD == 0 || DISCARD == 8) && (OVERLAP == 0 || PARTS == 3)) {
        CHECK(cudaMemset(hash, 0, sizeof(*hash)));
        CHECK(cudaMemset(wrong, 0, sizeof(*wrong)));
        hash_bytes<<<1024, 256>>>(out, planes, m, n, g.ld, hash);
        check_samples<<<64, 128>>>(a, b, out, g, 8192, wrong);
        CHECK(cudaMemcpy(&hash_value, hash, sizeof(hash_value), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(&wrong_count, wrong, sizeof(wrong_count), cudaMemcpyDeviceToHost));
      }
      printf("%lldx%lldx%lld planes %lld swizzle %d: %.3f ms %.0f TOPS, a read at %.0f GB/s, "
             "wrong %d hash %016llx\n", m, n, k, planes, swizzle, ms, ops / ms / 1e9,
             a_bytes / ms / 1e6, wrong_count, hash_value);
      fflush(stdout);
      if (workspace) CHECK(cudaFree(workspace));
      CHECK(cudaEventDestroy(start));
      CHECK(cudaEventDestroy(stop));
    }
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(out));
    CHECK(cudaFree(hash));
    CHECK(cudaFree(wrong));
  }
  return 0;
}
