// A probe of the reduced residue GEMM with its epilogue beside the products (built by
// reduced_tiles.cu with -DOVERLAP=1): a kernel of our own over CUTLASS's Hopper INT8 main loop
// (TMA loads, warpgroup MMAs) and its persistent tile scheduler. Three warpgroups share each
// block:
//   0      warp 0 loads A's and B's k stages; warps 1 to 3 reduce: each owns one chunk buffer of
//          each multiplying warpgroup, reduces the sums handed over through it mod the plane's
//          modulus and stores the bytes;
//   1, 2   multiply, each into 64 rows x kTileCols INT32 sums of the tile (as in CUTLASS's
//          cooperative schedule), then hand the sums over in 64 x 64 chunks through shared
//          memory and start the next tile.
// The multiplying warps' epilogue shrinks to 16 shared-memory stores per chunk, the reduction and
// the packing moving to the reducing warps. It writes the library's bytes but is slower than the
// library's kernel (docs/benchmarks.md, "The epilogue beside the products"): three warps reduce
// too slowly, and the chunk buffers, which take shared memory from the main loop's stages, hold
// less than a tile, so the multiplying warps wait for them. Needs sm_90a and the CUTLASS headers.
#pragma once

#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include "../../csrc/cuda/reduced_kernel.cuh"
#include "cluster_launch.cuh"

namespace ozaki::cuda::reduced {

// kTileRows x kTileCols output tiles (kTileRows = 128: two multiplying warpgroups of 64 rows),
// k through shared memory kDepth bytes at a time, clusters of kClusterRows tiles along the rows
// sharing B's loads, and kSlots = 3 chunk buffers per multiplying warpgroup (one per reducing
// warp). kParts: bit 1, the multiplying warps store their sums into the chunk buffers; bit 2, the
// reducing warps rebuild and store the bytes (without them the chunks still go through the
// barriers, but nothing is written); 3, the whole kernel.
template <int kTileCols, int kDepth, int kClusterRows, int kSlots, int kParts = 3>
struct OverlapKernel {
  static constexpr int kTileRows = 128;
  static constexpr int kHalfRows = kTileRows / 2;  // the rows of one multiplying warpgroup
  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  static constexpr int kReducers = 3;  // warps
  static_assert(kSlots == kReducers, "each reducing warp owns one chunk buffer of each half");
  // A chunk: a multiplying warpgroup's 64 rows x 64 columns of sums, row-major, 8 words (32
  // bytes) past each row so that the 8-byte stores of a half warp (4 rows x 8 words) and the
  // 16-byte loads of a quarter warp (32 words of a row) fall in distinct banks.
  static constexpr int kChunkCols = 64;
  static constexpr int kChunkPitch = kChunkCols + 8;
  static constexpr int kChunks = kTileCols / kChunkCols;  // per warpgroup and tile
  // Registers per thread after the split (64 K in all).
  static constexpr int kLoadRegisters = 56, kMmaRegisters = 224;
  static_assert(kWarpgroupThreads * (kLoadRegisters + 2 * kMmaRegisters) <= 65536);

  using TileShape = cute::Shape<cute::Int<kTileRows>, cute::Int<kTileCols>, cute::Int<kDepth>>;
  using ClusterShape = cute::Shape<cute::Int<kClusterRows>, cute::_1, cute::_1>;

  // What the epilogue side holds in shared memory besides the main loop's stages.
  struct EpilogueStorage {
    alignas(16) int32_t sums[2][kSlots][kHalfRows * kChunkPitch];
    uint64_t full[2][kSlots];   // a chunk is in its buffer (128 arrivals)
    uint64_t empty[2][kSlots];  // a chunk's buffer has been read (32 arrivals)
  };

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor, 16,
      int8_t, cutlass::layout::ColumnMajor, 16, int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(EpilogueStorage) + 256)>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using TiledMma = typename Mainloop::TiledMma;
  using Pipeline = typename Mainloop::MainloopPipeline;
  using PipelineState = typename Mainloop::PipelineState;
  using Scheduler = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;
  using Problem = cute::Shape<int, int, int, int>;  // M, N, K, planes
  static_assert(cute::size(TiledMma{}) == 2 * kWarpgroupThreads);
  static_assert(kTileCols % kChunkCols == 0);

  // The accumulator layout the chunks rely on (CUTLASS's SM90 one): each thread's sums 32 c to
  // 32 c + 31 lie in columns [64 c, 64 c + 64) of its warpgroup's 64 rows, and its sums 2 j and
  // 2 j + 1 are columns 2 i, 2 i + 1 of one row. Checked on the host (too long for the compiler's
  // constant evaluation) by launch_overlap, once.
  static bool layout_holds() {
    const auto tv = TiledMma{}.get_layoutC_TV();  // (thread, sum) -> m + n kTileRows
    for (int t = 0; t < 2 * kWarpgroupThreads; ++t) {
      for (int v = 0; v < kChunks * 32; ++v) {
        const int at = tv(t, v), m = at % kTileRows, n = at / kTileRows;
        if (m / kHalfRows != t / kWarpgroupThreads || n / kChunkCols != v / 32) return false;
        if (v % 2 == 1) {
          const int before = tv(t, v - 1);
          if (before % kTileRows != m || before / kTileRows + 1 != n || n % 2 != 1) return false;
        }
      }
    }
    return true;
  }

  struct SharedStorage {
    typename Mainloop::TensorStorage mainloop;
    typename Mainloop::PipelineStorage pipeline;
    EpilogueStorage epilogue;
  };
  static constexpr int kSharedBytes = static_cast<int>(sizeof(SharedStorage));
  static_assert(kSharedBytes <= 232448, "more shared memory than a Hopper block may take");

  struct Params {
    Problem problem;
    typename Mainloop::Params mainloop;
    typename Scheduler::Params scheduler;
    ReducedResidueArguments epilogue;
  };

  // A chunk buffer's barrier waited for or arrived at, with the compiler kept from moving this
  // thread's shared-memory accesses across it (CUTLASS's barrier calls do not say they touch
  // memory).
  CUTLASS_DEVICE static void wait_for(const uint64_t* barrier, uint32_t parity) {
    cutlass::arch::ClusterBarrier::wait(barrier, parity);
    asm volatile("" ::: "memory");
  }
  CUTLASS_DEVICE static void arrive_at(const uint64_t* barrier) {
    asm volatile("" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(barrier);
  }

  // Loads: one warp issues every k stage of every tile of this block.
  CUTLASS_DEVICE static void load_tiles(const Params& params, SharedStorage& shared,
                                        Pipeline& pipeline, int lane) {
    using namespace cute;
    Mainloop mainloop;
    const auto problem = params.problem;
    auto inputs = mainloop.load_init(problem, params.mainloop);
    Tensor gA_mkl = get<0>(inputs);
    Tensor gB_nkl = get<1>(inputs);
    const int k_tiles = static_cast<int>(size<3>(gA_mkl));
    PipelineState write = cutlass::make_producer_start_state<Pipeline>();
    Scheduler scheduler{params.scheduler};
    auto work = scheduler.initial_work_tile_info(ClusterShape{});
    const uint32_t rank_in_cluster = cute::block_rank_in_cluster();
    while (work.is_valid()) {
      const auto m = idx2crd(work.M_idx, shape<2>(gA_mkl));
      const auto n = idx2crd(work.N_idx, shape<2>(gB_nkl));
      const auto l = idx2crd(work.L_idx, shape<4>(gB_nkl));
      auto k_iterator = make_coord_iterator(shape<3>(gA_mkl));
      mainloop.load(params.mainloop, pipeline, write, inputs, make_coord(m, n, _, l), k_iterator,
                    k_tiles, lane, rank_in_cluster, shared.mainloop);
      write.advance(k_tiles);
      work = get<0>(scheduler.fetch_next_work(work));
    }
    mainloop.load_tail(pipeline, write);
  }

  // Products: multiplying warpgroup `half` (0 or 1; thread mma_thread of the two's 256) computes
  // its 64 rows of each tile, then hands its sums over chunk by chunk, each into the next of its
  // kSlots buffers once a reducer has read what it held.
  CUTLASS_DEVICE static void multiply_tiles(const Params& params, SharedStorage& shared,
                                            Pipeline& pipeline, int half, int mma_thread) {
    using namespace cute;
    Mainloop mainloop;
    TiledMma tiled_mma;
    const int k_tiles = static_cast<int>(ceil_div(get<2>(params.problem), kDepth));
    EpilogueStorage& epilogue = shared.epilogue;
    Tensor coords =
        tiled_mma.get_thread_slice(mma_thread)
            .partition_C(make_identity_tensor(make_shape(Int<kTileRows>{}, Int<kTileCols>{})));
    // where this thread's first sum lies in a chunk (the others at constant offsets from it)
    const int first = (get<0>(coords(0)) - half * kHalfRows) * kChunkPitch + get<1>(coords(0));
    PipelineState read;
    int handed = 0;  // chunks handed over
    Scheduler scheduler{params.scheduler};
    auto work = scheduler.initial_work_tile_info(ClusterShape{});
    while (work.is_valid()) {
      auto accumulators = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
      static_assert(decltype(size(accumulators))::value == kChunks * 32);
      mainloop.mma(pipeline, read, accumulators, k_tiles, mma_thread, shared.mainloop,
                   params.mainloop);
      mainloop.mma_tail(pipeline, read, k_tiles);
      read.advance(k_tiles);
      CUTLASS_PRAGMA_UNROLL
      for (int chunk = 0; chunk < kChunks; ++chunk, ++handed) {
        const int slot = handed % kSlots;
        const uint32_t lap = static_cast<uint32_t>(handed / kSlots) & 1;
        wait_for(&epilogue.empty[half][slot], lap ^ 1);
        int32_t* sums = epilogue.sums[half][slot] + first;
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < 32 * (kParts & 1); v += 2) {
          const int i = chunk * 32 + v;
          const int offset = (get<0>(coords(i)) - get<0>(coords(0))) * kChunkPitch +
                             get<1>(coords(i)) - get<1>(coords(0)) - chunk * kChunkCols;
          *reinterpret_cast<int2*>(sums + offset) = make_int2(accumulators(i), accumulators(i + 1));
        }
        arrive_at(&epilogue.full[half][slot]);
      }
      work = get<0>(scheduler.fetch_next_work(work));
    }
  }

  // One chunk (64 x 64 sums at `sums`), mod p, into rows x cols bytes at out (row stride ld; rows
  // and cols may be 0 or less past the problem's edges): each lane rebuilds 4 columns of every
  // other row, and a warp stores 2 rows x 64 contiguous bytes at a time.
  template <bool kShort>
  CUTLASS_DEVICE static void reduce_chunk(const ModulusDivisor& divisor, const int32_t* sums,
                                          uint8_t* out, int64_t ld, int64_t rows, int64_t cols,
                                          int lane) {
    const int c = 4 * (lane % 16);
#pragma unroll 4
    for (int r = lane / 16; r < kHalfRows; r += 2) {
      const int4 s = *reinterpret_cast<const int4*>(sums + r * kChunkPitch + c);
      const uint32_t low = __byte_perm(divisor.template reduce<kShort>(s.x),
                                       divisor.template reduce<kShort>(s.y), 0x0040);
      const uint32_t high = __byte_perm(divisor.template reduce<kShort>(s.z),
                                        divisor.template reduce<kShort>(s.w), 0x0040);
      if (r < rows && c < cols) {
        *reinterpret_cast<uint32_t*>(out + r * ld + c) = __byte_perm(low, high, 0x5410);
      }
    }
  }

  // Reduction: reducing warp `reducer` (0 to 2) owns chunk buffer `reducer` of both multiplying
  // warpgroups and takes every chunk handed over through them, in the order handed over. One
  // owner per buffer keeps its waits in step with the buffer's phases: a warp waiting for a
  // phase two ahead of the barrier's would pass at once (the wait tests one parity bit).
  CUTLASS_DEVICE static void reduce_tiles(const Params& params, SharedStorage& shared,
                                          int reducer, int lane) {
    using namespace cute;
    const ReducedResidueArguments& out_args = params.epilogue;
    const int64_t rows_total = get<0>(params.problem), cols_total = get<1>(params.problem);
    EpilogueStorage& epilogue = shared.epilogue;
    Scheduler scheduler{params.scheduler};
    int64_t handed = 0;  // chunks each multiplying warpgroup handed over before this tile
    for (auto work = scheduler.initial_work_tile_info(ClusterShape{}); work.is_valid();
         work = get<0>(scheduler.fetch_next_work(work)), handed += kChunks) {
      const int64_t l = work.L_idx;
      // (an int: reduced_residue_gemms takes fewer than 2^31 planes)
      const ModulusDivisor divisor = out_args.divisors[static_cast<int>(l) % out_args.moduli];
      for (int chunk = 0; chunk < kChunks; ++chunk) {
        if ((handed + chunk) % kSlots != reducer) continue;
        const uint32_t lap = static_cast<uint32_t>((handed + chunk) / kSlots) & 1;
        for (int half = 0; half < 2; ++half) {
          const int64_t row0 = int64_t(work.M_idx) * kTileRows + half * kHalfRows;
          const int64_t col0 = int64_t(work.N_idx) * kTileCols + chunk * kChunkCols;
          uint8_t* out = out_args.out + l * out_args.out_plane + row0 * out_args.ld + col0;
          wait_for(&epilogue.full[half][reducer], lap);
          const int32_t* sums = epilogue.sums[half][reducer];
          if constexpr ((kParts & 2) == 0) {
          } else if (divisor.short_sums) {
            reduce_chunk<true>(divisor, sums, out, out_args.ld, rows_total - row0,
                               cols_total - col0, lane);
          } else {
            reduce_chunk<false>(divisor, sums, out, out_args.ld, rows_total - row0,
                                cols_total - col0, lane);
          }
          arrive_at(&epilogue.empty[half][reducer]);
        }
      }
    }
  }

  CUTLASS_DEVICE static void run(const Params& params, char* shared_bytes) {
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(shared_bytes);
    const int thread = static_cast<int>(threadIdx.x);
    const int warp = cutlass::canonical_warp_idx_sync();
    const int group = warp / 4;
    const int lane = cutlass::canonical_lane_idx();
    if (warp == 0 && cute::elect_one_sync()) Mainloop::prefetch_tma_descriptors(params.mainloop);

    typename Pipeline::Params pipeline_params;
    if (warp == 0) pipeline_params.role = Pipeline::ThreadCategory::Producer;
    if (group > 0) pipeline_params.role = Pipeline::ThreadCategory::Consumer;
    pipeline_params.is_leader = thread % kWarpgroupThreads == 0;
    pipeline_params.num_consumers = 2 * kWarpgroupThreads;
    pipeline_params.num_producers = Mainloop::NumProducerThreadEvents;
    pipeline_params.transaction_bytes = params.mainloop.tma_transaction_bytes;
    Pipeline pipeline(shared.pipeline, pipeline_params, ClusterShape{});
    if (thread == 0) {
      for (int half = 0; half < 2; ++half) {
        for (int slot = 0; slot < kSlots; ++slot) {
          cutlass::arch::ClusterBarrier::init(&shared.epilogue.full[half][slot],
                                              kWarpgroupThreads);
          cutlass::arch::ClusterBarrier::init(&shared.epilogue.empty[half][slot], 32);
        }
      }
      cutlass::arch::fence_barrier_init();
    }
    // Every barrier of the cluster's blocks is initialized before any block uses one.
    if constexpr (kClusterRows > 1) {
      cute::cluster_arrive_relaxed();
      cute::cluster_wait();
    } else {
      __syncthreads();
    }

    if (group == 0) {
      cutlass::arch::warpgroup_reg_dealloc<kLoadRegisters>();
      if (warp == 0) {
        load_tiles(params, shared, pipeline, lane);
      } else {
        reduce_tiles(params, shared, warp - 1, lane);
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<kMmaRegisters>();
      multiply_tiles(params, shared, pipeline, group - 1, thread - kWarpgroupThreads);
    }
  }

  // The problem and the main loop's arguments of every plane of `gemm`.
  static Problem problem_of(const ReducedGemm& gemm) {
    return Problem{static_cast<int>(gemm.rows), static_cast<int>(gemm.cols),
                   static_cast<int>(gemm.k_stride), static_cast<int>(gemm.planes)};
  }
  static typename Mainloop::Arguments mainloop_arguments_of(const ReducedGemm& gemm) {
    using namespace cute;
    return {gemm.a, make_stride(gemm.k_stride, Int<1>{}, gemm.a_plane), gemm.b,
            make_stride(gemm.k_stride, Int<1>{}, gemm.b_plane)};
  }

  // The kernel's parameters for every plane of `gemm`; swizzle: the tile scheduler's largest
  // swizzle (1, 2, 4 or 8 tiles).
  static Params params_of(const ReducedGemm& gemm, const cutlass::KernelHardwareInfo& hardware,
                          int swizzle) {
    const Problem problem = problem_of(gemm);
    typename Scheduler::Arguments scheduling;
    scheduling.max_swizzle_size = swizzle;
    Params params{problem,
                  Mainloop::to_underlying_arguments(problem, mainloop_arguments_of(gemm), nullptr),
                  Scheduler::to_underlying_arguments(problem, TileShape{}, ClusterShape{},
                                                     hardware, scheduling),
                  ReducedResidueEpilogue<kTileRows, kTileCols>::arguments_of(gemm)};
    return params;
  }

  // Whether the kernel takes `gemm`: K-rows 16-byte aligned (TMA), output as reduced_kernel.cuh's.
  static bool can_implement(const ReducedGemm& gemm) {
    const Problem problem = problem_of(gemm);
    return Mainloop::can_implement(problem, mainloop_arguments_of(gemm)) &&
           ReducedResidueEpilogue<kTileRows, kTileCols>::can_implement(
               problem, ReducedResidueEpilogue<kTileRows, kTileCols>::arguments_of(gemm));
  }

  // The launch's grid: one block per multiprocessor at most, in whole clusters.
  static dim3 grid_of(const Params& params, const cutlass::KernelHardwareInfo& hardware,
                      int swizzle) {
    typename Scheduler::Arguments scheduling;
    scheduling.max_swizzle_size = swizzle;
    return Scheduler::get_grid_shape(params.scheduler, params.problem, TileShape{},
                                     ClusterShape{}, hardware, scheduling);
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    overlap_kernel(const __grid_constant__ typename Kernel::Params params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ char shared_bytes[];
  Kernel::run(params, shared_bytes);
#endif
}

// Runs every plane of `gemm` through Kernel (an OverlapKernel) on `stream`.
template <class Kernel>
cudaError_t launch_overlap(const ReducedGemm& gemm, const cutlass::KernelHardwareInfo& hardware,
                           int swizzle, cudaStream_t stream) {
  static const bool layout_holds = Kernel::layout_holds();
  if (!layout_holds) return cudaErrorNotSupported;
  const typename Kernel::Params params = Kernel::params_of(gemm, hardware, swizzle);
  auto* kernel = &overlap_kernel<Kernel>;
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Kernel::kSharedBytes);
  if (status != cudaSuccess) return status;
  return launch_in_clusters(kernel, Kernel::grid_of(params, hardware, swizzle), Kernel::kThreads,
                            Kernel::kSharedBytes,
                            cute::size<0>(typename Kernel::ClusterShape{}), 1, stream, params);
}

}  // namespace ozaki::cuda::reduced
