// Launching one tile configuration of the reduced residue GEMM (reduced_kernel.cuh) on a
// ReducedGemm: what each configuration's translation unit (reduced_gemm_wide.cu,
// reduced_gemm_narrow.cu) runs.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

#include "reduced_gemm.cuh"

#ifdef OZAKI_REDUCED_GEMM
#include "reduced_kernel.cuh"

namespace ozaki::cuda {

// The tile scheduler's swizzle (CUTLASS's max_swizzle_size) for `gemm`: 4 tiles where both sides
// of a plane reach 8192, 1 below (docs/algorithm.md 9.11); OZAKI_REDUCED_SWIZZLE (1, 2, 4 or 8)
// sets it for every shape, for measurements.
inline int reduced_swizzle(const ReducedGemm& gemm) {
  static const int forced = [] {
    const char* value = std::getenv("OZAKI_REDUCED_SWIZZLE");
    if (value == nullptr || *value == '\0') return 0;
    const std::string text(value);
    TORCH_CHECK(text == "1" || text == "2" || text == "4" || text == "8",
                "ozaki: OZAKI_REDUCED_SWIZZLE must be 1, 2, 4 or 8; got '", text, "'");
    return std::stoi(text);
  }();
  if (forced != 0) return forced;
  return gemm.rows >= 8192 && gemm.cols >= 8192 ? 4 : 1;
}

// Runs every plane of `gemm` through Config (a reduced::ReducedKernel) on `stream`; the caller has
// checked that the sizes fit int.
template <class Config>
void launch_reduced(const ReducedGemm& gemm, cudaStream_t stream) {
  using Gemm = typename Config::Gemm;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  static thread_local int cached_device = -1, cached_count = 0;
  if (cached_device != device) {
    C10_CUDA_CHECK(
        cudaDeviceGetAttribute(&cached_count, cudaDevAttrMultiProcessorCount, device));
    cached_device = device;
  }
  const typename Gemm::Arguments arguments = Config::arguments(
      gemm, cutlass::KernelHardwareInfo{device, cached_count}, reduced_swizzle(gemm));
  Gemm op;
  TORCH_CHECK(op.can_implement(arguments) == cutlass::Status::kSuccess,
              "ozaki: CUTLASS cannot run the reduced residue GEMM of ", gemm.rows, " x ",
              gemm.cols, " x ", gemm.k_stride, " (ld ", gemm.ld, ")");
  const size_t workspace_bytes = Gemm::get_workspace_size(arguments);
  at::Tensor workspace;
  if (workspace_bytes > 0) {
    workspace = at::empty({static_cast<int64_t>(workspace_bytes)},
                          at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device));
  }
  void* workspace_data = workspace_bytes > 0 ? workspace.mutable_data_ptr() : nullptr;
  TORCH_CHECK(op.initialize(arguments, workspace_data, stream) == cutlass::Status::kSuccess,
              "ozaki: the reduced residue GEMM failed to initialise");
  TORCH_CHECK(op.run(stream) == cutlass::Status::kSuccess,
              "ozaki: the reduced residue GEMM failed to launch");
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace ozaki::cuda
#endif

namespace ozaki::cuda {

// Every plane of `gemm` in kTileRows x kTileCols x 128 tiles (k through shared memory 128 bytes
// at a time, two consumer warpgroups sharing each tile: CUTLASS's cooperative schedule), in
// clusters of kClusterRows x kClusterCols tiles; a named error where the build has no reduced
// GEMM.
template <int kTileRows, int kTileCols, int kClusterRows, int kClusterCols>
void launch_reduced_tiles(const ReducedGemm& gemm, cudaStream_t stream) {
#ifdef OZAKI_REDUCED_GEMM
  using cute::Int;
  launch_reduced<reduced::ReducedKernel<cute::Shape<Int<kTileRows>, Int<kTileCols>, Int<128>>,
                                        cute::Shape<Int<kClusterRows>, Int<kClusterCols>, Int<1>>,
                                        cutlass::gemm::KernelTmaWarpSpecializedCooperative>>(
      gemm, stream);
#else
  TORCH_CHECK(false, "ozaki: this build has no reduced residue GEMM (sm_90a with CUTLASS)");
#endif
}

}  // namespace ozaki::cuda
