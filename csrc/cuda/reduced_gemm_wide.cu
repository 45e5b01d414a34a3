// The reduced residue GEMM for products of 256 columns or more: 128 x 256 output tiles, k through
// shared memory 128 bytes at a time, two consumer warpgroups sharing each tile (CUTLASS's
// cooperative schedule), clusters of two tiles along the rows sharing b's tile loads (the fastest
// of the tiles scripts/probes/reduced_tiles.sh measures for large products).
#include "reduced_launch.cuh"

namespace ozaki::cuda {

void reduced_gemms_wide(const ReducedGemm& gemm, cudaStream_t stream) {
#ifdef OZAKI_REDUCED_GEMM
  launch_reduced<reduced::ReducedKernel<cute::Shape<cute::_128, cute::_256, cute::_128>,
                                        cute::Shape<cute::_2, cute::_1, cute::_1>,
                                        cutlass::gemm::KernelTmaWarpSpecializedCooperative>>(
      gemm, stream);
#else
  TORCH_CHECK(false, "ozaki: this build has no reduced residue GEMM (sm_90a with CUTLASS)");
#endif
}

}  // namespace ozaki::cuda
