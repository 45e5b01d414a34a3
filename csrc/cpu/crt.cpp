// CPU kernels of Ozaki scheme II (csrc/crt.h): ozaki::row_norm_scales (alone or with row_stats),
// ozaki::crt_row_scales, crt_wide_exponents, crt_magnitude and gemm_crt, the bit-exact reference of the
// CUDA backend, and the k-shard operators row_norm_square_sums, crt_magnitude_digits,
// crt_residue_products and crt_round. Residue products come from float64 GEMMs, exact because every
// partial sum is an integer below 2^31.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <vector>

#include "../checks.h"
#include "../crt.h"
#include "../crt_exact.h"
#include "../row_stats_output.h"
#include "../workspace.h"
#include "ops.h"
#include "rows.h"

namespace ozaki::cpu {
namespace {

constexpr int64_t kDefaultWorkspaceBytes = int64_t(256) << 20;

// The sum of norm_square_units over one row: an exact integer, so any order gives it.
template <typename T>
uint64_t row_norm_square_sum(const T* row, int64_t k, int tau) {
  uint64_t sum = 0;
  for (int64_t l = 0; l < k; ++l) sum += norm_square_units(static_cast<double>(row[l]), tau);
  return sum;
}

// Per row i of a: write(i, its row_norm_square_sum, tau_i).
template <typename Write>
void for_each_row_norm_square_sum(const at::Tensor& a, const int* tau, Write write) {
  const int64_t rows = a.size(0), k = a.size(1);
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "ozaki row norm sums", [&] {
    const scalar_t* data = a.const_data_ptr<scalar_t>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        write(i, row_norm_square_sum(data + i * k, k, tau[i]), tau[i]);
      }
    });
  });
}

}  // namespace

at::Tensor row_norm_scales(const at::Tensor& a, const at::Tensor& tau) {
  constexpr const char* op = "ozaki::row_norm_scales";
  check_matrix(a, op, "a");
  check_row_vector(tau, a.size(0), at::kInt, op, "tau");
  at::Tensor scales = at::empty({a.size(0)}, tau.options());
  int* out = scales.mutable_data_ptr<int>();
  for_each_row_norm_square_sum(a, tau.const_data_ptr<int>(), [&](int64_t i, uint64_t sum, int row_tau) {
    out[i] = norm_scale_code(sum, row_tau);
  });
  return scales;
}

// row_stats and row_norm_scales, row by row: the same values as the two operators.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> row_stats_with_norm_scales(
    const at::Tensor& a) {
  constexpr const char* op = "ozaki::row_stats_with_norm_scales";
  check_matrix(a, op, "a");
  const int64_t rows = a.size(0), k = a.size(1);
  const RowStatsOutput out(rows, a.options());
  at::Tensor scales = at::empty({rows}, a.options().dtype(at::kInt));
  int* scale_out = scales.mutable_data_ptr<int>();
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    const scalar_t* data = a.const_data_ptr<scalar_t>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const RowStats stats = row_stats_of(data + i * k, k);
        out.write(i, stats);
        const uint64_t square_sum = row_norm_square_sum(data + i * k, k, stats.tau());
        scale_out[i] = norm_scale_code(square_sum, stats.tau());
      }
    });
  });
  return {out.tau, out.bit_span, out.nonfinite, scales};
}

at::Tensor crt_row_scales(const at::Tensor& norm_scales, const at::Tensor& tau,
                          const at::Tensor& bit_span, int64_t t) {
  constexpr const char* op = "ozaki::crt_row_scales";
  check_crt_row_scales_arguments(norm_scales, tau, bit_span, t, op);
  at::Tensor out = at::empty_like(norm_scales);
  const int* norm = norm_scales.const_data_ptr<int>();
  const int* tau_in = tau.const_data_ptr<int>();
  const int* span_in = bit_span.const_data_ptr<int>();
  int* codes = out.mutable_data_ptr<int>();
  for (int64_t i = 0; i < out.size(0); ++i) {
    codes[i] = crt_row_scale_code(norm[i], tau_in[i], span_in[i], static_cast<int>(t));
  }
  return out;
}

at::Tensor crt_wide_exponents(const at::Tensor& norm_scales, const at::Tensor& tau,
                              const at::Tensor& bit_span, const at::Tensor& usable, int64_t t) {
  check_crt_wide_exponents_arguments(norm_scales, tau, bit_span, usable, t,
                                     "ozaki::crt_wide_exponents");
  at::Tensor out = at::empty_like(norm_scales);
  const int* norm = norm_scales.const_data_ptr<int>();
  const int* tau_in = tau.const_data_ptr<int>();
  const int* span_in = bit_span.const_data_ptr<int>();
  const bool* usable_in = usable.const_data_ptr<bool>();
  int* exponents = out.mutable_data_ptr<int>();
  for (int64_t i = 0; i < out.size(0); ++i) {
    exponents[i] =
        wide_row_exponent(norm[i], tau_in[i], span_in[i], usable_in[i], static_cast<int>(t));
  }
  return out;
}

at::Tensor crt_row_bounds(const at::Tensor& tau, const at::Tensor& bit_span,
                          const at::Tensor& nonfinite, const at::Tensor& norm_scales) {
  check_crt_row_bounds_arguments(tau, bit_span, nonfinite, norm_scales, "ozaki::crt_row_bounds");
  const int* tau_in = tau.const_data_ptr<int>();
  const int* span_in = bit_span.const_data_ptr<int>();
  const bool* nonfinite_in = nonfinite.const_data_ptr<bool>();
  const int* norm = norm_scales.const_data_ptr<int>();
  double span = 0.0, bound = 0.0;
  for (int64_t i = 0; i < tau.size(0); ++i) {
    span = std::max(span, static_cast<double>(span_in[i]));
    if (usable_row(span_in[i], nonfinite_in[i])) {
      bound = std::max(bound, integer_norm_bound(tau_in[i], span_in[i], norm[i]));
    }
  }
  return at::tensor({span, bound}, tau.options().dtype(at::kDouble));
}

// The sums themselves: a k-shard's add up (exactly, in int64) to the whole rows' sums.
at::Tensor row_norm_square_sums(const at::Tensor& a, const at::Tensor& tau) {
  constexpr const char* op = "ozaki::row_norm_square_sums";
  check_matrix(a, op, "a");
  check_row_vector(tau, a.size(0), at::kInt, op, "tau");
  at::Tensor sums = at::empty({a.size(0)}, tau.options().dtype(at::kLong));
  int64_t* out = sums.mutable_data_ptr<int64_t>();
  for_each_row_norm_square_sum(a, tau.const_data_ptr<int>(), [&](int64_t i, uint64_t sum, int) {
    out[i] = static_cast<int64_t>(sum);
  });
  return sums;
}

namespace {

// Per row: the magnitude digits (exact in Out: float64 for the GEMM below, int8 for
// crt_magnitude_digits) of a (rows, k) or (batch, rows, k) operand, tau and norm (the rows' norm
// scale codes) indexed by the rows of the flattened operand; gain: crt_magnitude_gain.
template <typename Out, typename T>
at::Tensor magnitude_digit_rows(const at::Tensor& a, const int* tau, const int* norm, int gain,
                                at::ScalarType dtype) {
  const int64_t k = a.size(-1), rows = k == 0 ? 0 : a.numel() / k;
  at::Tensor digits = at::empty(a.sizes(), a.options().dtype(dtype));
  const T* in = a.const_data_ptr<T>();
  Out* out = digits.mutable_data_ptr<Out>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin * k; e < end * k; ++e) {
      const int64_t r = e / k;
      out[e] = static_cast<Out>(magnitude_digit(static_cast<double>(in[e]), tau[r], norm[r], gain));
    }
  });
  return digits;
}

// Entries of float64 digits or digit products crt_magnitude holds at once per chunk (128 MiB), so
// that planning a product of tall operands stays within a few chunks of memory whatever their
// size.
constexpr int64_t kMagnitudeChunkEntries = int64_t(1) << 24;

// The smallest digit product over usable pairs of rows [i0, i0 + rows) of element e of a and
// rows [j0, j0 + cols) of bt (digits da, db of those rows), times scale = 2^(-2 g): exact.
double smallest_scaled_product(const at::Tensor& da, const at::Tensor& db, int64_t i0,
                               int64_t j0, double scale, const bool* ua, const bool* ub) {
  const at::Tensor digits = at::mm(da, db.t());  // exact: integers below 2^31
  const double* d = digits.const_data_ptr<double>();
  const int64_t rows = da.size(0), cols = db.size(0);
  double smallest = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    if (!ua[i0 + r]) continue;
    for (int64_t c = 0; c < cols; ++c) {
      if (!ub[j0 + c]) continue;
      const double value = d[r * cols + c] * scale;
      smallest = value < smallest ? value : smallest;
    }
  }
  return smallest;
}

}  // namespace

at::Tensor crt_magnitude(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& tau_a,
                         const at::Tensor& tau_b, const at::Tensor& norm_a,
                         const at::Tensor& norm_b, const at::Tensor& usable_a,
                         const at::Tensor& usable_b) {
  constexpr const char* op = "ozaki::crt_magnitude";
  const ProductShape shape =
      check_crt_magnitude_arguments(a, bt, tau_a, tau_b, norm_a, norm_b, usable_a, usable_b, op);
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  // The flattened rows of every element; pairs of rows of the same element only.
  const at::Tensor a_rows = a.reshape({shape.batch * m, k});
  const at::Tensor b_rows = bt.reshape({shape.batch * n, k});
  const int *ta = tau_a.const_data_ptr<int>(), *tb = tau_b.const_data_ptr<int>();
  const int *na = norm_a.const_data_ptr<int>(), *nb = norm_b.const_data_ptr<int>();
  const bool *ua = usable_a.const_data_ptr<bool>(), *ub = usable_b.const_data_ptr<bool>();
  const int64_t per_chunk = std::max<int64_t>(kMagnitudeChunkEntries / std::max<int64_t>(k, 1), 1);
  const int64_t col_chunk = std::min<int64_t>(std::max<int64_t>(n, 1), per_chunk);
  const int64_t row_chunk = std::max<int64_t>(
      1, std::min<int64_t>(per_chunk, kMagnitudeChunkEntries / col_chunk));
  const int gain = crt_magnitude_gain(k);
  const double scale = pow2(-2 * gain);
  double smallest = std::numeric_limits<double>::infinity();
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    for (int64_t e = 0; e < shape.batch; ++e) {
      for (int64_t j0 = e * n; j0 < (e + 1) * n; j0 += col_chunk) {
        const int64_t cols = std::min(col_chunk, (e + 1) * n - j0);
        const at::Tensor db = magnitude_digit_rows<double, scalar_t>(
            b_rows.narrow(0, j0, cols), tb + j0, nb + j0, gain, at::kDouble);
        for (int64_t i0 = e * m; i0 < (e + 1) * m; i0 += row_chunk) {
          const int64_t rows = std::min(row_chunk, (e + 1) * m - i0);
          const at::Tensor da = magnitude_digit_rows<double, scalar_t>(
              a_rows.narrow(0, i0, rows), ta + i0, na + i0, gain, at::kDouble);
          smallest = std::min(smallest, smallest_scaled_product(da, db, i0, j0, scale, ua, ub));
        }
      }
    }
  });
  return at::scalar_tensor(smallest, a.options().dtype(at::kDouble));
}

// The digits of every entry as int8 (rows, k): int8_matmul of two of them gives crt_magnitude's
// digit products, and a k-shard's products add up to the whole rows'.
at::Tensor crt_magnitude_digits(const at::Tensor& a, const at::Tensor& tau, const at::Tensor& norm,
                                int64_t total_k) {
  constexpr const char* op = "ozaki::crt_magnitude_digits";
  const int gain = check_crt_magnitude_digits_arguments(a, tau, norm, total_k, op);
  at::Tensor digits;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    digits = magnitude_digit_rows<int8_t, scalar_t>(a, tau.const_data_ptr<int>(),
                                                    norm.const_data_ptr<int>(), gain, at::kChar);
  });
  return digits;
}

namespace {

// Residues of rows [first, first + count) of a, modulus i at out[(i * count + r) * k + l]
// (weighted: B's, see crt_reconstruct).
template <int N, bool weighted, typename T>
void residue_rows(const T* a, int64_t k, int64_t first, int64_t count, const int* scale,
                  double* out) {
  at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const RowScaler c = row_scaler<T>(scale[first + r]);
      for (int64_t l = 0; l < k; ++l) {
        residues_of<N, weighted>(static_cast<double>(a[(first + r) * k + l]), c,
                                 [&](int i, int residue) { out[(i * count + r) * k + l] = residue; });
      }
    }
  });
}

// The exact residue products of the 2-D a @ bt.T for `moduli` moduli, chunk by chunk within the
// workspace budget: residues(data, first, count, weighted, out) writes rows [first, first + count)
// of a or bt (weighted: bt's), modulus i's row r at out[(i * count + r) * k]; finish(products, i0,
// rows, j0, cols) gets the chunk of rows [i0, i0 + rows) and columns [j0, j0 + cols), modulus i's
// entry (r, c) at products[(i * rows + r) * cols + c] (float64 holding integers below 2^31).
template <typename T, typename Residues, typename Finish>
void residue_product_chunks(const at::Tensor& a, const at::Tensor& bt, int moduli,
                            Residues residues, int64_t budget, Finish finish) {
  const int64_t m = a.size(0), k = a.size(1), n = bt.size(0);
  const T* a_data = a.const_data_ptr<T>();
  const T* b_data = bt.const_data_ptr<T>();
  const WorkspaceShape shape{k, moduli, moduli, 8, 8, 1};
  const ChunkPlan plan = plan_chunks(m, n, shape, budget);
  const auto f64 = a.options().dtype(at::kDouble);
  for (int64_t j0 = 0; j0 < n; j0 += plan.cols) {
    const int64_t cols = std::min(plan.cols, n - j0);
    at::Tensor b_res = at::empty({moduli, cols, k}, f64);
    residues(b_data, j0, cols, true, b_res.mutable_data_ptr<double>());
    for (int64_t i0 = 0; i0 < m; i0 += plan.rows) {
      const int64_t rows = std::min(plan.rows, m - i0);
      at::Tensor a_res = at::empty({moduli, rows, k}, f64);
      residues(a_data, i0, rows, false, a_res.mutable_data_ptr<double>());
      const at::Tensor products = at::bmm(a_res, b_res.transpose(1, 2)).contiguous();  // exact
      finish(products.const_data_ptr<double>(), i0, rows, j0, cols);
    }
  }
}

// residue_product_chunks' residues for scheme II with N moduli and the rows' scale codes.
template <int N, typename T>
auto truncated_residues(int64_t k, const int* scale_a, const int* scale_b) {
  return [=](const T* data, int64_t first, int64_t count, bool weighted, double* out) {
    if (weighted) {
      residue_rows<N, true>(data, k, first, count, scale_b, out);
    } else {
      residue_rows<N, false>(data, k, first, count, scale_a, out);
    }
  };
}

// residues, except that a's rows (weighted = false) come from prepared, a's residues of this
// element in crt_left_residues' layout (moduli planes of m rows of k_stride entries), when given.
template <typename T, typename Residues>
auto with_prepared_a(Residues residues, const int8_t* prepared, int moduli, int64_t m, int64_t k) {
  return [=](const T* data, int64_t first, int64_t count, bool weighted, double* out) {
    if (weighted || prepared == nullptr) return residues(data, first, count, weighted, out);
    const int64_t k_stride = round_up(k, kResidueRowAlign);
    for (int i = 0; i < moduli; ++i) {
      for (int64_t r = 0; r < count; ++r) {
        const int8_t* row = prepared + (i * m + first + r) * k_stride;
        std::copy(row, row + k, out + (i * count + r) * k);
      }
    }
  };
}

// Writes the residues of every row of the 2-D a as crt_left_residues lays them out (moduli
// planes of m rows, k_stride entries each, zero past k) from residue_product_chunks' residues,
// a chunk of rows at a time.
template <typename T, typename Residues>
void write_left_residues(const at::Tensor& a, int moduli, Residues residues, int8_t* out) {
  const int64_t m = a.size(0), k = a.size(1), k_stride = round_up(k, kResidueRowAlign);
  const int64_t chunk =
      std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(1, moduli * k));
  std::fill(out, out + moduli * m * k_stride, int8_t(0));
  std::vector<double> values(moduli * std::min(chunk, m) * k);
  for (int64_t first = 0; first < m; first += chunk) {
    const int64_t count = std::min(chunk, m - first);
    residues(a.const_data_ptr<T>(), first, count, false, values.data());
    for (int i = 0; i < moduli; ++i) {
      for (int64_t r = 0; r < count; ++r) {
        const double* from = values.data() + (i * count + r) * k;
        std::copy(from, from + k, out + (i * m + first + r) * k_stride);
      }
    }
  }
}

// C_ij rebuilt from its N residue products, modulus i's at entry[i * plane], and rounded once to
// T (gemm_crt's and crt_round's entries alike).
template <int N, typename T, typename Product>
T crt_entry(const Product* entry, int64_t plane, int scale_a, int scale_b) {
  int32_t residues[N];
  for (int modulus = 0; modulus < N; ++modulus) {
    residues[modulus] = static_cast<int32_t>(entry[modulus * plane]);
  }
  return static_cast<T>(crt_reconstruct<N>(residues, row_scale(scale_a), row_scale(scale_b),
                                           format_of<T>()));
}

// One batch element of a scheme-II product: its 2-D operands and result, its rows' scales (codes,
// or exponents for exact scheme II) and nonfinite flags, and its prepared residues of a (or
// nullptr).
struct CrtElement {
  at::Tensor a, bt, out;
  const int* scale_a;
  const int* scale_b;
  const bool* nonfinite_a;
  const bool* nonfinite_b;
  const int8_t* prepared_a;
};

// One chunk's entries of element.out = a @ bt.T (n columns): the IEEE value of the plain dot
// product for rows or columns with NaN/Inf, else value(i, j, gi, gj) (chunk entry (i, j), global
// (gi, gj)), the scheme's rounded result.
template <typename T, typename Value>
void round_chunk_entries(const CrtElement& element, int64_t i0, int64_t rows, int64_t j0,
                         int64_t cols, Value value) {
  const int64_t k = element.a.size(1), n = element.bt.size(0);
  const T* a_data = element.a.const_data_ptr<T>();
  const T* b_data = element.bt.const_data_ptr<T>();
  T* out_data = element.out.mutable_data_ptr<T>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t gi = i0 + i, gj = j0 + j;
        out_data[gi * n + gj] =
            element.nonfinite_a[gi] || element.nonfinite_b[gj]
                ? static_cast<T>(nonfinite_dot(a_data + gi * k, b_data + gj * k, k))
                : static_cast<T>(value(i, j, gi, gj));
      }
    }
  });
}

template <int N, typename T>
void gemm_crt_chunks(const CrtElement& element, int64_t budget) {
  const auto round_chunk = [&](const double* p, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
    round_chunk_entries<T>(element, i0, rows, j0, cols,
                           [&](int64_t i, int64_t j, int64_t gi, int64_t gj) {
                             return crt_entry<N, T>(p + i * cols + j, rows * cols,
                                                    element.scale_a[gi], element.scale_b[gj]);
                           });
  };
  const int64_t m = element.a.size(0), k = element.a.size(1);
  residue_product_chunks<T>(
      element.a, element.bt, N,
      with_prepared_a<T>(truncated_residues<N, T>(k, element.scale_a, element.scale_b),
                         element.prepared_a, N, m, k),
      budget, round_chunk);
}

// What gemm_crt and gemm_crt_exact share: the arguments checked, the result allocated (zeros for
// an empty product), and run(element, budget, T{}) for each batch element in order, so that each
// gets exactly the bits of its own 2-D product.
template <typename Run>
at::Tensor crt_product(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& scale_a,
                       const at::Tensor& scale_b, const at::Tensor& nonfinite_a,
                       const at::Tensor& nonfinite_b, int64_t moduli, int64_t workspace_bytes,
                       const std::optional<at::Tensor>& residues_a, bool exact, const char* op,
                       Run run) {
  const CrtProductArguments args = check_crt_product_arguments(
      a, bt, scale_a, scale_b, nonfinite_a, nonfinite_b, moduli, residues_a, exact, op);
  const ProductShape& shape = args.shape;
  if (args.empty) return at::zeros(shape.out_sizes(), a.options());
  at::Tensor out = at::empty(shape.out_sizes(), a.options());
  const int64_t budget = workspace_bytes > 0 ? workspace_bytes : kDefaultWorkspaceBytes;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "ozaki::crt_product", [&] {
    for (int64_t e = 0; e < shape.batch; ++e) {
      const CrtElement element{batch_element(a, shape.batched, e),
                               batch_element(bt, shape.batched, e),
                               batch_element(out, shape.batched, e),
                               scale_a.const_data_ptr<int>() + e * shape.m,
                               scale_b.const_data_ptr<int>() + e * shape.n,
                               nonfinite_a.const_data_ptr<bool>() + e * shape.m,
                               nonfinite_b.const_data_ptr<bool>() + e * shape.n,
                               args.prepared_a.element(e)};
      run(element, budget, scalar_t{});
    }
  });
  return out;
}

}  // namespace

at::Tensor gemm_crt(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& scale_a,
                    const at::Tensor& scale_b, const at::Tensor& nonfinite_a,
                    const at::Tensor& nonfinite_b, int64_t moduli, int64_t workspace_bytes,
                    const std::optional<at::Tensor>& residues_a) {
  return crt_product(a, bt, scale_a, scale_b, nonfinite_a, nonfinite_b, moduli, workspace_bytes,
                     residues_a, /*exact=*/false, "ozaki::gemm_crt",
                     [&](const CrtElement& element, int64_t budget, auto type) {
                       with_moduli_count(static_cast<int>(moduli), [&](auto count) {
                         gemm_crt_chunks<decltype(count)::value, decltype(type)>(element, budget);
                       });
                     });
}

namespace {

// ---- gemm_crt_exact -----------------------------------------------------------------------------

// The table of signed powers (csrc/crt_exact.h, exact_table_entry) for A (weighted = false) or B.
std::vector<uint8_t> exact_power_table(const ExactCrt& crt, bool weighted) {
  std::vector<uint8_t> table(exact_table_bytes(crt.moduli));
  for (int index = 0; index < static_cast<int>(table.size()); ++index) {
    table[index] = exact_table_entry(crt, weighted, index);
  }
  return table;
}

// residue_product_chunks' residues for exact scheme II: rows scaled by 2^exponent.
template <typename T>
auto exact_residues(int64_t k, const int* exponent_a, const int* exponent_b, const ExactCrt& crt) {
  return [=, &crt, tables = std::array<std::vector<uint8_t>, 2>{exact_power_table(crt, false),
                                                                  exact_power_table(crt, true)}](
             const T* data, int64_t first, int64_t count, bool weighted, double* out) {
    const int* exponent = weighted ? exponent_b : exponent_a;
    const uint8_t* table = tables[weighted].data();
    at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int row_exponent = exact_scale_exponent(exponent[first + r]);
        for (int64_t l = 0; l < k; ++l) {
          const ExactEntry x =
              exact_entry(static_cast<double>(data[(first + r) * k + l]), row_exponent);
          for (int i = 0; i < crt.moduli; ++i) {
            const uint32_t power =
                x.s < kExactTableShifts
                    ? table[exact_table_index(crt.moduli, x.negative, i, x.s)]
                    : signed_power(x.s, x.negative, weighted, crt.modulus[i]);
            out[(i * count + r) * k + l] = exact_residue(x, power, crt.modulus[i]);
          }
        }
      }
    });
  };
}

template <typename T>
void gemm_crt_exact_element(const CrtElement& element, const ExactCrt& crt, int64_t budget) {
  const auto round_chunk = [&](const double* p, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
    with_limb_count(crt, [&](auto limbs) {
      round_chunk_entries<T>(
          element, i0, rows, j0, cols, [&](int64_t i, int64_t j, int64_t gi, int64_t gj) {
            const double* entry = p + i * cols + j;
            const auto load = [&](int modulus) {
              return static_cast<int32_t>(entry[modulus * rows * cols]);
            };
            const int64_t unit = -(int64_t(element.scale_a[gi]) + element.scale_b[gj]);
            return exact_reconstruct<decltype(limbs)::value>(crt, load, unit, format_of<T>());
          });
    });
  };
  const int64_t m = element.a.size(0), k = element.a.size(1);
  residue_product_chunks<T>(
      element.a, element.bt, crt.moduli,
      with_prepared_a<T>(exact_residues<T>(k, element.scale_a, element.scale_b, crt),
                         element.prepared_a, crt.moduli, m, k),
      budget, round_chunk);
}

}  // namespace

at::Tensor gemm_crt_exact(const at::Tensor& a, const at::Tensor& bt, const at::Tensor& exponent_a,
                          const at::Tensor& exponent_b, const at::Tensor& nonfinite_a,
                          const at::Tensor& nonfinite_b, int64_t moduli, int64_t workspace_bytes,
                          const std::optional<at::Tensor>& residues_a) {
  std::optional<ExactCrt> crt;  // made once the moduli count is checked
  return crt_product(a, bt, exponent_a, exponent_b, nonfinite_a, nonfinite_b, moduli,
                     workspace_bytes, residues_a, /*exact=*/true, "ozaki::gemm_crt_exact",
                     [&](const CrtElement& element, int64_t budget, auto type) {
                       if (!crt) crt = exact_crt(static_cast<int>(moduli));
                       gemm_crt_exact_element<decltype(type)>(element, *crt, budget);
                     });
}

at::Tensor crt_left_residues(const at::Tensor& a, const at::Tensor& scale, int64_t moduli,
                             bool exact) {
  constexpr const char* op = "ozaki::crt_left_residues";
  check_crt_left_residues_arguments(a, scale, moduli, exact, op);
  at::Tensor out = at::empty(left_residue_sizes(a, moduli), a.options().dtype(at::kChar));
  const bool batched = a.dim() == 3;
  const int64_t batch = batched ? a.size(0) : 1, m = a.size(-2), k = a.size(-1);
  const int64_t element_size = moduli * m * round_up(k, kResidueRowAlign);
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    for (int64_t e = 0; e < batch; ++e) {
      const at::Tensor a_e = batch_element(a, batched, e);
      const int* scale_e = scale.const_data_ptr<int>() + e * m;
      int8_t* out_e = out.mutable_data_ptr<int8_t>() + e * element_size;
      if (exact) {
        const ExactCrt crt = exact_crt(static_cast<int>(moduli));
        write_left_residues<scalar_t>(a_e, crt.moduli,
                                      exact_residues<scalar_t>(k, scale_e, nullptr, crt), out_e);
      } else {
        with_moduli_count(static_cast<int>(moduli), [&](auto count) {
          constexpr int N = decltype(count)::value;
          write_left_residues<scalar_t>(
              a_e, N, truncated_residues<N, scalar_t>(k, scale_e, nullptr), out_e);
        });
      }
    }
  });
  return out;
}

// gemm_crt's INT32 GEMM results of a k-shard, int32 (moduli, m, n): summed over the shards they
// are the whole product's (exact integers), which crt_round turns into gemm_crt's bits.
at::Tensor crt_residue_products(const at::Tensor& a, const at::Tensor& bt,
                                const at::Tensor& scale_a, const at::Tensor& scale_b,
                                int64_t moduli, int64_t workspace_bytes) {
  constexpr const char* op = "ozaki::crt_residue_products";
  const ProductShape shape =
      check_crt_residue_products_arguments(a, bt, scale_a, scale_b, moduli, op);
  const int64_t m = shape.m, n = shape.n;
  if (m == 0 || n == 0 || shape.k == 0) return at::zeros({moduli, m, n}, a.options().dtype(at::kInt));
  at::Tensor out = at::empty({moduli, m, n}, a.options().dtype(at::kInt));
  int32_t* out_data = out.mutable_data_ptr<int32_t>();
  const int64_t budget = workspace_bytes > 0 ? workspace_bytes : kDefaultWorkspaceBytes;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), op, [&] {
    with_moduli_count(static_cast<int>(moduli), [&](auto count) {
      constexpr int N = decltype(count)::value;
      // Chunk row r of modulus i is plane row i * rows + r, out's row i * m + i0 + r.
      const auto copy_chunk = [&](const double* p, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
        at::parallel_for(0, N * rows, 1, [&](int64_t begin, int64_t end) {
          for (int64_t plane_row = begin; plane_row < end; ++plane_row) {
            const int64_t modulus = plane_row / rows, r = plane_row - modulus * rows;
            int32_t* row_out = out_data + (modulus * m + i0 + r) * n + j0;
            for (int64_t c = 0; c < cols; ++c) row_out[c] = static_cast<int32_t>(p[plane_row * cols + c]);
          }
        });
      };
      residue_product_chunks<scalar_t>(
          a, bt, N,
          truncated_residues<N, scalar_t>(shape.k, scale_a.const_data_ptr<int>(),
                                          scale_b.const_data_ptr<int>()),
          budget, copy_chunk);
    });
  });
  return out;
}

// gemm_crt's result from the summed crt_residue_products (finite rows and columns).
at::Tensor crt_round(const at::Tensor& products, const at::Tensor& scale_a,
                     const at::Tensor& scale_b, at::ScalarType dtype) {
  constexpr const char* op = "ozaki::crt_round";
  check_crt_round_arguments(products, scale_a, scale_b, dtype, op);
  const int64_t m = products.size(1), n = products.size(2);
  at::Tensor out = at::empty({m, n}, products.options().dtype(dtype));
  if (m == 0 || n == 0) return out;
  const int32_t* p = products.const_data_ptr<int32_t>();
  const int *sa = scale_a.const_data_ptr<int>(), *sb = scale_b.const_data_ptr<int>();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
    with_moduli_count(static_cast<int>(products.size(0)), [&](auto count) {
      at::parallel_for(0, m, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            out_data[i * n + j] =
                crt_entry<decltype(count)::value, scalar_t>(p + i * n + j, m * n, sa[i], sb[j]);
          }
        }
      });
    });
  });
  return out;
}

}  // namespace ozaki::cpu
