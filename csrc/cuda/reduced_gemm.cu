// The reduced residue GEMMs of reduced_gemm.cuh: a CUTLASS Hopper INT8 GEMM (TMA loads, warpgroup
// MMAs, warp-specialized persistent kernel) over all planes of a chunk, moduli and elements alike,
// with an epilogue of our own that reduces each exact INT32 sum mod its plane's modulus and
// stores it as one byte. The sums are the integers cuBLAS's INT8 GEMM returns, so the residues,
// and the rebuilt products, are the INT32 path's bits.

// Without NDEBUG, CUTLASS's device-side asserts are calls that serialize the warpgroup MMAs.
#ifndef NDEBUG
#define NDEBUG
#endif
#include "reduced_gemm.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#ifdef OZAKI_REDUCED_GEMM
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>
#endif

namespace ozaki::cuda {

#ifdef OZAKI_REDUCED_GEMM
namespace {

// The epilogue (CUTLASS's collective-epilogue interface, as its sm90 adapter wraps it): each
// thread reduces its accumulators mod the plane's modulus and stores the bytes inside the
// product.
class ReducedResidueEpilogue {
 public:
  using EpilogueSchedule = cutlass::gemm::EpilogueDefault;
  using DispatchPolicy = EpilogueSchedule;
  using ElementOutput = uint8_t;
  using ElementAccumulator = int32_t;
  using ElementCompute = int32_t;
  using ElementScalar = int32_t;
  using ElementC = uint8_t;  // no source is read
  using ElementD = uint8_t;
  using StrideC = cute::Stride<int64_t, cute::Int<1>, int64_t>;
  using StrideD = StrideC;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  struct SharedStorage {};
  using TensorStorage = SharedStorage;
  // What CUTLASS's device adapter reads off the thread-level operator it expects here.
  struct ThreadEpilogueOp {
    using ElementOutput = uint8_t;
    using ElementAccumulator = int32_t;
    using ElementCompute = int32_t;
  };

  struct Arguments {
    uint8_t* out;
    int64_t out_plane;
    int64_t ld;
    int moduli;
    ModulusDivisor divisors[kReducedMaxModuli];
  };
  using Params = Arguments;

  template <class Shape>
  static constexpr Params to_underlying_arguments(const Shape&, const Arguments& arguments, void*) {
    return arguments;
  }
  template <class Shape>
  static size_t get_workspace_size(const Shape&, const Arguments&) {
    return 0;
  }
  template <class Shape>
  static cutlass::Status initialize_workspace(const Shape&, const Arguments&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class Shape>
  static bool can_implement(const Shape&, const Arguments&) {
    return true;
  }

  CUTLASS_HOST_DEVICE explicit ReducedResidueEpilogue(const Params& params,
                                                      const SharedStorage& = SharedStorage())
      : params_(params) {}

  template <class ProblemShape, class TileShape, class TileCoord, class Engine, class Layout,
            class TiledMma, class Residue>
  CUTLASS_DEVICE void operator()(ProblemShape problem, TileShape tile, TileCoord coord,
                                 const cute::Tensor<Engine, Layout>& accumulators,
                                 TiledMma tiled_mma, Residue, int thread_idx, char*) {
    using namespace cute;
    const auto rows = get<0>(problem), cols = get<1>(problem);
    const auto [m_coord, n_coord, k_coord, l_coord] = coord;
    const ModulusDivisor divisor = params_.divisors[l_coord % params_.moduli];
    Tensor out = make_tensor(make_gmem_ptr(params_.out + int64_t(l_coord) * params_.out_plane),
                             make_shape(rows, cols), make_stride(params_.ld, Int<1>{}));
    Tensor tile_out = local_tile(out, take<0, 2>(tile), make_coord(m_coord, n_coord));
    Tensor tile_coords =
        local_tile(make_identity_tensor(make_shape(rows, cols)), take<0, 2>(tile),
                   make_coord(m_coord, n_coord));
    auto thread_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor thread_out = thread_mma.partition_C(tile_out);
    Tensor thread_coords = thread_mma.partition_C(tile_coords);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accumulators); ++i) {
      if (elem_less(thread_coords(i), make_coord(rows, cols))) {
        thread_out(i) = static_cast<uint8_t>(divisor.reduce(accumulators(i)));
      }
    }
  }

 private:
  Params params_;
};

// 128 x 256 output tiles, k through shared memory 128 bytes at a time in as many stages as fit,
// two consumer warpgroups sharing each tile (CUTLASS's cooperative schedule), clusters of two
// along the columns sharing a's tile loads.
using TileShape = cute::Shape<cute::_128, cute::_256, cute::_128>;
using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
using Epilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
    ReducedResidueEpilogue>;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor, 16,
    int8_t, cutlass::layout::ColumnMajor, 16, int32_t, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop,
                                                    Epilogue, cutlass::gemm::PersistentScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

int multiprocessors(int device) {
  int count = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

}  // namespace

bool reduced_gemm_available() {
  int device = 0, major = 0, minor = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

void reduced_residue_gemms(const ReducedGemm& gemm, cudaStream_t stream) {
  TORCH_CHECK(gemm.rows < (int64_t(1) << 31) && gemm.cols < (int64_t(1) << 31) &&
                  gemm.k_stride < (int64_t(1) << 31) && gemm.planes < (int64_t(1) << 31),
              "ozaki: reduced residue GEMM of ", gemm.rows, " x ", gemm.cols, " x ",
              gemm.k_stride, " in ", gemm.planes, " planes exceeds int sizes");
  TORCH_CHECK(gemm.moduli >= 1 && gemm.moduli <= kReducedMaxModuli,
              "ozaki: reduced residue GEMM with ", gemm.moduli, " moduli");
  using namespace cute;
  const auto stride_a = make_stride(gemm.k_stride, Int<1>{}, gemm.a_plane);
  const auto stride_b = make_stride(gemm.k_stride, Int<1>{}, gemm.b_plane);
  ReducedResidueEpilogue::Arguments epilogue{gemm.out, gemm.out_plane, gemm.ld, gemm.moduli, {}};
  for (int i = 0; i < gemm.moduli; ++i) epilogue.divisors[i] = gemm.divisors[i];
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  static thread_local int cached_device = -1, cached_count = 0;
  if (cached_device != device) {
    cached_count = multiprocessors(device);
    cached_device = device;
  }
  cutlass::KernelHardwareInfo hardware{device, cached_count};
  const typename Gemm::Arguments arguments{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {static_cast<int>(gemm.rows), static_cast<int>(gemm.cols), static_cast<int>(gemm.k_stride),
       static_cast<int>(gemm.planes)},
      {gemm.a, stride_a, gemm.b, stride_b},
      epilogue,
      hardware};
  Gemm op;
  TORCH_CHECK(op.can_implement(arguments) == cutlass::Status::kSuccess,
              "ozaki: CUTLASS cannot run the reduced residue GEMM of ", gemm.rows, " x ",
              gemm.cols, " x ", gemm.k_stride);
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

#else

bool reduced_gemm_available() { return false; }

void reduced_residue_gemms(const ReducedGemm&, cudaStream_t) {
  TORCH_CHECK(false, "ozaki: this build has no reduced residue GEMM (sm_90a with CUTLASS)");
}

#endif

}  // namespace ozaki::cuda
