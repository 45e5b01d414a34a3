// The reduced residue GEMM for products of fewer than 256 columns (few right-hand sides): 128 x 64
// output tiles, one per cluster (the fastest of the tiles scripts/probes/reduced_tiles.sh measures
// for 64 columns).
#include "reduced_launch.cuh"

void ozaki::cuda::reduced_gemms_narrow(const ReducedGemm& gemm, cudaStream_t stream) {
  launch_reduced_tiles<128, 64, 1, 1>(gemm, stream);
}
