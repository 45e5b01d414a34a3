// Exact and wide scheme II's residue pass (csrc/cuda/crt.cu) on float64 rows like a Gaussian
// kernel matrix's (entries exp(-r), r up to 40), A's residues (unweighted): the kernel with a loop
// over run-time moduli (the library's past kExactFixedModuli) against the one with compile-time
// moduli (exact_residues_kernel<N>, the library's up to it), each also on a grid capped at 4
// blocks per SM, and the same loads and stores alone; "differ": bytes that differ from the loop
// kernel's (-1: not compared); "wrong": sampled residues that differ from a host reference
// ((m mod p) (2^s mod p) by plain remainders, made symmetric).
//   nvcc -O3 -std=c++20 -fmad=false --ftz=false -arch=sm_90 --expt-relaxed-constexpr \
//        scripts/probes/exact_residues.cu -o /tmp/exact_residues && /tmp/exact_residues
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>
#include "../../csrc/crt_exact.h"
#include "check.cuh"
#include "random_x.cuh"
#include "timing.cuh"
using namespace ozaki;

constexpr int kGroup = 8;
// kernel-matrix-like entries exp(-r), r in [0, 40), random sign
__global__ void make_entries(double* a, int64_t count, uint64_t seed) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count; t += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed ^ t);
    const double r = static_cast<double>(h >> 11) * 0x1p-53 * 40.0;
    a[t] = ((h & 1) ? -1.0 : 1.0) * exp(-r);
  }
}

// csrc/cuda/crt.cu's exact_residues_kernel (run-time moduli) for the rows of one matrix, aligned
__global__ void loop_kernel(const double* a, int64_t rows, int64_t k, int64_t k_stride, int exponent, ExactCrt crt,
                        const uint8_t* table, int8_t* out) {
  __shared__ uint8_t powers[2 * kExactMaxModuli * kExactTableShifts];
  for (int t = threadIdx.y * blockDim.x + threadIdx.x; t < 2 * crt.moduli * kExactTableShifts; t += blockDim.x * blockDim.y)
    powers[t] = table[t];
  __syncthreads();
  const int64_t groups_per_row = k_stride / kGroup;
  for (int64_t row = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; row < rows; row += int64_t(gridDim.y) * blockDim.y) {
    const double* entries = a + row * k;
    int8_t* row_out = out + row * k_stride;
    for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups_per_row; g += int64_t(gridDim.x) * blockDim.x) {
      const int64_t l0 = g * kGroup;
      double x[kGroup];
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const double2 d = __ldg(reinterpret_cast<const double2*>(entries + l0) + v);
        x[2 * v] = d.x; x[2 * v + 1] = d.y;
      }
      ExactEntry parts[kGroup];
#pragma unroll
      for (int c = 0; c < kGroup; ++c) parts[c] = exact_entry(x[c], exponent);
#pragma unroll 1
      for (int i = 0; i < crt.moduli; ++i) {
        const ExactModulus modulus = crt.modulus[i];
        __align__(8) int8_t residues[kGroup];
#pragma unroll
        for (int c = 0; c < kGroup; ++c) {
          const int s = parts[c].s;
          const uint32_t power = s < kExactTableShifts
                                     ? powers[exact_table_index(crt.moduli, parts[c].negative, i, s)]
                                     : signed_power(s, parts[c].negative, false, modulus);
          residues[c] = static_cast<int8_t>(exact_residue(parts[c], power, modulus));
        }
        *reinterpret_cast<uint2*>(row_out + i * rows * k_stride + l0) = *reinterpret_cast<const uint2*>(residues);
      }
    }
  }
}

// floor: the same loads and stores
__global__ void floor_kernel(const double* a, int64_t rows, int64_t k, int64_t k_stride, int moduli, int8_t* out) {
  const int64_t groups_per_row = k_stride / kGroup;
  for (int64_t row = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; row < rows; row += int64_t(gridDim.y) * blockDim.y) {
    for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups_per_row; g += int64_t(gridDim.x) * blockDim.x) {
      const int64_t l0 = g * kGroup;
      uint64_t acc = 0;
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const double2 d = __ldg(reinterpret_cast<const double2*>(a + row * k + l0) + v);
        acc ^= __double_as_longlong(d.x) ^ (__double_as_longlong(d.y) << 1);
      }
      for (int i = 0; i < moduli; ++i)
        *reinterpret_cast<uint64_t*>(out + i * rows * k_stride + row * k_stride + l0) = acc + i;
    }
  }
}

// csrc/cuda/crt.cu's exact_residues_kernel<N>: compile-time moduli (exact_residue_of), the
// remainders' constants immediates, three blocks per SM
template <int I, int N>
struct Moduli {
  __device__ static void run(const ExactEntry (&parts)[kGroup], const int (&first)[kGroup], const uint8_t* powers,
                             int8_t* out, int64_t plane) {
    if constexpr (I < N) {
      __align__(8) int8_t residues[kGroup];
#pragma unroll
      for (int c = 0; c < kGroup; ++c) {
        const uint32_t power = parts[c].s < kExactTableShifts ? powers[first[c] + I * kExactTableShifts] : 0u;  // s < 256 here
        residues[c] = static_cast<int8_t>(exact_residue_of<I>(parts[c], power));
      }
      *reinterpret_cast<uint2*>(out + I * plane) = *reinterpret_cast<const uint2*>(residues);
      Moduli<I + 1, N>::run(parts, first, powers, out, plane);
    }
  }
};
template <int N>
__global__ void __launch_bounds__(256, 3) unrolled(const double* a, int64_t rows, int64_t k, int64_t k_stride, int exponent, const uint8_t* table, int8_t* out) {
  __shared__ uint32_t words[2 * N * kExactTableShifts / 4];
  for (int t = threadIdx.y * blockDim.x + threadIdx.x; t < 2 * N * kExactTableShifts / 4; t += blockDim.x * blockDim.y)
    words[t] = reinterpret_cast<const uint32_t*>(table)[t];
  __syncthreads();
  const uint8_t* powers = reinterpret_cast<const uint8_t*>(words);
  const int64_t groups_per_row = k_stride / kGroup;
  for (int64_t row = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; row < rows; row += int64_t(gridDim.y) * blockDim.y) {
    for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups_per_row; g += int64_t(gridDim.x) * blockDim.x) {
      const int64_t l0 = g * kGroup;
      double x[kGroup];
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const double2 d = __ldg(reinterpret_cast<const double2*>(a + row * k + l0) + v);
        x[2 * v] = d.x; x[2 * v + 1] = d.y;
      }
      ExactEntry parts[kGroup];
      int first[kGroup];
#pragma unroll
      for (int c = 0; c < kGroup; ++c) {
        parts[c] = exact_entry(x[c], exponent);
        first[c] = exact_table_index(N, parts[c].negative, 0, parts[c].s < kExactTableShifts ? parts[c].s : 0);
      }
      Moduli<0, N>::run(parts, first, powers, out + row * k_stride + l0, rows * k_stride);
    }
  }
}

// Sampled residues of out (modulus i's plane at i * rows * k_stride) against plain remainders.
int64_t wrong_samples(const std::vector<double>& a, const std::vector<int8_t>& out, int64_t rows, int64_t k,
                      int64_t k_stride, int exponent, const ExactCrt& crt) {
  int64_t wrong = 0;
  for (int64_t t = 0; t < 20000; ++t) {
    const int64_t row = int64_t(mix(t) % uint64_t(rows)), l = int64_t(mix(t + 99) % uint64_t(k));
    const ExactEntry x = exact_entry(a[row * k + l], exponent);
    for (int i = 0; i < crt.moduli; ++i) {
      const int64_t p = crt.modulus[i].p;
      int64_t power = 1;
      for (int e = 0; e < x.s; ++e) power = power * 2 % p;
      int64_t r = int64_t(x.m % uint64_t(p)) * power % p;
      if (x.negative) r = (p - r) % p;
      const int64_t symmetric = p == 256 ? (r >= 128 ? r - 256 : r) : (r > (p - 1) / 2 ? r - p : r);
      wrong += out[(i * rows + row) * k_stride + l] != symmetric;
    }
  }
  return wrong;
}

template <int N>
void run(int64_t n, int sms, int exponent) {
  const int64_t k = n, k_stride = (n + 15) / 16 * 16, rows = n;
  double* a; int8_t* out[2]; uint8_t* table;
  CHECK(cudaMalloc(&a, rows * k * 8));
  for (auto& o : out) CHECK(cudaMalloc(&o, N * rows * k_stride));
  const ExactCrt crt = exact_crt(N);
  std::vector<uint8_t> host_table(2 * N * kExactTableShifts);
  for (int t = 0; t < 2 * N * kExactTableShifts; ++t) host_table[t] = exact_table_entry(crt, false, t);
  CHECK(cudaMalloc(&table, host_table.size()));
  CHECK(cudaMemcpy(table, host_table.data(), host_table.size(), cudaMemcpyHostToDevice));
  make_entries<<<sms * 32, 256>>>(a, rows * k, 5);
  CHECK(cudaDeviceSynchronize());
  const int64_t per_row = k_stride / kGroup;
  // the library's geometry (row_launch at 256 threads), and one capped at 4 blocks per SM
  int x = 1; while (x < per_row && x < 256) x *= 2;
  const int y = 256 / x;
  const int grid_x = static_cast<int>(std::min<int64_t>((per_row + x - 1) / x, sms * 32));
  const int64_t cap = std::min<int64_t>((rows * per_row + 255) / 256, sms * 32);
  const int grid_y = static_cast<int>(std::clamp<int64_t>(cap / grid_x, 1, std::min<int64_t>((rows + y - 1) / y, 65535)));
  const dim3 block(x, y), grid(grid_x, grid_y);
  const dim3 capped(grid_x, std::max(1, std::min(grid_y, sms * 4 / grid_x)));
  const double bytes = double(rows) * k * 8 + double(N) * rows * k_stride;
  std::vector<double> host_a(rows * k);
  CHECK(cudaMemcpy(host_a.data(), a, host_a.size() * 8, cudaMemcpyDeviceToHost));
  auto report = [&](const char* name, float ms, int which) {
    int64_t differ = -1, wrong = -1;
    if (which >= 0) {
      std::vector<int8_t> r0(N * rows * k_stride), r1(N * rows * k_stride);
      CHECK(cudaMemcpy(r0.data(), out[0], r0.size(), cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(r1.data(), out[1], r1.size(), cudaMemcpyDeviceToHost));
      differ = 0; for (size_t t = 0; t < r0.size(); ++t) differ += r0[t] != r1[t];
      wrong = wrong_samples(host_a, r1, rows, k, k_stride, exponent, crt);
    }
    std::printf("exact residues N=%2d %5lld^2 E=%d %-34s %.3f ms (%.2f TB/s) differ %lld wrong %lld\n", N, (long long)n,
                exponent, name, ms, bytes / ms * 1e-9, (long long)differ, (long long)wrong);
  };
  report("loop over run-time moduli", median_ms([&] { loop_kernel<<<grid, block>>>(a, rows, k, k_stride, exponent, crt, table, out[0]); }, 7), -1);
  report("loop, 4 blocks per SM", median_ms([&] { loop_kernel<<<capped, block>>>(a, rows, k, k_stride, exponent, crt, table, out[1]); }, 7), 0);
  report("loads and stores only", median_ms([&] { floor_kernel<<<grid, block>>>(a, rows, k, k_stride, N, out[1]); }, 7), -1);
  report("compile-time moduli", median_ms([&] { unrolled<N><<<grid, block>>>(a, rows, k, k_stride, exponent, table, out[1]); }, 7), 0);
  report("compile-time moduli, 4 blocks/SM", median_ms([&] { unrolled<N><<<capped, block>>>(a, rows, k, k_stride, exponent, table, out[1]); }, 7), 0);
  CHECK(cudaGetLastError());
  CHECK(cudaFree(a)); for (auto& o : out) CHECK(cudaFree(o)); CHECK(cudaFree(table));
}

int main() {
  int sms; CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  run<17>(6000, sms, 64);
  run<18>(6000, sms, 64);
  run<17>(16384, sms, 64);
  run<24>(6000, sms, 100);
  return 0;
}
