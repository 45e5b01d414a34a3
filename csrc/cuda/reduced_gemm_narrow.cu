// The reduced residue GEMM for products of fewer than 256 columns (few right-hand sides): 128 x 64
// output tiles, k through shared memory 128 bytes at a time, two consumer warpgroups sharing each
// tile (CUTLASS's cooperative schedule), one tile per cluster (the fastest of the tiles
// scripts/probes/reduced_tiles.sh measures for 64 columns).
#include "reduced_launch.cuh"

namespace ozaki::cuda {

void reduced_gemms_narrow(const ReducedGemm& gemm, cudaStream_t stream) {
#ifdef OZAKI_REDUCED_GEMM
  launch_reduced<reduced::ReducedKernel<cute::Shape<cute::_128, cute::_64, cute::_128>,
                                        cute::Shape<cute::_1, cute::_1, cute::_1>,
                                        cutlass::gemm::KernelTmaWarpSpecializedCooperative>>(
      gemm, stream);
#else
  TORCH_CHECK(false, "ozaki: this build has no reduced residue GEMM (sm_90a with CUTLASS)");
#endif
}

}  // namespace ozaki::cuda
