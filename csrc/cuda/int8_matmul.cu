// CUDA kernel of ozaki::int8_matmul: the INT8 GEMM of the int8 and crt backends (int8_gemm.cuh).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "../checks.h"
#include "../workspace.h"
#include "int8_gemm.cuh"
#include "ops.h"

namespace ozaki::cuda {

at::Tensor int8_matmul(const at::Tensor& a, const at::Tensor& bt) {
  constexpr const char* op = "ozaki::int8_matmul";
  check_int8_operands(a, bt, op);
  check_same_device(a, {&bt}, op);
  const c10::cuda::CUDAGuard guard(a.device());
  const int64_t m = a.size(0), k = a.size(1), n = bt.size(0);
  if (m == 0 || n == 0 || k == 0) return at::zeros({m, n}, a.options().dtype(at::kInt));
  // cuBLAS wants 16-byte rows from a 16-byte boundary: pad with zeros (which add nothing) where k
  // is not a multiple of 16, and copy a view that starts between boundaries.
  const int64_t k_stride = round_up(k, 16);
  const auto padded = [&](const at::Tensor& t) {
    if (k_stride != k) return at::constant_pad_nd(t, {0, k_stride - k}, 0).contiguous();
    return reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0 ? t : t.clone();
  };
  const at::Tensor a16 = padded(a), b16 = padded(bt);
  const int64_t ld = round_up(n, 4);
  at::Tensor out = at::empty({m, ld}, a.options().dtype(at::kInt));
  exact_int8_gemm(at::cuda::getCurrentCUDABlasHandle(), b16.const_data_ptr<int8_t>(),
                  a16.const_data_ptr<int8_t>(), n, m, k_stride, out.mutable_data_ptr<int32_t>(), ld);
  return ld == n ? out : out.narrow(1, 0, n).contiguous();
}

}  // namespace ozaki::cuda
