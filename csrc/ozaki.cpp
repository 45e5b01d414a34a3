// Every ozaki operator schema, in one place. Kernels are registered per device, each backend's in
// one table: csrc/cpu/register.cpp and csrc/cuda/register.cu (the public ozaki::gemm's in Python;
// crt_plan_reads is also composed of other operators for any device, in csrc/plan_reads.cpp);
// the public Python API (ozaki/) validates user input and calls these. Fake kernels for
// torch.compile are in ozaki/library.py.
#include <Python.h>
#include <torch/library.h>

namespace ozaki {
extern PyMethodDef graph_result_methods[];  // csrc/graph_result.cpp
}

// Importing ozaki._C loads this library, which registers the operators below with the dispatcher;
// the module's own functions are the replayed product's result moves (csrc/graph_result.h).
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1,
                                      ozaki::graph_result_methods};
  return PyModule_Create(&module);
}

TORCH_LIBRARY(ozaki, m) {
  // Per row of a (m, k) matrix: tau (every |entry| < 2^tau; 0 for a zero row), the bit span from
  // tau down to the lowest set bit of any finite entry, and whether the row holds NaN or +-Inf.
  m.def("row_stats(Tensor a) -> (Tensor tau, Tensor bit_span, Tensor nonfinite)");
  // The FP16 slices of every row, scaled by 2^-tau: shape (slices, m, k), float16.
  m.def("split_rows(Tensor a, Tensor tau, int slices) -> Tensor");
  // The product operators magnitude_product, gemm_slices, crt_magnitude and gemm_crt take a (m, k)
  // and bt (n, k) with per-row vectors of length m and n, or batches a (batch, m, k) and
  // bt (batch, n, k) with per-row vectors of length batch * m and batch * n that describe the rows
  // of the flattened a.reshape(-1, k) and bt.reshape(-1, k). Each element of a batch gets exactly
  // the bits of the 2-D call on that element and its slices of the vectors.
  //
  // Exact lower bound of (|a| |bt|^T)_ij 2^-(tau_a_i + tau_b_j) from magnitudes floored onto a
  // coarse grid: float64 (m, n) or (batch, m, n). The automatic slice count is planned from it.
  // total_k > 0: the grid comes from that inner dimension instead of a's (a k-shard of a larger
  // product; the shards' results add up exactly to the whole product's, docs/distributed.md).
  m.def("magnitude_product(Tensor a, Tensor bt, Tensor tau_a, Tensor tau_b, int total_k=0) -> Tensor");
  // The fixed-count check's sample (ozaki/fixed_counts.py): float64 (rows_a.size(0),
  // rows_b.size(0)), entry (r, c) = sum_l |a_il| 2^-tau_a_i |bt_jl| 2^-tau_b_j for i = rows_a[r],
  // j = rows_b[c] (int64 indices of rows of the flattened a (rows, k) and bt), summed in the one
  // order of csrc/scheme.h (sampled_lane_sum): the same bits on every device. Non-finite entries
  // count as 0. With norm scale codes, times c_i 2^tau_i c_j 2^tau_j; +Inf where a row is not
  // usable or rows i and j belong to different elements (of m and n rows) of a batch
  // (csrc/crt.h, sampled_entry).
  m.def("sampled_magnitudes(Tensor a, Tensor bt, Tensor tau_a, Tensor tau_b, Tensor usable_a, "
        "Tensor usable_b, Tensor rows_a, Tensor rows_b, int m, int n, Tensor? norm_a, "
        "Tensor? norm_b) -> Tensor");
  // C = a @ bt.T by Ozaki scheme I with FP16 slices (int8 = false) or INT8 slices (int8 = true);
  // bt holds B's columns as rows and tau_*, span_*, nonfinite_* are the row_stats of a and bt
  // (flattened when batched). nearest: correctly rounded result. (m, n) or (batch, m, n).
  m.def(
      "gemm_slices(Tensor a, Tensor bt, Tensor tau_a, Tensor tau_b, Tensor span_a, Tensor span_b, "
      "Tensor nonfinite_a, Tensor nonfinite_b, int slices, bool fast, bool nearest, bool int8, "
      "int workspace_bytes) -> Tensor");
  // Scheme II (backend="crt"). Row scales are int32 codes s of c = (16 + (s & 15)) 2^((s >> 4) - 4)
  // (csrc/crt.h, row_scale). Per row: the code of its norm scale, the largest such c with
  // ||row||_2 c <= 1 that an exact bound of the norm proves.
  m.def("row_norm_scales(Tensor a, Tensor tau) -> Tensor");
  // row_stats and row_norm_scales of the same rows in one call (on CUDA one read of a).
  m.def(
      "row_stats_with_norm_scales(Tensor a) -> (Tensor tau, Tensor bit_span, Tensor nonfinite, "
      "Tensor norm_scales)");
  // Per row: the code of its scale for budget 2^t (csrc/crt.h, crt_row_scale_code) from the code of
  // its norm scale and its row_stats tau and bit_span.
  m.def("crt_row_scales(Tensor norm_scales, Tensor tau, Tensor bit_span, int t) -> Tensor");
  // Wide scheme II: per row, the int32 exponent E of its scale 2^E (csrc/crt.h,
  // wide_row_exponent) for the budget 2^t, from its norm scale code, row_stats and usable flag.
  m.def(
      "crt_wide_exponents(Tensor norm_scales, Tensor tau, Tensor bit_span, Tensor usable, int t) "
      "-> Tensor");
  // What the plan reads of a set of rows besides the estimate, float64 (2,): the largest
  // bit_span (0 for no rows), and exact scheme II's bound on the rows' 2-norms once scaled to
  // integers, the largest csrc/crt.h integer_norm_bound over the usable rows (bit_span > 0, no
  // NaN/Inf; 0 for none).
  m.def(
      "crt_row_bounds(Tensor tau, Tensor bit_span, Tensor nonfinite, Tensor norm_scales) -> "
      "Tensor");
  // Exact lower bound of min over usable (i, j) of (|a| |bt|^T)_ij c_a_i c_b_j (c: the norm scales
  // norm_a, norm_b) from 7-bit magnitude digits relative to the rows' norms (crt_magnitude_digits):
  // a 0-d float64 tensor, +inf when no usable row meets a usable column. Batched: the minimum over
  // the elements, each pairing only its own rows and columns.
  m.def(
      "crt_magnitude(Tensor a, Tensor bt, Tensor tau_a, Tensor tau_b, Tensor norm_a, Tensor norm_b, "
      "Tensor usable_a, Tensor usable_b) -> Tensor");
  // The default plan's device reads in one call (csrc/plan_reads.cpp; fused on CUDA,
  // csrc/cuda/plan_reads.cu): row_stats_with_norm_scales of a's rows and of bt's (flattened when
  // batched), their usable rows (bit_span > 0, no NaN/Inf), and float64 (5,) values:
  // -crt_magnitude, then crt_row_bounds of a's rows and of bt's.
  m.def(
      "crt_plan_reads(Tensor a, Tensor bt) -> (Tensor tau_a, Tensor bit_span_a, "
      "Tensor nonfinite_a, Tensor norm_a, Tensor usable_a, Tensor tau_b, Tensor bit_span_b, "
      "Tensor nonfinite_b, Tensor norm_b, Tensor usable_b, Tensor values)");
  // The same reads for a product whose left operand a (a matrix) is prepared (ozaki.prepare;
  // csrc/plan_reads.cpp, fused on CUDA): from a's kept parts (row_stats_with_norm_scales of its
  // rows and their usable flags, the magnitude digits of its rows, int8 (m, k rounded up to
  // kResidueRowAlign) with zeros past k, its crt_row_bounds and, once a product needed them, exact
  // scheme II's column exponents) and bt: bt's row statistics, norm scales and usable rows, and
  // float64 values: -crt_magnitude, a's and bt's crt_row_bounds, then crt_entry_bound_sum of a's
  // and bt's column exponents where a's are given (ozaki/product.py, KeptEstimates).
  m.def(
      "crt_kept_plan_reads(Tensor a, Tensor tau_a, Tensor bit_span_a, Tensor nonfinite_a, "
      "Tensor usable_a, Tensor norm_a, Tensor digits_a, Tensor bounds_a, "
      "Tensor? column_exponents_a, Tensor bt) -> (Tensor tau_b, Tensor bit_span_b, "
      "Tensor nonfinite_b, Tensor norm_b, Tensor usable_b, Tensor values)");
  // Exact scheme II's entry bound sum_l 2^(u_l + v_l) of column exponents u and v, int64 or
  // float64 (elements, k) each, in csrc/crt.h's fixed order (the same bits on every device): the
  // largest over the elements, a 0-d float64 tensor.
  m.def("crt_entry_bound_sum(Tensor exponents_a, Tensor exponents_b) -> Tensor");
  // C = a @ bt.T from A' = RN(a_i c_a_i), B' = RN(bt_j c_b_j) (scale codes scale_a, scale_b): A'B'
  // exactly from INT8 residues of the first `moduli` moduli, rounded once as A'B' / (c_a_i c_b_j).
  // The scales must keep |A'B'| below P / 2. (m, n) or (batch, m, n). residues_a: a's residues
  // from crt_left_residues(a, scale_a, moduli, false), used instead of computing them again.
  m.def(
      "gemm_crt(Tensor a, Tensor bt, Tensor scale_a, Tensor scale_b, Tensor nonfinite_a, "
      "Tensor nonfinite_b, int moduli, int workspace_bytes, Tensor? residues_a=None) -> Tensor");
  // C = a @ bt.T, correctly rounded: rows of a scaled by 2^exponent_a_i and of bt by 2^exponent_b_j
  // (exponents that make every entry an integer; others are rounded to integers first), their
  // product rebuilt exactly from INT8 residues of the first `moduli` (up to 40) moduli and rounded
  // once. The exponents must keep |A'B'| below P / 2. (m, n) or (batch, m, n). residues_a: as
  // gemm_crt's, from crt_left_residues(a, exponent_a, moduli, true).
  m.def(
      "gemm_crt_exact(Tensor a, Tensor bt, Tensor exponent_a, Tensor exponent_b, "
      "Tensor nonfinite_a, Tensor nonfinite_b, int moduli, int workspace_bytes, "
      "Tensor? residues_a=None) -> Tensor");
  // The INT8 residues that gemm_crt (exact = false: scale holds scale codes) or gemm_crt_exact
  // (exact: scale holds exponents) computes for a's rows, int8 (moduli, m, k_stride) or (batch,
  // moduli, m, k_stride), rows padded with zeros to k_stride = k rounded up to 16: computed once,
  // they serve every product of a with the same scales and moduli (ozaki.prepare).
  m.def("crt_left_residues(Tensor a, Tensor scale, int moduli, bool exact) -> Tensor");
  // ---- k-sharded products (docs/distributed.md): a rank holds columns [k0, k0 + k) of A's rows and
  // the same rows of B; tau/span/scale are the whole rows' (the same on every rank). Each operator
  // below returns integers (or values on a fixed grid) whose sum over the shards is exact in any
  // order, and the rounding operators turn those sums into exactly the bits of the one-device
  // operator. 2-D only; rows or columns with NaN/Inf are left to the caller.
  //
  // Scheme I: float64 (levels, m, n), levels = slices (fast) or 2 slices - 1; level l holds the sum
  // of the exact slice products P(p, q) with p + q = l, in the units csrc/scheme.h sums, with the
  // digit width beta of total_k (FP16 or, int8 = true, INT8 digits).
  m.def(
      "slice_levels(Tensor a, Tensor bt, Tensor tau_a, Tensor tau_b, int slices, bool fast, "
      "bool int8, int total_k, int workspace_bytes) -> Tensor");
  // gemm_slices' result from summed slice_levels: (C, undecided). nearest: C is correctly rounded
  // where undecided is false; undecided entries need the exact dot product (the caller's).
  m.def(
      "round_levels(Tensor levels, Tensor tau_a, Tensor tau_b, Tensor span_a, Tensor span_b, "
      "int slices, bool fast, bool int8, int total_k, bool nearest, ScalarType dtype) "
      "-> (Tensor, Tensor)");
  // Scheme II: per row, the int64 sum of csrc/crt.h's norm_square_units (the norm scale follows
  // from it).
  m.def("row_norm_square_sums(Tensor a, Tensor tau) -> Tensor");
  // Scheme II plan: int8 magnitude_digit of every entry (rows, k), with the gain of the whole
  // product's inner dimension total_k (0: a's own); int8_matmul of two of them gives the digit
  // products crt_magnitude takes its minimum over.
  m.def("crt_magnitude_digits(Tensor a, Tensor tau, Tensor norm, int total_k=0) -> Tensor");
  // Scheme II: int32 (moduli, m, n), the exact INT32 GEMM of each modulus's symmetric residues
  // of A' = RN(a_i c_a_i) and B' (scale codes as gemm_crt's); the shards' sums stay below 2^31 for
  // total k < 2^17.
  m.def(
      "crt_residue_products(Tensor a, Tensor bt, Tensor scale_a, Tensor scale_b, int moduli, "
      "int workspace_bytes) -> Tensor");
  // gemm_crt's result from summed crt_residue_products (moduli = products.size(0)).
  m.def("crt_round(Tensor products, Tensor scale_a, Tensor scale_b, ScalarType dtype) -> Tensor");
  // a @ bt.T of int8 (m, k) and (n, k) matrices with exact int32 accumulation (k < 2^17): the
  // tensor-core GEMM both INT8 backends run, exposed for benchmarks and tests.
  m.def("int8_matmul(Tensor a, Tensor bt) -> Tensor");
  // b.mT.contiguous() of a float64/float32 (k, n) or (batch, k, n) tensor of any strides, always a
  // fresh tensor: B's columns as the contiguous rows bt that the product operators take. On CUDA a
  // tiled shared-memory transpose (coalesced reads and writes) instead of torch's strided copy.
  m.def("transposed(Tensor b) -> Tensor");
  // A 64-bit digest of a float64/float32 (m, k) matrix of any strides, over its entries' bits and
  // their positions (csrc/fingerprint.h), as a 0-d int64 tensor on a's device: how a kept left
  // operand is found unchanged (ozaki/repeated.py). The same bits on every backend.
  m.def("fingerprint(Tensor a) -> Tensor");
  // The public product, D = alpha * A @ B + beta * C with BLAS semantics (alpha = 0 reads neither
  // A nor B, beta = 0 never reads C) for float64/float32/complex128/complex64 (m, k) x (k, n)
  // matrices or (batch, m, k) x (batch, k, n) batches; the rest are ozaki.dgemm's options. Its
  // kernel, autograd formula and fake kernel are Python (ozaki/gemm_op.py, ozaki/library.py).
  m.def(
      "gemm(Tensor A, Tensor B, Tensor? C, Scalar alpha, Scalar beta, str backend, int? slices, "
      "bool? fast, int? moduli, str? rounding) -> Tensor");
}
