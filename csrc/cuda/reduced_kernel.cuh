// The CUTLASS kernel behind reduced_gemm.cuh, as a template over its tile, cluster and schedule:
// a Hopper INT8 GEMM (TMA loads, warpgroup MMAs, warp-specialized persistent kernel) over every
// plane of a ReducedGemm, with an epilogue of our own that reduces each exact INT32 sum mod its
// plane's modulus and stores it as one byte. Included by reduced_gemm.cu and by the tile probe
// (scripts/probes/reduced_tiles.cu); needs sm_90a and the CUTLASS headers.
#pragma once

// Without NDEBUG, CUTLASS's device-side asserts are calls that serialize the warpgroup MMAs.
#ifndef NDEBUG
#define NDEBUG
#endif
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>

#include "reduced_gemm.cuh"

namespace ozaki::cuda::reduced {

// An output tile of the kernel: plane l's rows [row0, row0 + rows) and columns
// [col0, col0 + cols), fewer than the tile's at the problem's edges.
struct OutputTile {
  int64_t l, row0, col0, rows, cols;
};

// What CUTLASS's sm90 adapter and device adapter read off an epilogue of this kernel: INT32 sums
// in, bytes out, no source read and no workspace; its arguments are its parameters. Each tile's
// accumulators go to Derived::finish_tile(params, tile, accumulators, tiled_mma, thread_idx,
// shared) (the epilogues here derive from it).
template <class Derived, class Arguments_>
class EpilogueBase {
 public:
  using Arguments = Arguments_;
  using Params = Arguments;
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
  struct ThreadEpilogueOp {
    using ElementOutput = uint8_t;
    using ElementAccumulator = int32_t;
    using ElementCompute = int32_t;
  };

  template <class Shape, class Arguments>
  static size_t get_workspace_size(const Shape&, const Arguments&) {
    return 0;
  }
  template <class Shape, class Arguments>
  static cutlass::Status initialize_workspace(const Shape&, const Arguments&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class Shape>
  static constexpr Params to_underlying_arguments(const Shape&, const Arguments& arguments, void*) {
    return arguments;
  }

  CUTLASS_HOST_DEVICE explicit EpilogueBase(const Params& params) : params_(params) {}
  template <class SharedStorage>
  CUTLASS_HOST_DEVICE EpilogueBase(const Params& params, const SharedStorage&) : params_(params) {}

  // CUTLASS's collective-epilogue call for one tile (no source, no residue predicate).
  template <class ProblemShape, class TileShape, class TileCoord, class Engine, class Layout,
            class TiledMma, class Residue>
  CUTLASS_DEVICE void operator()(ProblemShape problem, TileShape, TileCoord coord,
                                 const cute::Tensor<Engine, Layout>& accumulators,
                                 TiledMma tiled_mma, Residue, int thread_idx, char* shared) {
    constexpr int64_t kTileRows = cute::size<0>(TileShape{}), kTileCols = cute::size<1>(TileShape{});
    const auto [m_coord, n_coord, k_coord, l_coord] = coord;
    const int64_t row0 = int64_t(m_coord) * kTileRows, col0 = int64_t(n_coord) * kTileCols;
    const OutputTile tile{l_coord, row0, col0, cute::min(int64_t(cute::get<0>(problem)) - row0, kTileRows),
                          cute::min(int64_t(cute::get<1>(problem)) - col0, kTileCols)};
    static_cast<Derived*>(this)->finish_tile(params_, tile, accumulators, tiled_mma, thread_idx,
                                             shared);
  }

 protected:
  // The kernel's own parameters (its __grid_constant__ argument), not a copy: a tensor map in them
  // is addressed where TMA can read it.
  const Params& params_;
};

// Columns per TMA box of the reduced epilogue's tensor stores: rows of 32 bytes, whole sectors.
constexpr int kStoreBoxCols = 32;

// The reduced epilogue's arguments: out + l * out_plane + r * ld + c; out 4-byte aligned, ld a
// multiple of 4 and at least the columns rounded up to it (the words stored may reach into that
// padding). tensor_stores: out_map describes the output (cols x rows x planes bytes, boxes of
// kStoreBoxCols columns x the tile's rows), which needs out, ld and out_plane 16-byte aligned.
struct ReducedResidueArguments {
  uint8_t* out;
  int64_t out_plane;
  int64_t ld;
  int moduli;
  ModulusDivisor divisors[kReducedMaxModuli];
  bool tensor_stores;
  CUtensorMap out_map;
};

// out_map for the output of `gemm` in boxes of kStoreBoxCols x box_rows bytes, 32-byte swizzled in
// shared memory; false (and no map) where the output is not 16-byte aligned or the driver refuses
// it.
inline bool encode_output_map(const ReducedGemm& gemm, int box_rows, CUtensorMap* out_map) {
  if (reinterpret_cast<uintptr_t>(gemm.out) % 16 != 0 || gemm.ld % 16 != 0 ||
      gemm.out_plane % 16 != 0 || gemm.cols < 1 || gemm.rows < 1 || gemm.planes < 1) {
    return false;
  }
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(gemm.cols),
                              static_cast<cuuint64_t>(gemm.rows),
                              static_cast<cuuint64_t>(gemm.planes)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(gemm.ld),
                                 static_cast<cuuint64_t>(gemm.out_plane)};
  const cuuint32_t box[3] = {kStoreBoxCols, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  return CUTLASS_CUDA_DRIVER_WRAPPER_CALL(cuTensorMapEncodeTiled)(
             out_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, gemm.out, dims, strides, box,
             element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_32B,
             CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The epilogue (CUTLASS's collective-epilogue interface, as its sm90 adapter wraps it) of a
// kTileRows x kTileCols output tile: the MMA threads reduce their accumulators mod the plane's
// modulus into a byte tile in shared memory (in the accumulators' own layout, 2-byte stores would
// scatter over global memory), which then leaves asynchronously while the next tile's MMAs run
// (the next epilogue waits for those reads before it stages again):
//   - with tensor_stores, the tile is staged as kTileCols / kStoreBoxCols boxes of kStoreBoxCols
//     columns and leaves in one TMA store per box, issued by one thread (the copy engine clips
//     the problem's edges);
//   - otherwise rows lie kPitch bytes apart; a whole tile whose rows are 16-byte aligned leaves in
//     one bulk copy per row, other tiles row by row in 4-byte words, each warp writing 128
//     contiguous bytes.
template <int kTileRows, int kTileCols>
class ReducedResidueEpilogue
    : public EpilogueBase<ReducedResidueEpilogue<kTileRows, kTileCols>, ReducedResidueArguments> {
 public:
  using Base =
      EpilogueBase<ReducedResidueEpilogue<kTileRows, kTileCols>, ReducedResidueArguments>;
  using Base::Base;
  using typename Base::Arguments;
  using typename Base::Params;
  // Rows of the staged tile lie 16 bytes beyond their width: 16-byte aligned for the bulk copies,
  // and the 8 rows x 2 words that a warp stages at once fall in distinct banks. In boxes, rows
  // lie kStoreBoxCols bytes apart, swizzled (staged_at) so that those 8 rows do too.
  static constexpr int kPitch = kTileCols + 16;
  static constexpr int kBoxBytes = kStoreBoxCols * kTileRows;
  static constexpr int kBoxes = kTileCols / kStoreBoxCols;
  static_assert(kTileCols % kStoreBoxCols == 0 && kStoreBoxCols % 16 == 0);
  struct SharedStorage {
    // (TMA reads boxes from 128-byte addresses; the swizzle repeats every 256 bytes)
    alignas(256) uint8_t bytes[kTileRows * kPitch];
  };
  using TensorStorage = SharedStorage;

  static Arguments arguments_of(const ReducedGemm& gemm) {
    Arguments arguments{};
    arguments.out = gemm.out;
    arguments.out_plane = gemm.out_plane;
    arguments.ld = gemm.ld;
    arguments.moduli = gemm.moduli;
    for (int i = 0; i < gemm.moduli; ++i) arguments.divisors[i] = gemm.divisors[i];
    arguments.tensor_stores = encode_output_map(gemm, kTileRows, &arguments.out_map);
    return arguments;
  }

  template <class Shape>
  static bool can_implement(const Shape& shape, const Arguments& arguments) {
    const int64_t cols = cute::get<1>(shape);
    return arguments.ld % 4 == 0 && arguments.ld >= cols && arguments.out_plane % 4 == 0 &&
           reinterpret_cast<uintptr_t>(arguments.out) % 4 == 0;
  }

  // Where byte (row, col) of the tile is staged. In boxes, the TMA's 32-byte swizzle: the two
  // 16-byte halves of a row trade places in rows 4 to 7 of every 8.
  template <bool kBoxed>
  CUTLASS_DEVICE static int staged_at(int row, int col) {
    if constexpr (kBoxed) {
      const int within = row * kStoreBoxCols + col % kStoreBoxCols;
      return col / kStoreBoxCols * kBoxBytes + (within ^ (((within >> 7) & 1) << 4));
    } else {
      return row * kPitch + col;
    }
  }

  // The residues of this thread's accumulators into the staged tile. Each two accumulators of a
  // warpgroup MMA, 2 i and 2 i + 1, hold columns c, c + 1 (c even) of one row: their two bytes go
  // in one 2-byte store (a warp's stores cover 8 rows x 8 bytes, in distinct banks with kPitch
  // and with the boxes' swizzle). Where the coordinates allow (checked once per tile on
  // constants but for the thread's first coordinates; the layout is CUTLASS's SM90 accumulator
  // layout, which tests/test_crt_paths.py checks bit for bit at every tile edge), every address
  // is one of two bases of the thread plus a constant; otherwise each byte's address is computed
  // in full.
  template <bool kBoxed, int kSums, class Coords>
  CUTLASS_DEVICE static void stage(const uint32_t (&residues)[kSums], const Coords& coords,
                                   uint8_t* staged) {
    using namespace cute;
    const int row0 = get<0>(coords(0)), col0 = get<1>(coords(0));
    // The least column offset, the greatest within a 16-byte half, and whether every row offset
    // is a multiple of 8 (constants once unrolled).
    int lowest = 0, widest = 0;
    bool rows_by_eight = true;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kSums; ++i) {
      const int offset = get<1>(coords(i)) - col0;
      lowest = cute::min(lowest, offset);
      widest = cute::max(widest, offset % 16);
      rows_by_eight = rows_by_eight && (get<0>(coords(i)) - row0) % 8 == 0;
    }
    const bool constant_offsets =
        col0 % 2 == 0 && lowest >= 0 &&
        (!kBoxed || (col0 >= 0 && col0 + widest < 16 && rows_by_eight));
    if (constant_offsets) {
      // In boxes, a byte's half of its row is its constant half (column offset bit 4) flipped
      // by the thread's row bit 2 (row offsets are multiples of 8): bases[half].
      uint8_t* bases[2];
      if constexpr (kBoxed) {
        const int flip = (row0 >> 2) & 1;
        bases[0] = staged + row0 * kStoreBoxCols + col0 + 16 * flip;
        bases[1] = staged + row0 * kStoreBoxCols + col0 + 16 * (flip ^ 1);
      } else {
        bases[0] = bases[1] = staged + row0 * kPitch + col0;
      }
      // byte (row0 + row, col0 + col)'s place
      const auto place = [&](int row, int col) {
        if constexpr (kBoxed) {
          return bases[(col % kStoreBoxCols) / 16] + col / kStoreBoxCols * kBoxBytes +
                 row * kStoreBoxCols + col % 16;
        } else {
          return bases[0] + row * kPitch + col;
        }
      };
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kSums; i += 2) {
        const int row = get<0>(coords(i)) - row0, col = get<1>(coords(i)) - col0;
        const bool paired = col % 2 == 0 && get<0>(coords(i + 1)) - row0 == row &&
                            get<1>(coords(i + 1)) - col0 == col + 1;
        if (paired) {
          // the two bytes (each below 256) side by side in one permute
          *reinterpret_cast<uint16_t*>(place(row, col)) =
              static_cast<uint16_t>(__byte_perm(residues[i], residues[i + 1], 0x0040));
        } else {
          CUTLASS_PRAGMA_UNROLL
          for (int v = 0; v < 2; ++v) {
            *place(get<0>(coords(i + v)) - row0, get<1>(coords(i + v)) - col0) =
                static_cast<uint8_t>(residues[i + v]);
          }
        }
      }
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kSums; ++i) {
        staged[staged_at<kBoxed>(get<0>(coords(i)), get<1>(coords(i)))] =
            static_cast<uint8_t>(residues[i]);
      }
    }
  }

  template <class Accumulators, class TiledMma>
  CUTLASS_DEVICE void finish_tile(const Params& params, const OutputTile& tile,
                                  const Accumulators& accumulators, TiledMma tiled_mma,
                                  int thread_idx, char* shared) {
    using namespace cute;
    // (an int: reduced_residue_gemms takes fewer than 2^31 planes)
    const ModulusDivisor divisor = params.divisors[static_cast<int>(tile.l) % params.moduli];
    // The threads that share the tile (both consumer warpgroups in the cooperative schedule; in
    // the ping-pong one each warpgroup's epilogue runs alone).
    constexpr int kThreads = decltype(size(tiled_mma))::value;
    uint8_t* staged = reinterpret_cast<SharedStorage*>(shared)->bytes;
    Tensor tile_coords =
        tiled_mma.get_thread_slice(thread_idx)
            .partition_C(make_identity_tensor(make_shape(Int<kTileRows>{}, Int<kTileCols>{})));
    // The previous tile's bytes have left the staging buffer before this tile's replace them
    // (copies this thread issued have been read; the barrier covers every thread's).
    cute::tma_store_wait<0>();
    cutlass::arch::NamedBarrier::sync(kThreads, 0);
    static_assert(decltype(size(accumulators))::value % 2 == 0);
    // The sums mod p, by the divisor's short or long form (one choice per launch).
    constexpr int kSums = decltype(size(accumulators))::value;
    uint32_t residues[kSums];
    if (divisor.short_sums) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kSums; ++i) residues[i] = divisor.template reduce<true>(accumulators(i));
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kSums; ++i) residues[i] = divisor.template reduce<false>(accumulators(i));
    }
    if (params.tensor_stores) {
      stage<true>(residues, tile_coords, staged);
    } else {
      stage<false>(residues, tile_coords, staged);
    }
    // The staged bytes are visible to the copy engine (the async proxy), then to every thread.
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::sync(kThreads, 0);
    // Nothing else stages into this buffer before the copies have read it: in the cooperative
    // schedule the barrier above spans both warpgroups; in the ping-pong one the warpgroups'
    // epilogues take turns (CUTLASS's order barrier), and each thread waits for its copies in
    // store_tail before the turn passes.
    if (params.tensor_stores) {
      if (thread_idx == 0) {
        for (int box = 0; box < kBoxes && box * kStoreBoxCols < tile.cols; ++box) {
          cute::SM90_TMA_STORE_3D::copy(&params.out_map, staged + box * kBoxBytes,
                                        static_cast<int32_t>(tile.col0 + box * kStoreBoxCols),
                                        static_cast<int32_t>(tile.row0),
                                        static_cast<int32_t>(tile.l));
        }
        cute::tma_store_arrive();
      }
      return;
    }
    uint8_t* out = params.out + tile.l * params.out_plane + tile.row0 * params.ld + tile.col0;
    // Bulk copies, one row per thread, where the tile has no more rows than threads.
    constexpr bool kBulk = kThreads >= kTileRows;
    const bool whole = tile.rows == kTileRows && tile.cols == kTileCols && params.ld % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 16 == 0;
    if (kBulk && whole) {
      if (thread_idx < kTileRows) {
        cute::SM90_BULK_COPY_S2G::copy(staged + thread_idx * kPitch,
                                       out + thread_idx * params.ld, kTileCols);
        cute::tma_store_arrive();
      }
      return;
    }
    constexpr int kWords = kTileCols / 4;
#pragma unroll 4
    for (int w = thread_idx; w < kTileRows * kWords; w += kThreads) {
      const int r = w / kWords, c = (w % kWords) * 4;
      if (r < tile.rows && c < tile.cols) {
        *reinterpret_cast<uint32_t*>(out + r * params.ld + c) =
            *reinterpret_cast<const uint32_t*>(staged + r * kPitch + c);
      }
    }
  }
};

// CUTLASS's sm90 adapter of an epilogue, plus the wait that ends a consumer's work: its row copies
// have read the staging buffer before the block's shared memory can go to another block.
template <class EpilogueOp>
struct ReducedEpilogueAdapter
    : cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<EpilogueOp> {
  using Base = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<EpilogueOp>;
  using Base::Base;
  template <class... States>
  CUTLASS_DEVICE auto store_tail(States... states) {
    cute::tma_store_wait<0>();
    return Base::store_tail(states...);
  }
};

// The GEMM of one tile shape (M x N x K), cluster and kernel schedule (CUTLASS's cooperative or
// ping-pong warp specialization), with k through shared memory in as many stages as fit.
template <class TileShape, class ClusterShape, class Schedule,
          class EpilogueOp = ReducedResidueEpilogue<cute::size<0>(TileShape{}),
                                                    cute::size<1>(TileShape{})>>
struct ReducedKernel {
  using Epilogue = ReducedEpilogueAdapter<EpilogueOp>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor, 16,
      int8_t, cutlass::layout::ColumnMajor, 16, int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      Schedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop,
                                                      Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  // CUTLASS's arguments for every plane of `gemm` (a ReducedGemm, or another description with
  // its operand fields that EpilogueOp::arguments_of takes; sizes checked by the caller to fit
  // int); swizzle: the tile scheduler's largest swizzle (1, 2, 4 or 8 tiles).
  template <class Description>
  static typename Gemm::Arguments arguments(const Description& gemm,
                                            const cutlass::KernelHardwareInfo& hardware,
                                            int swizzle = 1) {
    using namespace cute;
    const typename EpilogueOp::Arguments epilogue = EpilogueOp::arguments_of(gemm);
    typename Gemm::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {static_cast<int>(gemm.rows), static_cast<int>(gemm.cols),
         static_cast<int>(gemm.k_stride), static_cast<int>(gemm.planes)},
        {gemm.a, make_stride(gemm.k_stride, Int<1>{}, gemm.a_plane), gemm.b,
         make_stride(gemm.k_stride, Int<1>{}, gemm.b_plane)},
        epilogue,
        hardware};
    arguments.scheduler.max_swizzle_size = swizzle;
    return arguments;
  }
};

}  // namespace ozaki::cuda::reduced
