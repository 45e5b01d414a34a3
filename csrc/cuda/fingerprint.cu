// CUDA kernels of ozaki::fingerprint (csrc/fingerprint.h): a fixed grid of blocks each sums the
// terms of its share of the entries (at their row-major positions; matrices contiguous by rows or
// by columns in memory order and 16-byte vectors, others with any strides), then one block adds
// the blocks' sums. Addition modulo 2^64 is exact and order-free, so the digest is the CPU's.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../checks.h"
#include "../fingerprint.h"
#include "ops.h"

namespace ozaki::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 1024;  // blocks' sums, at most; a block per 2^13 entries below that
constexpr int kAhead = 4;      // loads in flight per thread
// Contiguous matrices: one wave of this many blocks per multiprocessor, each thread with this
// many 16-byte loads in flight.
constexpr int kContiguousBlocksPerSm = 4;
constexpr int kVectorsAhead = 4;

__device__ __forceinline__ uint64_t block_sum(uint64_t value) {
  __shared__ uint64_t warps[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = value;
  __syncthreads();
  value = threadIdx.x < kThreads / 32 ? warps[threadIdx.x] : 0;
  if (threadIdx.x < 32) {
    for (int offset = 16; offset > 0; offset /= 2) {
      value += __shfl_down_sync(0xffffffffu, value, offset);
    }
  }
  return value;  // in thread 0
}

// Thread t of the grid takes positions t, t + T, t + 2T, ... (T threads in all), carrying its row
// and column from one to the next without a division.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    fingerprint_kernel(const T* __restrict__ a, int64_t m, int64_t k, int64_t row_step,
                       int64_t step, uint64_t* __restrict__ sums) {
  const int64_t total_threads = int64_t(gridDim.x) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t rows_on = total_threads / k, columns_on = total_threads % k;
  int64_t r = first / k, c = first % k;
  uint64_t sum = 0;
  while (r < m) {
    T x[kAhead];
    int64_t rows[kAhead], columns[kAhead];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      rows[i] = r;
      columns[i] = c;
      x[i] = r < m ? a[r * row_step + c * step] : T(0);
      c += columns_on;
      r += rows_on;
      if (c >= k) {
        c -= k;
        ++r;
      }
    }
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      if (rows[i] < m) {
        sum += fingerprint_term(entry_bits(x[i]), static_cast<uint64_t>(rows[i] * k + columns[i]));
      }
    }
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) sums[blockIdx.x] = sum;
}

// The row-major position of the entry at memory offset `offset` of an (m, k) matrix stored
// contiguously by rows (the offset itself) or by columns (kColumns: row offset % m of column
// offset / m). Small: 32-bit division where the offset fits.
template <bool kColumns>
__device__ __forceinline__ uint64_t row_major_position(int64_t offset, int64_t m, int64_t k) {
  if constexpr (!kColumns) {
    return static_cast<uint64_t>(offset);
  } else {
    int64_t column;
    if (offset < (int64_t(1) << 32) && m < (int64_t(1) << 32)) {
      column = static_cast<uint32_t>(offset) / static_cast<uint32_t>(m);
    } else {
      column = offset / m;
    }
    return static_cast<uint64_t>((offset - column * m) * k + column);
  }
}

// An (m, k) matrix whose count = m k entries are contiguous in memory, by rows or (kColumns) by
// columns, read in memory order: the first `head` (up to a 16-byte boundary) and those past the
// last whole vector by block 0, the 16-byte vectors between by thread t of the grid taking
// vectors t, t + T, t + 2T, ... (T threads in all); each term at its row-major position.
template <typename T, bool kColumns>
__global__ void __launch_bounds__(kThreads)
    contiguous_fingerprint_kernel(const T* __restrict__ a, int64_t m, int64_t k, int64_t head,
                                  uint64_t* __restrict__ sums) {
  using Vector = std::conditional_t<sizeof(T) == 8, double2, float4>;
  constexpr int kPerVector = 16 / sizeof(T);
  const int64_t count = m * k;
  const int64_t vectors = (count - head) / kPerVector;
  const auto* body = reinterpret_cast<const Vector*>(a + head);
  const int64_t threads = int64_t(gridDim.x) * kThreads;
  uint64_t sum = 0;
  const auto add = [&](const Vector& x, int64_t v) {
    const T* entries = reinterpret_cast<const T*>(&x);
#pragma unroll
    for (int c = 0; c < kPerVector; ++c) {
      sum += fingerprint_term(entry_bits(entries[c]),
                              row_major_position<kColumns>(head + v * kPerVector + c, m, k));
    }
  };
  int64_t v = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  for (; v + (kVectorsAhead - 1) * threads < vectors; v += kVectorsAhead * threads) {
    Vector x[kVectorsAhead];
#pragma unroll
    for (int i = 0; i < kVectorsAhead; ++i) x[i] = __ldg(body + v + i * threads);
#pragma unroll
    for (int i = 0; i < kVectorsAhead; ++i) add(x[i], v + i * threads);
  }
  for (; v < vectors; v += threads) add(__ldg(body + v), v);
  const int64_t rest = head + vectors * kPerVector;  // entries [rest, count) are left
  if (blockIdx.x == 0 && threadIdx.x < head + (count - rest)) {
    const int64_t offset = threadIdx.x < head ? threadIdx.x : rest + (threadIdx.x - head);
    sum += fingerprint_term(entry_bits(a[offset]), row_major_position<kColumns>(offset, m, k));
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) sums[blockIdx.x] = sum;
}

__global__ void __launch_bounds__(kThreads)
    total_kernel(const uint64_t* sums, int count, uint64_t* out) {
  uint64_t sum = 0;
  for (int i = threadIdx.x; i < count; i += kThreads) sum += sums[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *out = sum;
}

}  // namespace

at::Tensor fingerprint(const at::Tensor& a) {
  constexpr const char* op = "ozaki::fingerprint";
  check_fingerprint_argument(a, op);
  const c10::cuda::CUDAGuard guard(a.device());
  const int64_t m = a.size(0), k = a.size(1);
  if (m == 0 || k == 0) return at::zeros({}, a.options().dtype(at::kLong));
  at::Tensor out = at::empty({}, a.options().dtype(at::kLong));  // total_kernel writes it
  // contiguous by rows, or by columns (the transpose of a contiguous matrix)
  const bool by_rows = a.is_contiguous();
  const bool by_columns = !by_rows && a.stride(0) == 1 && a.stride(1) == m;
  const bool contiguous = by_rows || by_columns;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t most = contiguous ? std::min<int64_t>(kBlocks, sms * kContiguousBlocksPerSm)
                                  : kBlocks;
  const int blocks =
      static_cast<int>(std::clamp<int64_t>((m * k + (int64_t(1) << 13) - 1) >> 13, 1, most));
  at::Tensor sums = at::empty({blocks}, a.options().dtype(at::kLong));
  auto* block_sums = reinterpret_cast<uint64_t*>(sums.mutable_data_ptr<int64_t>());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    const scalar_t* data = a.const_data_ptr<scalar_t>();
    if (contiguous) {
      // entries before the first 16-byte boundary (the data is aligned to its entries)
      const auto misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(data) % 16);
      const int64_t head = std::min<int64_t>(
          m * k, misaligned == 0 ? 0 : (16 - misaligned) / int64_t(sizeof(scalar_t)));
      if (by_rows) {
        contiguous_fingerprint_kernel<scalar_t, false>
            <<<blocks, kThreads, 0, stream>>>(data, m, k, head, block_sums);
      } else {
        contiguous_fingerprint_kernel<scalar_t, true>
            <<<blocks, kThreads, 0, stream>>>(data, m, k, head, block_sums);
      }
    } else {
      fingerprint_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
          data, m, k, a.stride(0), a.stride(1), block_sums);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  auto* total = reinterpret_cast<uint64_t*>(out.mutable_data_ptr<int64_t>());
  total_kernel<<<1, kThreads, 0, stream>>>(block_sums, blocks, total);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace ozaki::cuda
