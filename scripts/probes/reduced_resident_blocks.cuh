// A probe of the reduced residue GEMM with several blocks resident on each multiprocessor (built
// by reduced_tiles.cu with -DRESIDENT_BLOCKS=b): CUTLASS's Hopper INT8 kernel without warp
// specialization (KernelTma: one warpgroup per block loads its k stages by TMA and multiplies
// one 128 x kTileCols tile, then runs the library's epilogue, ReducedResidueEpilogue, unchanged),
// launched under our own bounds so that kBlocksPerSm blocks share a multiprocessor. While one
// block's warps reduce their tile mod p, the others' keep the tensor cores busy: the epilogue is
// hidden by other blocks instead of by a second set of accumulators in one block. (The
// warp-specialized kernel cannot do this: ptxas gives every warp of a block the registers of the
// widest, and the 64 x 128 warpgroup MMA's 90 or more per thread leave room for one block of
// 288 or 384 threads per multiprocessor.) Clusters of kClusterRows x kClusterCols tiles share
// A's and B's loads (multicast). Slower than the library's kernel at every shape measured, as a
// lone warpgroup multiplies too slowly (docs/benchmarks.md, "Hiding the reduced GEMM's epilogue
// behind other blocks"). Needs sm_90a and the CUTLASS headers.
#pragma once

#include <cutlass/gemm/kernel/sm90_gemm_tma.hpp>

#include "../../csrc/cuda/reduced_kernel.cuh"
#include "cluster_launch.cuh"

namespace ozaki::cuda::reduced {

template <int kTileCols, int kDepth, int kStages, int kClusterRows, int kClusterCols,
          int kBlocks>
struct ResidentBlocksKernel {
  static constexpr int kTileRows = 128;
  static constexpr int kBlocksPerSm = kBlocks;
  using TileShape = cute::Shape<cute::Int<kTileRows>, cute::Int<kTileCols>, cute::Int<kDepth>>;
  using ClusterShape = cute::Shape<cute::Int<kClusterRows>, cute::Int<kClusterCols>, cute::_1>;
  using Epilogue = ReducedResidueEpilogue<kTileRows, kTileCols>;
  // (CUTLASS's main loop without warp specialization takes one warpgroup: it counts 128
  // consumers and lets each warpgroup's first thread expect the stage's bytes)
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor, 16,
      int8_t, cutlass::layout::ColumnMajor, 16, int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCount<kStages>, cutlass::gemm::KernelTma>::CollectiveOp;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue>;
  static constexpr int kThreads = Kernel::MaxThreadsPerBlock;
  static constexpr int kSharedBytes = Kernel::SharedStorageSize;
  // kBlocks blocks of at most this much (228 KiB per multiprocessor, 1 KiB of each reserved).
  static_assert(kSharedBytes <= 233472 / kBlocks - 1024,
                "the blocks would not fit one multiprocessor");
  // Registers per thread that let kBlocks blocks share the 65536, in whole 8s, at most 255.
  static constexpr int kShare = (65536 / (kBlocks * kThreads)) / 8 * 8;
  static constexpr int kRegisters = kShare > 255 ? 255 : kShare;

  static typename Kernel::Arguments arguments_of(const ReducedGemm& gemm) {
    using namespace cute;
    typename Kernel::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {static_cast<int>(gemm.rows), static_cast<int>(gemm.cols),
         static_cast<int>(gemm.k_stride), static_cast<int>(gemm.planes)},
        {gemm.a, make_stride(gemm.k_stride, Int<1>{}, gemm.a_plane), gemm.b,
         make_stride(gemm.k_stride, Int<1>{}, gemm.b_plane)},
        Epilogue::arguments_of(gemm)};
    return arguments;
  }

  static bool can_implement(const ReducedGemm& gemm) {
    return Kernel::can_implement(arguments_of(gemm));
  }
};

template <class Config>
__global__ void __launch_bounds__(Config::kThreads) __maxnreg__(Config::kRegisters)
    resident_blocks_kernel(const __grid_constant__ typename Config::Kernel::Params params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ char shared_bytes[];
  typename Config::Kernel kernel;
  kernel(params, shared_bytes);
  // The tile's bytes have left the staging buffer before the block's shared memory goes.
  cute::tma_store_wait<0>();
#endif
}

// Runs every plane of `gemm` through Config (a ResidentBlocksKernel) on `stream`: one block per
// tile.
template <class Config>
cudaError_t launch_resident_blocks(const ReducedGemm& gemm, cudaStream_t stream) {
  auto* kernel = &resident_blocks_kernel<Config>;
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Config::kSharedBytes);
  if (status != cudaSuccess) return status;
  // All of the multiprocessor's unified L1 and shared memory as shared memory: the runtime
  // otherwise sizes the split for one block.
  status = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                cudaSharedmemCarveoutMaxShared);
  if (status != cudaSuccess) return status;
  static bool told = false;
  if (!told) {
    int blocks_per_sm = 0;
    status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, Config::kThreads,
                                                           Config::kSharedBytes);
    if (status != cudaSuccess) return status;
    printf("  (%d blocks of %d threads per multiprocessor, at most %d registers and %d bytes of "
           "shared memory per block)\n", blocks_per_sm, Config::kThreads, Config::kRegisters,
           Config::kSharedBytes);
    told = true;
  }
  const typename Config::Kernel::Params params =
      Config::Kernel::to_underlying_arguments(Config::arguments_of(gemm), nullptr);
  return launch_in_clusters(kernel, Config::Kernel::get_grid_shape(params), Config::kThreads,
                            Config::kSharedBytes, cute::size<0>(typename Config::ClusterShape{}),
                            cute::size<1>(typename Config::ClusterShape{}), stream, params);
}

}  // namespace ozaki::cuda::reduced
