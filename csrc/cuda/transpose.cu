// CUDA kernel of ozaki::transposed: b.mT.contiguous(), the bt (B's columns as rows) that the
// product operators read. torch's generic strided copy reads or writes one side with the stride of
// a whole row; staging 32x32 tiles in shared memory makes both the reads (along n) and the writes
// (along k) coalesced.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../checks.h"
#include "ops.h"

namespace ozaki::cuda {
namespace {

constexpr int kTile = 32;
// Threads per block: kTile x kTileRows, each moving kTile / kTileRows entries of a tile (more
// loads in flight per thread than one entry each, and a small block).
constexpr int kTileRows = 8;
// gridDim.y and gridDim.z are at most 65535: more row tiles or batch elements are looped over.
constexpr int64_t kMaxGridYZ = 65535;

// out[e][j][i] = b[e * stride_e + i * stride_k + j] (i < k, j < n), b with unit stride along n.
// Block (x, y, z) moves the tile of rows [32 y, 32 y + 32) and columns [32 x, 32 x + 32) of element
// z, then those gridDim.y tiles and gridDim.z elements further on. The loops are uniform across the
// block, so the barriers inside them are safe.
template <typename T>
__global__ void __launch_bounds__(kTile * kTileRows)
    transpose_kernel(const T* __restrict__ b, int64_t batch, int64_t k, int64_t n, int64_t stride_e,
                     int64_t stride_k, T* __restrict__ out) {
  // One padding column: a warp reading a tile column (the writes) then hits distinct banks; without
  // it all 32 entries of the column would sit in one bank (a 32-way conflict).
  __shared__ T tile[kTile][kTile + 1];
  const int64_t j0 = int64_t(blockIdx.x) * kTile;
  const int64_t row_tiles = (k + kTile - 1) / kTile;
  for (int64_t e = blockIdx.z; e < batch; e += gridDim.z) {
    const T* in = b + e * stride_e;
    T* to = out + e * n * k;
    for (int64_t tile_row = blockIdx.y; tile_row < row_tiles; tile_row += gridDim.y) {
      const int64_t i0 = tile_row * kTile;
      // Reads: a warp takes 32 consecutive entries of one row of b.
      const int64_t j = j0 + threadIdx.x;
#pragma unroll
      for (int r = 0; r < kTile; r += kTileRows) {
        const int64_t i = i0 + threadIdx.y + r;
        if (i < k && j < n) tile[threadIdx.y + r][threadIdx.x] = in[i * stride_k + j];
      }
      __syncthreads();
      // Writes: a warp stores 32 consecutive entries of one row of out (a column of b).
      const int64_t i = i0 + threadIdx.x;
#pragma unroll
      for (int c = 0; c < kTile; c += kTileRows) {
        const int64_t jc = j0 + threadIdx.y + c;
        if (jc < n && i < k) to[jc * k + i] = tile[threadIdx.x][threadIdx.y + c];
      }
      __syncthreads();  // the next tile overwrites this one
    }
  }
}

}  // namespace

at::Tensor transposed(const at::Tensor& b) {
  constexpr const char* op = "ozaki::transposed";
  check_transposed_argument(b, op);
  const c10::cuda::CUDAGuard guard(b.device());
  const bool batched = b.dim() == 3;
  const int64_t batch = batched ? b.size(0) : 1, k = b.size(-2), n = b.size(-1);
  at::Tensor out = at::empty(batched ? std::vector<int64_t>{batch, n, k} : std::vector<int64_t>{n, k},
                             b.options());
  if (out.numel() == 0) return out;
  // The tiles read rows of b along n. Any other layout is torch's copy: above all b = X.mT of a
  // row-major X, whose transpose is a plain copy of X, and views strided along n.
  if (n > 1 && b.stride(-1) != 1) {
    out.copy_(b.mT());
    return out;
  }
  const int64_t stride_e = batched ? b.stride(0) : 0, stride_k = b.stride(-2);
  const int64_t row_tiles = (k + kTile - 1) / kTile, col_tiles = (n + kTile - 1) / kTile;
  // gridDim.x holds up to 2^31 - 1 column tiles: more would need a row of over 2^36 entries.
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(std::min(row_tiles, kMaxGridYZ)),
                  static_cast<unsigned>(std::min(batch, kMaxGridYZ)));
  const dim3 block(kTile, kTileRows);
  AT_DISPATCH_FLOATING_TYPES(b.scalar_type(), op, [&] {
    transpose_kernel<scalar_t><<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        b.const_data_ptr<scalar_t>(), batch, k, n, stride_e, stride_k,
        out.mutable_data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace ozaki::cuda
