// Column chunks and row launches of the reduced residue GEMMs (csrc/cuda/reduced_gemm.cuh) sized
// so that their tiles fill whole waves of the GPU. A persistent GEMM launch of T tiles on S
// multiprocessors takes ceil(T / S) tile times; where the workspace budget forces column chunks
// (16384^3 with 15 moduli: 32 chunks of 512 columns, 3840 tiles each, 29.1 waves run in 30), every
// launch ends in a wave that leaves most multiprocessors idle. plan_tile_waves picks, within the
// same budget, the chunk width and the rows per launch whose launches take the fewest tile times,
// each launch charged a fixed overhead. Chunking never changes the bits.
#pragma once

#include <algorithm>
#include <cstdint>

#include "workspace.h"

namespace ozaki {

// The reduced GEMMs' launches as the plan counts them: `planes` output planes (moduli) of tiles
// of tile_rows x tile_cols, `slots` tiles at a time (one per multiprocessor), rows per launch a
// multiple of row_step (a cluster's rows) unless all of them; inner: the padded inner dimension,
// which sets a tile's time.
struct TileWaves {
  int64_t planes;
  int64_t tile_rows, tile_cols, row_step;
  int64_t slots;
  int64_t inner;
};

// A launch's fixed cost (its start, its last tiles' drain and the reconstruction's launch), in
// entries of the inner dimension of one wave: about 10 us on an H100 or H200.
constexpr int64_t kLaunchOverheadInner = 2048;

// The cost of one launch of rows x cols outputs: its waves times the inner dimension, plus the
// overhead.
inline int64_t launch_cost(const TileWaves& waves, int64_t rows, int64_t cols) {
  const int64_t tiles =
      waves.planes * ceil_div(rows, waves.tile_rows) * ceil_div(cols, waves.tile_cols);
  return ceil_div(tiles, waves.slots) * waves.inner + kLaunchOverheadInner;
}

// The cost of m x n outputs in column chunks of `cols`, each in row launches of `rows`.
inline int64_t chunks_cost(const TileWaves& waves, int64_t m, int64_t n, int64_t rows,
                           int64_t cols) {
  const auto chunk = [&](int64_t width) {
    return m / rows * launch_cost(waves, rows, width) +
           (m % rows != 0 ? launch_cost(waves, m % rows, width) : 0);
  };
  return n / cols * chunk(cols) + (n % cols != 0 ? chunk(n % cols) : 0);
}

struct WavePlan {
  int64_t cols;  // columns per chunk
  int64_t rows;  // rows per launch within a chunk
};

// Plans that save less than this share of the given plan's cost are not taken: the count leaves
// out the passes around the GEMMs and the GEMMs' reuse of L2, and on the H200 a plan it counted
// 0.2% cheaper at 12288^3 ran 4-8% slower.
constexpr double kLeastSaving = 0.01;

// The plan of least cost among chunk widths that are multiples of tile_cols (or n) and row
// launches that are multiples of row_step (or m) whose workspace, bytes(rows, cols), fits
// `budget`, where it saves at least kLeastSaving of the cost of `given` (all m rows a launch);
// `given` otherwise. At most kWidths widths (the widest) and kRowCounts row counts (the most
// rows) are tried.
template <typename Bytes>
WavePlan plan_tile_waves(const TileWaves& waves, int64_t m, int64_t n, WavePlan given,
                         int64_t budget, Bytes bytes) {
  constexpr int64_t kWidths = 64, kRowCounts = 128;
  const int64_t given_cost = chunks_cost(waves, m, n, given.rows, given.cols);
  WavePlan best = given;
  int64_t best_cost = given_cost;
  const int64_t widest_step = ceil_div(n, waves.tile_cols);
  const int64_t most_steps = ceil_div(m, waves.row_step);
  for (int64_t w = widest_step; w >= 1 && w > widest_step - kWidths; --w) {
    const int64_t cols = std::min(n, w * waves.tile_cols);
    for (int64_t s = most_steps; s >= 1 && s > most_steps - kRowCounts; --s) {
      const int64_t rows = std::min(m, s * waves.row_step);
      if (bytes(rows, cols) > budget) continue;
      const int64_t cost = chunks_cost(waves, m, n, rows, cols);
      if (cost < best_cost) {
        best_cost = cost;
        best = WavePlan{cols, rows};
      }
    }
  }
  return best_cost <= static_cast<double>(given_cost) * (1.0 - kLeastSaving) ? best : given;
}

}  // namespace ozaki
