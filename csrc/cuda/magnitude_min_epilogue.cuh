// The epilogue of magnitude_min_gemm.cu: the reduced GEMM's kernel (reduced_kernel.cuh) with
// every tile's exact INT32 sums folded into one running minimum instead of being stored, so the
// plan estimate of scheme II writes and reads no m x n product matrix.
#pragma once

#include <climits>

#include "reduced_kernel.cuh"

namespace ozaki::cuda::reduced {

// The magnitude-min epilogue's arguments (a MagnitudeMinGemm's).
struct MagnitudeMinArguments {
  const bool* usable_a;
  const bool* usable_b;
  int64_t rows, cols;
  int32_t* smallest;
};

// The smallest sum of a kTileRows x kTileCols tile over its usable rows and columns (a
// MagnitudeMinGemm's), lowered into *smallest by one atomicMin per warp: a minimum of integers
// is exact and does not depend on the order, so the result is the same bits on every run. The
// tile's row and column flags are staged in shared memory first, so that the accumulators are
// masked without a branch or a global load each.
template <int kTileRows, int kTileCols>
class MagnitudeMinEpilogue
    : public EpilogueBase<MagnitudeMinEpilogue<kTileRows, kTileCols>, MagnitudeMinArguments> {
 public:
  using Base = EpilogueBase<MagnitudeMinEpilogue<kTileRows, kTileCols>, MagnitudeMinArguments>;
  using Base::Base;
  using typename Base::Arguments;
  using typename Base::Params;
  struct SharedStorage {
    uint8_t usable_row[kTileRows];
    uint8_t usable_col[kTileCols];
  };
  using TensorStorage = SharedStorage;

  static Arguments arguments_of(const MagnitudeMinGemm& gemm) {
    return Arguments{gemm.usable_a, gemm.usable_b, gemm.rows, gemm.cols, gemm.smallest};
  }
  template <class Shape>
  static bool can_implement(const Shape&, const Arguments& arguments) {
    return arguments.smallest != nullptr;
  }

  template <class Accumulators, class TiledMma>
  CUTLASS_DEVICE void finish_tile(const Params& params, const OutputTile& tile,
                                  const Accumulators& accumulators, TiledMma tiled_mma,
                                  int thread_idx, char* shared) {
    using namespace cute;
    const bool* usable_a = params.usable_a + tile.l * params.rows + tile.row0;
    const bool* usable_b = params.usable_b + tile.l * params.cols + tile.col0;
    SharedStorage& flags = *reinterpret_cast<SharedStorage*>(shared);
    constexpr int kThreads = decltype(size(tiled_mma))::value;
    // The previous tile's flags have been read by every thread before they are replaced.
    cutlass::arch::NamedBarrier::sync(kThreads, 0);
    for (int t = thread_idx; t < kTileRows + kTileCols; t += kThreads) {
      if (t < kTileRows) {
        flags.usable_row[t] = t < tile.rows && usable_a[t];
      } else {
        const int c = t - kTileRows;
        flags.usable_col[c] = c < tile.cols && usable_b[c];
      }
    }
    cutlass::arch::NamedBarrier::sync(kThreads, 0);
    Tensor tile_coords =
        tiled_mma.get_thread_slice(thread_idx)
            .partition_C(make_identity_tensor(make_shape(Int<kTileRows>{}, Int<kTileCols>{})));
    int32_t smallest = INT_MAX;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accumulators); ++i) {
      const bool usable =
          flags.usable_row[get<0>(tile_coords(i))] & flags.usable_col[get<1>(tile_coords(i))];
      smallest = min(smallest, usable ? static_cast<int32_t>(accumulators(i)) : INT_MAX);
    }
    smallest = __reduce_min_sync(0xffffffffu, smallest);
    if (threadIdx.x % 32 == 0 && smallest != INT_MAX) atomicMin(params.smallest, smallest);
  }
};

}  // namespace ozaki::cuda::reduced
