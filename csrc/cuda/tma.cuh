// The tensor memory accelerator (Hopper) for the library's own kernels: tensor maps encoded through
// the runtime's driver entry point (no link to libcuda), and the mbarrier and tensor-copy
// instructions a kernel needs to have tiles copied into its shared memory while it computes.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ozaki::cuda {

// A 3-D tensor map of bytes: dims[0] contiguous, dims[1] and dims[2] at byte strides
// strides[0] and strides[1] (multiples of 16, as the base's address must be), copied in boxes of
// box[0] x box[1] x box[2]; reads past dims give zeros. False where the driver refuses it or has
// no cuTensorMapEncodeTiled.
inline bool encode_byte_map(CUtensorMap* map, const void* base, const uint64_t (&dims)[3],
                            const uint64_t (&strides)[2], const uint32_t (&box)[3]) {
  using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const EncodeTiled encode = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // not sticky: clear it for the caller's checks
      return static_cast<EncodeTiled>(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(entry);
  }();
  if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || strides[0] % 16 != 0 ||
      strides[1] % 16 != 0) {
    return false;
  }
  const cuuint64_t map_dims[3] = {dims[0], dims[1], dims[2]};
  const cuuint64_t map_strides[2] = {strides[0], strides[1]};
  const cuuint32_t map_box[3] = {box[0], box[1], box[2]};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(base), map_dims,
                map_strides, map_box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

#ifdef __CUDACC__
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define OZAKI_TMA_DEVICE 1  // the instructions below exist on this target
#endif

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// An mbarrier that completes once one thread has arrived and the bytes it announced have landed.
__device__ __forceinline__ void barrier_init(uint64_t* bar) {
#ifdef OZAKI_TMA_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(bar)));
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// Waits for the phase of the given parity of bar to complete.
__device__ __forceinline__ void barrier_wait(uint64_t* bar, int parity) {
#ifdef OZAKI_TMA_DEVICE
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
#endif
}

// Orders this thread's earlier accesses to shared memory before tensor copies issued after a later
// barrier. Threads read shared memory through the generic proxy and the copies write it through
// the async proxy, which a barrier alone does not order: without this fence a copy that refills a
// slot may land before every thread's reads of the slot's last contents have completed.
__device__ __forceinline__ void fence_shared_before_copies() {
#ifdef OZAKI_TMA_DEVICE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Copies the box at (x, y, z) of map into shared memory at to (128-byte aligned), announcing its
// `bytes` on bar, which completes when they have landed.
__device__ __forceinline__ void copy_box_3d(void* to, const CUtensorMap& map, int x, int y, int z,
                                            uint64_t* bar, int bytes) {
#ifdef OZAKI_TMA_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   shared_address(bar)),
               "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(shared_address(to)),
      "l"(&map), "r"(x), "r"(y), "r"(z), "r"(shared_address(bar))
      : "memory");
#endif
}
#endif

}  // namespace ozaki::cuda
