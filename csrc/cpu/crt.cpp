// CPU kernels of Ozaki scheme II (csrc/crt.h): ozaki::row_norm_exponents, ozaki::crt_magnitude and
// ozaki::gemm_crt, the bit-exact reference of the CUDA backend. Residue products come from
// float64 GEMMs, exact because every partial sum is an integer below 2^31.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>

#include "../checks.h"
#include "../crt.h"
#include "../workspace.h"
#include "rows.h"

namespace ozaki::cpu {
namespace {

constexpr int64_t kDefaultWorkspaceBytes = int64_t(256) << 20;

at::Tensor row_norm_exponents(const at::Tensor& a, const at::Tensor& tau) {
  constexpr const char* op = "ozaki::row_norm_exponents";
  check_matrix(a, op, "a");
  const int64_t rows = a.size(0), k = a.size(1);
  check_row_vector(tau, rows, at::kInt, op, "tau");
  at::Tensor nu = at::empty({rows}, tau.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    const scalar_t* data = a.const_data_ptr<scalar_t>();
    const int* tau_in = tau.const_data_ptr<int>();
    int* nu_out = nu.mutable_data_ptr<int>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        uint64_t sum = 0;
        for (int64_t l = 0; l < k; ++l) sum += norm_square_units(static_cast<double>(data[i * k + l]), tau_in[i]);
        nu_out[i] = norm_exponent(sum, tau_in[i]);
      }
    });
  });
  return nu;
}

// Per row: the magnitude digits (float64, exact) of a (rows, k) or (batch, rows, k) operand, tau
// indexed by the rows of the flattened operand.
template <typename T>
at::Tensor magnitude_digit_rows(const at::Tensor& a, const int* tau) {
  const int64_t k = a.size(-1), rows = k == 0 ? 0 : a.numel() / k;
  at::Tensor digits = at::empty(a.sizes(), a.options().dtype(at::kDouble));
  const T* in = a.const_data_ptr<T>();
  double* out = digits.mutable_data_ptr<double>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin * k; e < end * k; ++e) out[e] = magnitude_digit(static_cast<double>(in[e]), tau[e / k]);
  });
  return digits;
}

at::Tensor crt_magnitude(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                         const at::Tensor& tau_b, const at::Tensor& nu_a, const at::Tensor& nu_b,
                         const at::Tensor& usable_a, const at::Tensor& usable_b) {
  constexpr const char* op = "ozaki::crt_magnitude";
  const ProductShape shape =
      check_crt_magnitude_arguments(a, bt, tau_a, tau_b, nu_a, nu_b, usable_a, usable_b, op);
  const int64_t m = shape.m, n = shape.n;
  at::Tensor da, db;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    da = magnitude_digit_rows<scalar_t>(a, tau_a.const_data_ptr<int>());
    db = magnitude_digit_rows<scalar_t>(bt, tau_b.const_data_ptr<int>());
  });
  // Exact (integers below 2^31), and only pairs of rows of the same element.
  const at::Tensor digits = shape.batched ? at::bmm(da, db.transpose(1, 2)) : at::mm(da, db.t());
  const double* d = digits.const_data_ptr<double>();
  const int *ta = tau_a.const_data_ptr<int>(), *tb = tau_b.const_data_ptr<int>();
  const int *na = nu_a.const_data_ptr<int>(), *nb = nu_b.const_data_ptr<int>();
  const bool *ua = usable_a.const_data_ptr<bool>(), *ub = usable_b.const_data_ptr<bool>();
  double smallest = std::numeric_limits<double>::infinity();
  for (int64_t e = 0; e < shape.batch; ++e) {
    for (int64_t i = e * m; i < (e + 1) * m; ++i) {  // rows of the flattened a and bt
      if (!ua[i]) continue;
      for (int64_t j = e * n; j < (e + 1) * n; ++j) {
        if (!ub[j]) continue;
        const double value = d[i * n + (j - e * n)] * magnitude_factor(ta[i], na[i]) *
                             magnitude_factor(tb[j], nb[j]);
        smallest = value < smallest ? value : smallest;
      }
    }
  }
  return at::scalar_tensor(smallest, a.options().dtype(at::kDouble));
}

// Residues of rows [first, first + count) of a, modulus i at out[(i * count + r) * k + l].
template <int N, typename T>
void residue_rows(const T* a, int64_t k, int64_t first, int64_t count, const int* shift, double* out) {
  at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t l = 0; l < k; ++l) {
        residues_of<N>(static_cast<double>(a[(first + r) * k + l]), shift[first + r],
                       [&](int i, int residue) { out[(i * count + r) * k + l] = residue; });
      }
    }
  });
}

template <int N, typename T>
void gemm_crt_chunks(const at::Tensor& a, const at::Tensor& bt, const int* shift_a, const int* shift_b,
                     const bool* nonfinite_a, const bool* nonfinite_b, int64_t budget, at::Tensor& out) {
  const int64_t m = a.size(0), k = a.size(1), n = bt.size(0);
  const T* a_data = a.const_data_ptr<T>();
  const T* b_data = bt.const_data_ptr<T>();
  T* out_data = out.mutable_data_ptr<T>();
  const WorkspaceShape shape{k, N, N, 8, 8, 1};
  const ChunkPlan plan = plan_chunks(m, n, shape, budget);
  const auto f64 = a.options().dtype(at::kDouble);
  for (int64_t j0 = 0; j0 < n; j0 += plan.cols) {
    const int64_t cols = std::min(plan.cols, n - j0);
    at::Tensor b_res = at::empty({N, cols, k}, f64);
    residue_rows<N>(b_data, k, j0, cols, shift_b, b_res.mutable_data_ptr<double>());
    for (int64_t i0 = 0; i0 < m; i0 += plan.rows) {
      const int64_t rows = std::min(plan.rows, m - i0);
      at::Tensor a_res = at::empty({N, rows, k}, f64);
      residue_rows<N>(a_data, k, i0, rows, shift_a, a_res.mutable_data_ptr<double>());
      const at::Tensor products = at::bmm(a_res, b_res.transpose(1, 2)).contiguous();  // exact
      const double* p = products.const_data_ptr<double>();
      at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t gi = i0 + i, gj = j0 + j;
            double value;
            if (nonfinite_a[gi] || nonfinite_b[gj]) {
              value = nonfinite_dot(a_data + gi * k, b_data + gj * k, k);
            } else {
              int32_t residues[N];
              for (int modulus = 0; modulus < N; ++modulus) {
                residues[modulus] = static_cast<int32_t>(p[(modulus * rows + i) * cols + j]);
              }
              const int64_t unit = -(int64_t(shift_a[gi]) + shift_b[gj]);
              value = crt_reconstruct<N>(residues, unit, format_of<T>());
            }
            out_data[gi * n + gj] = static_cast<T>(value);
          }
        }
      });
    }
  }
}

at::Tensor gemm_crt(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& shift_a,
                    const at::Tensor& shift_b, const at::Tensor& nonfinite_a,
                    const at::Tensor& nonfinite_b, int64_t moduli, int64_t workspace_bytes) {
  constexpr const char* op = "ozaki::gemm_crt";
  const ProductShape shape =
      check_gemm_crt_arguments(a, bt, shift_a, shift_b, nonfinite_a, nonfinite_b, moduli, op);
  const int64_t m = shape.m, k = shape.k, n = shape.n;
  if (shape.batch == 0 || m == 0 || n == 0 || k == 0) return at::zeros(shape.out_sizes(), a.options());
  check_crt_inner(k, op);
  at::Tensor out = at::empty(shape.out_sizes(), a.options());
  const int64_t budget = workspace_bytes > 0 ? workspace_bytes : kDefaultWorkspaceBytes;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    with_moduli_count(static_cast<int>(moduli), [&](auto count) {
      // Element by element: each gets exactly the bits of its own 2-D product.
      for (int64_t e = 0; e < shape.batch; ++e) {
        at::Tensor out_e = batch_element(out, shape.batched, e);
        gemm_crt_chunks<decltype(count)::value, scalar_t>(
            batch_element(a, shape.batched, e), batch_element(bt, shape.batched, e),
            shift_a.const_data_ptr<int>() + e * m, shift_b.const_data_ptr<int>() + e * n,
            nonfinite_a.const_data_ptr<bool>() + e * m, nonfinite_b.const_data_ptr<bool>() + e * n,
            budget, out_e);
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(ozaki, CPU, m) {
  m.impl("row_norm_exponents", &row_norm_exponents);
  m.impl("crt_magnitude", &crt_magnitude);
  m.impl("gemm_crt", &gemm_crt);
}

}  // namespace ozaki::cpu
