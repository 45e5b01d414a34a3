// The reduced residue GEMMs of reduced_gemm.cuh: whether this build and device have them, and the
// tile configuration each product takes. The sums are the integers cuBLAS's INT8 GEMM returns, so
// the residues, and the rebuilt products, are the INT32 path's bits.
#include "reduced_gemm.cuh"

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

namespace ozaki::cuda {

bool reduced_gemm_available() {
#ifdef OZAKI_REDUCED_GEMM
  int device = 0, major = 0, minor = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

void reduced_residue_gemms(const ReducedGemm& gemm, cudaStream_t stream) {
  TORCH_CHECK(gemm.rows < (int64_t(1) << 31) && gemm.cols < (int64_t(1) << 31) &&
                  gemm.k_stride < (int64_t(1) << 31) && gemm.planes < (int64_t(1) << 31),
              "ozaki: reduced residue GEMM of ", gemm.rows, " x ", gemm.cols, " x ",
              gemm.k_stride, " in ", gemm.planes, " planes exceeds int sizes");
  TORCH_CHECK(gemm.moduli >= 1 && gemm.moduli <= kReducedMaxModuli,
              "ozaki: reduced residue GEMM with ", gemm.moduli, " moduli");
  if (gemm.cols >= kWideTileColumns) {
    reduced_gemms_wide(gemm, stream);
  } else {
    reduced_gemms_narrow(gemm, stream);
  }
}

}  // namespace ozaki::cuda
