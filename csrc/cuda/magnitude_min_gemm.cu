// magnitude_min_gemms (reduced_gemm.cuh): the plan estimate's digit products on the reduced GEMM's
// kernel, in the residue GEMM's tiles (reduced_gemm_wide.cu, reduced_gemm_narrow.cu), each tile
// folded into the running minimum (magnitude_min_epilogue.cuh).
#include "reduced_gemm.cuh"
#include "reduced_launch.cuh"

#ifdef OZAKI_REDUCED_GEMM
#include "magnitude_min_epilogue.cuh"
#endif

namespace ozaki::cuda {

void magnitude_min_gemms(const MagnitudeMinGemm& gemm, cudaStream_t stream) {
  TORCH_CHECK(gemm.rows < (int64_t(1) << 31) && gemm.cols < (int64_t(1) << 31) &&
                  gemm.k_stride < (int64_t(1) << 31) && gemm.planes < (int64_t(1) << 31),
              "ozaki: magnitude GEMM of ", gemm.rows, " x ", gemm.cols, " x ", gemm.k_stride,
              " in ", gemm.planes, " planes exceeds int sizes");
#ifdef OZAKI_REDUCED_GEMM
  if (gemm.cols >= kWideTileColumns) {
    launch_tiles_with<128, 256, 2, 1, reduced::MagnitudeMinEpilogue>(gemm, stream);
  } else {
    launch_tiles_with<128, 64, 1, 1, reduced::MagnitudeMinEpilogue>(gemm, stream);
  }
#else
  TORCH_CHECK(false, "ozaki: this build has no reduced GEMM (sm_90a with CUTLASS)");
#endif
}

}  // namespace ozaki::cuda
