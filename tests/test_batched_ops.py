"""Batched product operators (csrc/ozaki.cpp): magnitude_product, gemm_slices, crt_magnitude and
gemm_crt on a (batch, m, k) and bt (batch, n, k), with per-row vectors of the flattened operands
a.reshape(batch * m, k) and bt.reshape(batch * n, k), give every element exactly the bits of the
2-D operator on that element and its slices of the vectors, whatever the workspace budget (which
on the GPU decides how many whole elements share a launch, or how one element is chunked).
"""

import re

import pytest
import torch

from helpers import assert_bitwise_equal, cpu_and_cuda, seeded
from ozaki import _ops, crt

ops = torch.ops.ozaki
DTYPES = [pytest.param(torch.float64, id="float64"), pytest.param(torch.float32, id="float32")]
#: (batch, m, k, n): one element, a few, many small ones of odd sizes, and larger ones that a
#: small workspace chunks within each element.
SHAPES = [pytest.param((1, 5, 9, 7), id="1x5x9x7"), pytest.param((3, 6, 13, 5), id="3x6x13x5"),
          pytest.param((40, 5, 9, 7), id="40x5x9x7"),
          pytest.param((2, 300, 190, 257), id="2x300x190x257")]
#: (shape, workspace bytes) of the GEMMs: the default budget holds every small batch in one chunk;
#: 1 byte runs element by element and chunks the large elements within; 20000 bytes puts a few
#: small elements in each chunk, the last one partial.
CHUNKINGS = [pytest.param(shape.values[0], workspace, id=f"{shape.id}-ws-{workspace}")
             for shape in SHAPES for workspace in (0, 1, 20000)
             if workspace != 20000 or shape.values[0][1] < 100]
#: (slices, fast, nearest, int8) of gemm_slices.
SLICE_MODES = [pytest.param(1, True, False, False, id="fp16-1"),
               pytest.param(4, True, False, False, id="fp16-4-fast"),
               pytest.param(6, False, False, True, id="int8-6-all"),
               pytest.param(3, True, True, False, id="fp16-3-fast-nearest"),
               pytest.param(9, False, True, True, id="int8-9-all-nearest")]
nan, inf = float("nan"), float("inf")


def random_operands(shape, dtype, device, seed, special=True, phi=2.0):
    """Fresh (a, bt) of (rand - 0.5) * exp(phi randn) entries; with `special`, a zero row, a -0 row,
    NaN and +-Inf in some rows of the first and last elements."""
    batch, m, k, n = shape
    g = seeded(seed)

    def draw(rows):
        size = (batch, rows, k)
        x = (torch.rand(size, generator=g, dtype=torch.float64) - 0.5) * torch.exp(
            phi * torch.randn(size, generator=g, dtype=torch.float64))
        return x.to(dtype)

    a, bt = draw(m), draw(n)
    if special and min(shape) > 0 and m >= 3 and n >= 2:
        last = batch - 1
        a[last, 0] = 0.0
        a[0, 1] = -0.0
        a[last, m - 1, k // 2] = nan
        a[0, 2, 0] = inf
        bt[0, n - 1, k - 1] = -inf
        bt[last, 0, 0] = inf
    return a.to(device), bt.to(device)


def flat(x):
    """The rows of every element: (batch * rows, k), a view."""
    return x.reshape(x.shape[0] * x.shape[1], x.shape[2])


def stats_of(x):
    """row_stats (tau, bit_span, nonfinite) of the flattened operand."""
    return _ops.row_stats(flat(x))


def element_vectors(pairs, e, m, n):
    """Element e's slices of (vector of a, vector of bt) pairs, in the operators' argument order."""
    return [v for va, vb in pairs for v in (va[e * m:(e + 1) * m], vb[e * n:(e + 1) * n])]


def all_vectors(pairs):
    """The batch's (vector of a, vector of bt) pairs, in the operators' argument order."""
    return [v for pair in pairs for v in pair]


def assert_elements_match_2d(op, a, bt, pairs, options, options_2d):
    """op on the batch has shape (batch, m, n) and, element by element, the bits of the 2-D op."""
    batch, m, n = a.shape[0], a.shape[1], bt.shape[1]
    out = op(a, bt, *all_vectors(pairs), *options)
    assert out.shape == (batch, m, n) and out.device == a.device
    for e in range(batch):
        assert_bitwise_equal(out[e], op(a[e], bt[e], *element_vectors(pairs, e, m, n), *options_2d))
    return out


def usable_rows(stats):
    """Rows the plans constrain on (ozaki's _usable_rows): nonzero and finite."""
    return (stats[1] > 0) & ~stats[2]


def crt_vectors(a, bt, count):
    """(scale, nonfinite) pairs of gemm_crt: the codes of c 2^t with c the rows' norm scales and
    (t_a, t_b) = crt.scale_bits(count, k), for every row (the crt backend's crt_row_scales keeps a
    power of two where it is exact; the operators take any codes)."""
    stats_a, stats_b = stats_of(a), stats_of(bt)
    t_a, t_b = crt.scale_bits(count, a.shape[2])
    norm_a = _ops.row_norm_scales(flat(a), stats_a[0])
    norm_b = _ops.row_norm_scales(flat(bt), stats_b[0])
    return [(crt.times_power_of_two(norm_a, t_a), crt.times_power_of_two(norm_b, t_b)),
            (stats_a[2], stats_b[2])]


def crt_magnitude_vectors(a, bt):
    """(tau, norm scale, usable) pairs of crt_magnitude."""
    stats_a, stats_b = stats_of(a), stats_of(bt)
    norm_a = _ops.row_norm_scales(flat(a), stats_a[0])
    norm_b = _ops.row_norm_scales(flat(bt), stats_b[0])
    return [(stats_a[0], stats_b[0]), (norm_a, norm_b),
            (usable_rows(stats_a), usable_rows(stats_b))]


def crt_magnitude_per_element(a, bt, pairs):
    """The 2-D crt_magnitude of every element."""
    m, n = a.shape[1], bt.shape[1]
    return [ops.crt_magnitude(a[e], bt[e], *element_vectors(pairs, e, m, n))
            for e in range(a.shape[0])]


# ---- Each element gets the bits of the 2-D operator --------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_magnitude_product(device, dtype, shape):
    a, bt = random_operands(shape, dtype, device, seed=sum(shape))
    stats_a, stats_b = stats_of(a), stats_of(bt)
    out = assert_elements_match_2d(ops.magnitude_product, a, bt, [(stats_a[0], stats_b[0])], [], [])
    assert out.dtype == torch.float64 and (out > 0).any()


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,workspace", CHUNKINGS)
@pytest.mark.parametrize("slices,fast,nearest,int8", SLICE_MODES)
def test_gemm_slices(device, dtype, shape, workspace, slices, fast, nearest, int8):
    a, bt = random_operands(shape, dtype, device, seed=sum(shape) + slices)
    stats_a, stats_b = stats_of(a), stats_of(bt)
    pairs = list(zip(stats_a, stats_b))
    # the 2-D reference runs with the default budget: chunking must not change the bits
    out = assert_elements_match_2d(ops.gemm_slices, a, bt, pairs,
                                   [slices, fast, nearest, int8, workspace],
                                   [slices, fast, nearest, int8, 0])
    assert out.dtype == dtype and out.isnan().any() and out.isfinite().any()


def only_element(pairs, e, m, n):
    """crt_magnitude vectors with the usable rows of element e only."""
    (usable_a, usable_b) = pairs[2]
    keep_a, keep_b = torch.zeros_like(usable_a), torch.zeros_like(usable_b)
    keep_a[e * m:(e + 1) * m] = usable_a[e * m:(e + 1) * m]
    keep_b[e * n:(e + 1) * n] = usable_b[e * n:(e + 1) * n]
    return pairs[:2] + [(keep_a, keep_b)]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_crt_magnitude(device, dtype, shape):
    # phi = 0.5: every element's minimum is positive, so each one below is a real comparison
    a, bt = random_operands(shape, dtype, device, seed=sum(shape) + 1, phi=0.5)
    batch, m, _, n = shape
    pairs = crt_magnitude_vectors(a, bt)
    out = ops.crt_magnitude(a, bt, *all_vectors(pairs))
    assert out.shape == () and out.dtype == torch.float64 and out.device == a.device
    per_element = crt_magnitude_per_element(a, bt, pairs)
    assert_bitwise_equal(out, torch.stack(per_element).min())
    assert 0 < out.item() < inf
    # each element alone: the batch with only that element's rows usable
    for e in range(batch):
        alone = ops.crt_magnitude(a, bt, *all_vectors(only_element(pairs, e, m, n)))
        assert_bitwise_equal(alone, per_element[e])


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_crt_magnitude_never_pairs_rows_of_different_elements(device):
    # Element 0 uses only the first half of k and element 1 only the second: the pairs across the
    # two elements have a zero magnitude, those within (entries in [1/2, 1)) do not.
    g = seeded(3)
    a = (torch.rand(2, 6, 16, generator=g, dtype=torch.float64) + 0.5).to(device)
    bt = -(torch.rand(2, 5, 16, generator=g, dtype=torch.float64) + 0.5).to(device)
    for x in (a, bt):
        x[0, :, 8:] = 0.0
        x[1, :, :8] = 0.0
    pairs = crt_magnitude_vectors(a, bt)
    out = ops.crt_magnitude(a, bt, *all_vectors(pairs))
    assert out.item() > 0
    assert_bitwise_equal(out, torch.stack(crt_magnitude_per_element(a, bt, pairs)).min())
    # and the 2-D operator on the flattened operands does see the cross pairs
    assert ops.crt_magnitude(flat(a), flat(bt), *all_vectors(pairs)).item() == 0


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_crt_magnitude_with_nothing_usable_in_some_elements(device):
    a, bt = random_operands((4, 5, 9, 7), torch.float64, device, seed=4, special=False, phi=0.5)
    a[0] = 0.0   # element 0: no usable row
    bt[2] = nan  # element 2: no usable column
    pairs = crt_magnitude_vectors(a, bt)
    per_element = crt_magnitude_per_element(a, bt, pairs)
    assert per_element[0].item() == inf and per_element[2].item() == inf
    assert_bitwise_equal(ops.crt_magnitude(a, bt, *all_vectors(pairs)), torch.stack(per_element).min())
    nothing = pairs[:2] + [(torch.zeros_like(pairs[2][0]), pairs[2][1])]
    assert ops.crt_magnitude(a, bt, *all_vectors(nothing)).item() == inf


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,workspace", CHUNKINGS)
@pytest.mark.parametrize("count", [1, 6, 16])
def test_gemm_crt(device, dtype, shape, workspace, count):
    a, bt = random_operands(shape, dtype, device, seed=sum(shape) + count)
    pairs = crt_vectors(a, bt, count)
    out = assert_elements_match_2d(ops.gemm_crt, a, bt, pairs, [count, workspace], [count, 0])
    assert out.dtype == dtype and out.isnan().any() and out.isfinite().any()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_batches_beyond_one_cublas_call_match_the_cpu(dtype):
    # 70000 elements: more than one strided batched GEMM call takes (65535) and more rows than
    # one grid dimension holds; the CPU runs each element's 2-D product (tests above).
    shape = (70000, 2, 3, 2)
    a, bt = random_operands(shape, dtype, "cpu", seed=11)
    a_gpu, bt_gpu = a.cuda(), bt.cuda()

    def on_both(op, vectors_of, *options):
        cpu = op(a, bt, *all_vectors(vectors_of(a, bt)), *options)
        assert_bitwise_equal(op(a_gpu, bt_gpu, *all_vectors(vectors_of(a_gpu, bt_gpu)), *options), cpu)

    def stats_pairs(x, y):
        return list(zip(stats_of(x), stats_of(y)))

    def tau_pair(x, y):
        return [(stats_of(x)[0], stats_of(y)[0])]

    on_both(ops.magnitude_product, tau_pair)
    on_both(ops.crt_magnitude, crt_magnitude_vectors)
    for workspace in (0, 1 << 20):
        for int8 in (False, True):
            on_both(ops.gemm_slices, stats_pairs, 3, True, False, int8, workspace)
        on_both(ops.gemm_crt, lambda x, y: crt_vectors(x, y, 6), 6, workspace)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", [8, 15])
def test_reconstruction_of_more_tiles_than_the_gpu_holds_matches_the_cpu(dtype, count):
    # 3 elements of 700 x 300: 88 x 3 tiles of 8 rows x 128 columns each, 792 in all, more than
    # the reconstruction's grid (a few blocks per multiprocessor), so each block steps through
    # tiles of other rows, column tiles and elements (the row and element digits carried); the
    # odd sizes leave partial tiles at every edge.
    shape = (3, 700, 40, 300)
    a, bt = random_operands(shape, dtype, "cpu", seed=12)
    expected = ops.gemm_crt(a, bt, *all_vectors(crt_vectors(a, bt, count)), count, 0)
    a_gpu, bt_gpu = a.cuda(), bt.cuda()
    got = ops.gemm_crt(a_gpu, bt_gpu, *all_vectors(crt_vectors(a_gpu, bt_gpu, count)), count, 0)
    assert_bitwise_equal(got, expected)
    assert got.isnan().any() and got.isfinite().any()


# ---- Empty batches and empty elements ----------------------------------------------------------


EMPTY_SHAPES = [pytest.param((0, 5, 9, 7), id="batch-0"), pytest.param((3, 0, 9, 7), id="m-0"),
                pytest.param((3, 5, 9, 0), id="n-0"), pytest.param((3, 5, 0, 7), id="k-0")]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", EMPTY_SHAPES)
def test_empty_batches_and_elements(device, dtype, shape):
    batch, m, k, n = shape
    a, bt = random_operands(shape, dtype, device, seed=5)
    stats_a, stats_b = stats_of(a), stats_of(bt)
    zeros = torch.zeros(batch, m, n, dtype=torch.float64, device=device)
    products = {
        "magnitude_product": assert_elements_match_2d(
            ops.magnitude_product, a, bt, [(stats_a[0], stats_b[0])], [], []),
        "gemm_slices": assert_elements_match_2d(
            ops.gemm_slices, a, bt, list(zip(stats_a, stats_b)), [3, True, False, False, 0],
            [3, True, False, False, 0]),
        "gemm_crt": assert_elements_match_2d(
            ops.gemm_crt, a, bt, crt_vectors(a, bt, 4), [4, 0], [4, 0]),
    }
    for name, out in products.items():
        assert torch.equal(out.double(), zeros), name
        assert out.dtype == (torch.float64 if name == "magnitude_product" else dtype), name
    magnitude = ops.crt_magnitude(a, bt, *all_vectors(crt_magnitude_vectors(a, bt)))
    assert magnitude.shape == () and magnitude.item() == inf


# ---- Argument errors ---------------------------------------------------------------------------


def op_arguments(name, a, bt, rows_a, rows_b):
    """Valid-looking arguments of operator `name` for a and bt, with per-row vectors of rows_a and
    rows_b entries."""
    device = a.device
    ints_a = torch.zeros(rows_a, dtype=torch.int32, device=device)
    ints_b = torch.zeros(rows_b, dtype=torch.int32, device=device)
    flags_a = torch.zeros(rows_a, dtype=torch.bool, device=device)
    flags_b = torch.zeros(rows_b, dtype=torch.bool, device=device)
    if name == "magnitude_product":
        return [a, bt, ints_a, ints_b]
    if name == "gemm_slices":
        return [a, bt, ints_a, ints_b, ints_a, ints_b, flags_a, flags_b, 3, True, False, False, 0]
    if name == "crt_magnitude":
        return [a, bt, ints_a, ints_b, ints_a, ints_b, flags_a, flags_b]
    return [a, bt, ints_a, ints_b, flags_a, flags_b, 4, 0]


OP_NAMES = ["magnitude_product", "gemm_slices", "crt_magnitude", "gemm_crt"]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("name", OP_NAMES)
class TestErrors:
    def test_mixed_ranks(self, device, name):
        a, bt = random_operands((2, 5, 9, 7), torch.float64, device, seed=6)
        message = (f"ozaki::{name}: a and bt must both be 2-D or both be 3-D (batched), got a of "
                   "shape [2, 5, 9] and bt of shape [7, 9]")
        with pytest.raises(RuntimeError, match=re.escape(message)):
            getattr(ops, name)(*op_arguments(name, a, bt[0], 10, 7))
        message = message.replace("[2, 5, 9] and bt of shape [7, 9]",
                                  "[5, 9] and bt of shape [2, 7, 9]")
        with pytest.raises(RuntimeError, match=re.escape(message)):
            getattr(ops, name)(*op_arguments(name, a[0], bt, 5, 14))

    def test_different_batch_sizes(self, device, name):
        a, bt = random_operands((3, 5, 9, 7), torch.float64, device, seed=7)
        message = (f"ozaki::{name}: a and bt must have the same batch size, got a of shape "
                   "[3, 5, 9] and bt of shape [2, 7, 9]")
        with pytest.raises(RuntimeError, match=re.escape(message)):
            getattr(ops, name)(*op_arguments(name, a, bt[:2], 15, 14))

    def test_four_dimensional_operand(self, device, name):
        a, bt = random_operands((3, 5, 9, 7), torch.float64, device, seed=8)
        message = (f"ozaki::{name}: a must be 2-D (rows, k) or 3-D (batch, rows, k), got 4-D of "
                   "shape [1, 3, 5, 9]")
        with pytest.raises(RuntimeError, match=re.escape(message)):
            getattr(ops, name)(*op_arguments(name, a[None], bt, 15, 21))

    @pytest.mark.parametrize("operand", ["a", "bt"])
    def test_vector_of_the_wrong_length(self, device, name, operand):
        a, bt = random_operands((3, 5, 9, 7), torch.float64, device, seed=9)
        rows_a, rows_b = (14, 21) if operand == "a" else (15, 20)
        first = {"magnitude_product": "tau", "gemm_slices": "tau", "crt_magnitude": "tau",
                 "gemm_crt": "scale"}[name]
        message = (f"ozaki::{name}: {first}_{operand[0]} must be a contiguous 1-D Int tensor of "
                   + ("length batch * m = 3 * 5 = 15 (one entry per row of the flattened a), "
                      "got [14] Int" if operand == "a" else
                      "length batch * n = 3 * 7 = 21 (one entry per row of the flattened bt), "
                      "got [20] Int"))
        with pytest.raises(RuntimeError, match=re.escape(message)):
            getattr(ops, name)(*op_arguments(name, a, bt, rows_a, rows_b))

    def test_vector_of_the_element_length(self, device, name):
        # per-element vectors (length m) where the batch needs batch * m
        a, bt = random_operands((3, 5, 9, 7), torch.float64, device, seed=10)
        with pytest.raises(RuntimeError, match=r"of length batch \* m = 3 \* 5 = 15 .* got \[5\]"):
            getattr(ops, name)(*op_arguments(name, a, bt, 5, 21))
