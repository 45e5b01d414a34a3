// Launching one tile configuration of the reduced residue GEMM (reduced_kernel.cuh) on a
// ReducedGemm: what each configuration's translation unit (reduced_gemm_wide.cu,
// reduced_gemm_narrow.cu) runs.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include "reduced_gemm.cuh"

#ifdef OZAKI_REDUCED_GEMM
#include "reduced_kernel.cuh"

namespace ozaki::cuda {

// Runs every plane of `gemm` (a ReducedGemm, or a description Config's epilogue takes) through
// Config (a reduced::ReducedKernel) on `stream`; the caller has checked that the sizes fit int.
template <class Config, class Description>
void launch_reduced(const Description& gemm, cudaStream_t stream) {
  using Gemm = typename Config::Gemm;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  static thread_local int cached_device = -1, cached_count = 0;
  if (cached_device != device) {
    C10_CUDA_CHECK(
        cudaDeviceGetAttribute(&cached_count, cudaDevAttrMultiProcessorCount, device));
    cached_device = device;
  }
  const typename Gemm::Arguments arguments =
      Config::arguments(gemm, cutlass::KernelHardwareInfo{device, cached_count});
  Gemm op;
  TORCH_CHECK(op.can_implement(arguments) == cutlass::Status::kSuccess,
              "ozaki: CUTLASS cannot run the reduced GEMM of ", gemm.rows, " x ", gemm.cols,
              " x ", gemm.k_stride);
  const size_t workspace_bytes = Gemm::get_workspace_size(arguments);
  at::Tensor workspace;
  if (workspace_bytes > 0) {
    workspace = at::empty({static_cast<int64_t>(workspace_bytes)},
                          at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device));
  }
  void* workspace_data = workspace_bytes > 0 ? workspace.mutable_data_ptr() : nullptr;
  TORCH_CHECK(op.initialize(arguments, workspace_data, stream) == cutlass::Status::kSuccess,
              "ozaki: the reduced GEMM failed to initialise");
  TORCH_CHECK(op.run(stream) == cutlass::Status::kSuccess,
              "ozaki: the reduced GEMM failed to launch");
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Every plane of `gemm` in kTileRows x kTileCols x 128 tiles (k through shared memory 128 bytes
// at a time, two consumer warpgroups sharing each tile: CUTLASS's cooperative schedule), in
// clusters of kClusterRows x kClusterCols tiles, each tile's sums going to EpilogueOp.
template <int kTileRows, int kTileCols, int kClusterRows, int kClusterCols,
          template <int, int> class EpilogueOp, class Description>
void launch_tiles_with(const Description& gemm, cudaStream_t stream) {
  using cute::Int;
  launch_reduced<reduced::ReducedKernel<cute::Shape<Int<kTileRows>, Int<kTileCols>, Int<128>>,
                                        cute::Shape<Int<kClusterRows>, Int<kClusterCols>, Int<1>>,
                                        cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                        EpilogueOp<kTileRows, kTileCols>>>(gemm, stream);
}

}  // namespace ozaki::cuda
#endif

namespace ozaki::cuda {

// launch_tiles_with for the residue epilogue (reduced::ReducedResidueEpilogue); a named error where
// the build has no reduced GEMM.
template <int kTileRows, int kTileCols, int kClusterRows, int kClusterCols>
void launch_reduced_tiles(const ReducedGemm& gemm, cudaStream_t stream) {
#ifdef OZAKI_REDUCED_GEMM
  launch_tiles_with<kTileRows, kTileCols, kClusterRows, kClusterCols,
                    reduced::ReducedResidueEpilogue>(gemm, stream);
#else
  TORCH_CHECK(false, "ozaki: this build has no reduced residue GEMM (sm_90a with CUTLASS)");
#endif
}

}  // namespace ozaki::cuda
