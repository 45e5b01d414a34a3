// The reduced residue GEMM for products of 256 columns or more: 128 x 256 output tiles in clusters
// of two along the rows sharing b's tile loads (the fastest of the tiles
// scripts/probes/reduced_tiles.sh measures for large products).
#include "reduced_launch.cuh"

void ozaki::cuda::reduced_gemms_wide(const ReducedGemm& gemm, cudaStream_t stream) {
  launch_reduced_tiles<kWideTileRows, kWideTileColumns, kWideClusterRows, 1>(gemm, stream);
}
