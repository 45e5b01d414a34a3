"""Scheme II's k-shard operators (csrc/ozaki.cpp): a product split along k into shards, each holding
columns [k0, k0 + k_i) of A's rows and of B's columns, with the whole rows' tau and scale codes.
row_norm_square_sums, int8_matmul of crt_magnitude_digits and crt_residue_products return exact
integers whose sums over the shards are the whole product's, in any order; crt_round turns the
summed residue products into exactly gemm_crt's bits.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from helpers import (assert_bitwise_equal, cpu_and_cuda, norm_scale_code, phi_tensor, scale_of,
                     seeded)
from ozaki import _ops, accuracy
from ozaki import crt
from ozaki.accuracy import round_exact

DTYPES = [pytest.param(torch.float64, id="float64"), pytest.param(torch.float32, id="float32")]
#: ((m, k), (n, k)) of a and bt.
SHAPES = [pytest.param((7, 50), (5, 50), id="7x50x5"),
          pytest.param((16, 300), (9, 300), id="16x300x9")]
#: Shard widths as a function of k: two and three uneven shards, one of them a single column.
SPLITS = [pytest.param(lambda k: (1, k - 1), id="2-shards"),
          pytest.param(lambda k: (k // 3, 1, k - k // 3 - 1), id="3-shards")]
KINDS = ["phi", "integers"]


def operands(shape_a, shape_b, dtype, kind, seed, device, phi=4.0):
    """Fresh (a, bt): phi-style entries (wide exponents by default), or small integers with a zero
    row."""
    g = seeded(seed)
    if kind == "phi":
        a, bt = phi_tensor(shape_a, dtype, g, phi), phi_tensor(shape_b, dtype, g, phi)
    else:
        a = torch.randint(-1000, 1000, shape_a, generator=g).to(dtype)
        bt = torch.randint(-1000, 1000, shape_b, generator=g).to(dtype)
        a[1] = 0.0
    return a.to(device), bt.to(device)


def shards(x, widths):
    """The contiguous column blocks of x with the given widths."""
    assert sum(widths) == x.shape[1] and min(widths) >= 1
    return [block.contiguous() for block in torch.split(x, list(widths), dim=1)]


def scales_of(a, bt, stats_a, stats_b, moduli):
    """Scale codes from the whole rows: those of c 2^t for the norm scales c and
    (t_a, t_b) = scale_bits, for every row (the crt backend's crt_row_scales keeps a power of two
    where it is exact; the operators take any codes, and these exercise the division)."""
    norm_a = _ops.row_norm_scales(a, stats_a[0])
    norm_b = _ops.row_norm_scales(bt, stats_b[0])
    t_a, t_b = crt.scale_bits(moduli, a.shape[1])
    return crt.times_power_of_two(norm_a, t_a), crt.times_power_of_two(norm_b, t_b)


def moduli_counts(k):
    """The fewest valid moduli for k, a middle count and the largest ones."""
    return sorted({crt.smallest_moduli(k), 8, 15, 16})


def summed(parts):
    total = parts[0].clone()
    for part in parts[1:]:
        total += part
    return total


# ---- crt_residue_products + crt_round: gemm_crt's bits from shards -------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape_a,shape_b", SHAPES)
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("kind", KINDS)
def test_summed_residue_products_round_to_gemm_crt(device, dtype, shape_a, shape_b, split, kind):
    a, bt = operands(shape_a, shape_b, dtype, kind, seed=shape_a[1] + len(kind), device=device)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    widths = split(a.shape[1])
    for moduli in moduli_counts(a.shape[1]):
        scale_a, scale_b = scales_of(a, bt, stats_a, stats_b, moduli)
        expected = _ops.gemm_crt(a, bt, scale_a, scale_b, stats_a, stats_b, moduli)
        parts = [_ops.crt_residue_products(sa, sb, scale_a, scale_b, moduli)
                 for sa, sb in zip(shards(a, widths), shards(bt, widths))]
        assert all(p.shape == (moduli, a.shape[0], bt.shape[0]) and p.dtype == torch.int32
                   for p in parts)
        whole = _ops.crt_residue_products(a, bt, scale_a, scale_b, moduli)
        assert torch.equal(summed(parts), whole)
        assert torch.equal(summed(parts[::-1]), whole)
        for products in (summed(parts), summed(parts[::-1]), whole):
            assert_bitwise_equal(_ops.crt_round(products, scale_a, scale_b, dtype), expected)


def scaled_values(x, codes):
    """x c, exactly, for every entry x of each row and the scale c of its code: up to 58 bits,
    more than float64 holds."""
    return [[Fraction(v) * scale_of(code) for v in row]
            for row, code in zip(x.cpu().double().tolist(), codes.cpu().tolist())]


def residue_reference(scaled, p, weight=1):
    """Symmetric residues mod p of weight * RN(v) for the exact values v, ties to even (round() on
    a Fraction), as a float64 tensor."""
    r = [[weight * round(v) % p for v in row] for row in scaled]
    return torch.tensor([[v - p if v > (p - 1) // 2 else v for v in row] for row in r],
                        dtype=torch.float64)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("moduli", [6, crt.MAX_MODULI])
def test_residue_products_are_the_exact_products_of_residues(device, dtype, moduli):
    a, bt = operands((6, 40), (8, 40), dtype, "phi", seed=5, device=device)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    scale_a, scale_b = scales_of(a, bt, stats_a, stats_b, moduli)
    # scales with 5-bit significands other than 16: A' = RN(x c) is no shifted x
    assert (scale_a % 16 != 0).any() and (scale_b % 16 != 0).any()
    out = _ops.crt_residue_products(a, bt, scale_a, scale_b, moduli).cpu()
    assert out.shape == (moduli, 6, 8)
    exact_a, exact_b = scaled_values(a, scale_a), scaled_values(bt, scale_b)
    if moduli == crt.MAX_MODULI:
        # the scaling fills the budget: entries of A' reach 2^57
        assert max(abs(v) for row in exact_a for v in row) >= 2 ** 57
        if dtype == torch.float64:  # and x c takes up to 58 bits: not every one is a float64
            assert any(Fraction(float(v)) != v for row in exact_a for v in row)
    else:
        # and fewer bits leave entries between integers, which the rounding decides
        assert all(any(v.denominator > 1 for row in exact for v in row)
                   for exact in (exact_a, exact_b))
    product = crt.moduli_product(moduli)
    for i, p in enumerate(crt.MODULI[:moduli]):
        # B's residues carry the CRT weight (P / p)^-1 mod p (docs/algorithm.md, section 9.3)
        weight = pow(product // p, -1, p)
        ra, rb = residue_reference(exact_a, p), residue_reference(exact_b, p, weight)
        assert torch.equal(out[i], (ra @ rb.T).int()), p  # float64: exact


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("moduli", [2, 5, 9, crt.MAX_MODULI])
def test_residues_of_scaled_integers_up_to_2_62(device, dtype, moduli):
    """Scale codes up to 16 * 61 + 15 take entries of magnitude up to 1 to scaled integers of up
    to 2^62 (the largest the scaling makes), of either sign; smaller codes leave fractions that
    the rounding decides. B's residues carry the CRT weight: every residue is that of the exact
    integer (the row pass; test_columns_in_place.py checks the column pass, which takes some
    moduli on the FP64 pipe, against these rows' bits at the same sizes)."""
    g = seeded(60 + moduli)
    k = 40
    a = torch.rand((6, k), generator=g, dtype=torch.float64).mul_(2).sub_(1).to(dtype)
    bt = torch.rand((9, k), generator=g, dtype=torch.float64).mul_(2).sub_(1).to(dtype)
    largest = 1.0 - torch.finfo(dtype).eps / 2  # the largest magnitude below 1
    for x in (a, bt):
        x[:, 0], x[:, 1] = largest, -largest
    exponents = torch.tensor([61, 61, 58, 47, 33, 12, 61, 40, 2])
    fractions = torch.randint(0, 16, (9,), generator=g)
    fractions[0] = 15  # |x| c up to (1 - 2^-53) 31 2^57, just below 2^62
    codes = (16 * exponents + fractions).int()
    scale_a, scale_b = codes[:6].to(device), codes.to(device)
    out = _ops.crt_residue_products(a.to(device), bt.to(device), scale_a, scale_b, moduli).cpu()
    exact_a, exact_b = scaled_values(a, scale_a), scaled_values(bt, scale_b)
    assert max(abs(v) for row in exact_b for v in row) > 2 ** 61.9
    product = crt.moduli_product(moduli)
    for i, p in enumerate(crt.MODULI[:moduli]):
        weight = pow(product // p, -1, p)
        ra, rb = residue_reference(exact_a, p), residue_reference(exact_b, p, weight)
        assert torch.equal(out[i], (ra @ rb.T).int()), p  # float64: exact


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("moduli", [1, 8, crt.MAX_MODULI])
def test_left_residues_round_entries_of_every_binade_to_nearest_even(device, moduli):
    """Every row residue of scheme II is that of RN(a c), ties to even, against Python integers:
    entries the scaling turns into exact ties n + 1/2 (both parities, both signs) and into values
    one unit of the last place either side of ties, quarters that round to 0, integers with long
    runs of trailing zero bits, subnormals that a scale of 2^1058 turns into fractions, ties and
    integers up to 2^36, huge entries that a scale of about 2^-1000 brings back to small integers,
    zeros of both signs, NaN and +-Inf (residue 0); the other rows' scales are drawn from about
    2^-1064 to 2^61 with every 5-bit significand, and k = 37 leaves the rows unaligned."""
    g = seeded(80 + moduli)
    m, k = 16, 37
    exponents = torch.randint(-60, 2, (m, k), generator=g)
    a = torch.ldexp(torch.rand(m, k, generator=g, dtype=torch.float64) + 0.5, exponents)
    a = torch.where(torch.rand(m, k, generator=g) < 0.5, -a, a)
    codes = 16 * torch.randint(-1060, 61, (m,), generator=g) + torch.randint(0, 16, (m,),
                                                                             generator=g)
    codes[:4] = torch.tensor([16 * 40, 16 * 40 + 15, 16 * 61 + 15, 16 * -1000 + 3])
    # row 0, scale 2^40: ties n + 1/2 for even and odd n, values just off them, and fractions
    ties = [(2 * n + 1) * 2.0 ** -41 for n in range(-6, 6)]
    a[0, :12] = torch.tensor(ties, dtype=torch.float64)
    a[0, 12:16] = torch.tensor([ties[7] * (1 + 2 ** -52), ties[8] * (1 - 2 ** -53), 2.0 ** -42,
                                -(2.0 ** -42) * (1 + 2 ** -52)], dtype=torch.float64)
    # row 1: integers with trailing zeros once scaled (f = 15: c = 31 2^36)
    a[1, :8] = torch.tensor([3 * 2.0 ** -10, -(2.0 ** 0), 2.0 ** -36, 5 * 2.0 ** -30, 1.5, -0.75,
                             2.0 ** -35, 7 * 2.0 ** -20], dtype=torch.float64)
    # row 3, scale 19 2^-1004: subnormals (to 0) and huge entries brought back to small integers
    a[3, :6] = torch.tensor([5e-324, -3 * 5e-324, 2.0 ** -1030, 2.0 ** 1000, -(2.0 ** 1001) * 1.5,
                             2.0 ** 998 * 1.25], dtype=torch.float64)
    a[2, :3] = torch.tensor([0.0, -0.0, 1.0 - 2.0 ** -53], dtype=torch.float64)  # 31 2^57 c < 2^62
    a[4, :3] = torch.tensor([math.inf, -math.inf, math.nan], dtype=torch.float64)
    # row 5, scale 2^1058: subnormals only, among them ties (2.5, -3.5), 2^-16 and the largest
    a[5] = torch.ldexp(torch.rand(k, generator=g, dtype=torch.float64) + 0.5,
                       torch.randint(-1074, -1022, (k,), generator=g))
    a[5, :4] = torch.tensor([5 * 2.0 ** -1059, -7 * 2.0 ** -1059, 5e-324,
                             2.0 ** -1022 - 5e-324], dtype=torch.float64)
    codes[5] = 16 * 1058
    finite = torch.isfinite(a)
    # keep |a c| <= 2^62, the scaling's promise, on rows whose code the draw chose
    exact = scaled_values(torch.where(finite, a, torch.zeros_like(a)), codes)
    for r in range(m):
        top = max(abs(v) for v in exact[r])
        while top > 2 ** 62:
            codes[r] -= 16
            top /= 2
    exact = scaled_values(torch.where(finite, a, torch.zeros_like(a)), codes)
    assert any(v == round(v) + Fraction(1, 2) for v in exact[0])  # ties are there
    assert exact[5][:2] == [Fraction(5, 2), Fraction(-7, 2)] and exact[5][3] > 2 ** 35
    assert max(abs(v) for row in exact for v in row) > 2 ** 61
    residues = _ops.crt_left_residues(a.to(device), codes.int().to(device), moduli, False).cpu()
    for i, p in enumerate(crt.MODULI[:moduli]):
        assert torch.equal(residues[i, :, :k].double(), residue_reference(exact, p)), p


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_residue_products_do_not_depend_on_the_workspace(device):
    # m, n > 256: a 1-byte budget cuts both into chunks of unequal sizes
    a, bt = operands((300, 20), (260, 20), torch.float64, "phi", seed=6, device=device)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    scale_a, scale_b = scales_of(a, bt, stats_a, stats_b, 9)
    default = _ops.crt_residue_products(a, bt, scale_a, scale_b, 9)
    assert torch.equal(_ops.crt_residue_products(a, bt, scale_a, scale_b, 9, workspace=1), default)
    assert_bitwise_equal(_ops.crt_round(default, scale_a, scale_b, torch.float64),
                         _ops.gemm_crt(a, bt, scale_a, scale_b, stats_a, stats_b, 9))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_wide_products_in_column_chunks_give_the_same_bits(device):
    # 5000 columns, 3 moduli, a 1 MiB budget: all 8 rows fit with 3584 columns but not with 5000,
    # so the CUDA backend keeps every row and cuts the columns in two (workspace.h,
    # plan_column_chunks); the CPU backend chunks its own way. Bits as with one chunk.
    a, bt = operands((8, 64), (5000, 64), torch.float64, "phi", seed=7, device=device)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    scale_a, scale_b = scales_of(a, bt, stats_a, stats_b, 3)
    whole = _ops.crt_residue_products(a, bt, scale_a, scale_b, 3, workspace=1 << 40)
    chunked = _ops.crt_residue_products(a, bt, scale_a, scale_b, 3, workspace=1 << 20)
    assert torch.equal(chunked, whole)
    assert_bitwise_equal(_ops.gemm_crt(a, bt, scale_a, scale_b, stats_a, stats_b, 3, 1 << 20),
                         _ops.crt_round(whole, scale_a, scale_b, torch.float64))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_empty_shapes(device):
    def zeros(*shape):
        return torch.zeros(shape, dtype=torch.float64, device=device)

    def int32(n):
        return torch.zeros(n, dtype=torch.int32, device=device)

    for (m, k, n) in [(0, 5, 3), (4, 5, 0), (4, 0, 3)]:
        out = _ops.crt_residue_products(zeros(m, k), zeros(n, k), int32(m), int32(n), 3)
        assert out.shape == (3, m, n) and out.dtype == torch.int32 and out.device.type == device
        assert not out.any()
        rounded = _ops.crt_round(out, int32(m), int32(n), torch.float32)
        assert rounded.shape == (m, n) and rounded.dtype == torch.float32 and not rounded.any()
        digits = _ops.crt_magnitude_digits(zeros(m, k), int32(m), int32(m))
        assert digits.shape == (m, k) and digits.dtype == torch.int8
        sums = _ops.row_norm_square_sums(zeros(m, k), int32(m))
        assert sums.shape == (m,) and sums.dtype == torch.int64 and not sums.any()


# ---- row_norm_square_sums -----------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape_a,shape_b", SHAPES)
@pytest.mark.parametrize("split", SPLITS)
def test_norm_square_sums_add_up_over_shards(device, dtype, shape_a, shape_b, split):
    a, _ = operands(shape_a, shape_b, dtype, "phi", seed=shape_a[0], device=device)
    tau = _ops.row_stats(a)[0]
    whole = _ops.row_norm_square_sums(a, tau)
    assert whole.dtype == torch.int64 and (whole > 0).all()
    parts = [_ops.row_norm_square_sums(block, tau) for block in shards(a, split(a.shape[1]))]
    assert torch.equal(summed(parts), whole)
    codes = [norm_scale_code(s, t) for s, t in zip(whole.tolist(), tau.tolist())]
    assert codes == _ops.row_norm_scales(a, tau).tolist()
    assert any(code % 16 for code in codes)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_square_sums_match_python_integers(device, dtype):
    a = phi_tensor((5, 9), dtype, seeded(7), phi=3.0)
    a[1] = 0.0
    a[2, 3], a[3, 0] = float("nan"), float("-inf")  # non-finite entries add nothing
    a[4, 2] = 2.0 ** -130  # far below its row's grid: still one unit
    tau = _ops.row_stats(a)[0]
    expected = [sum(math.ceil(abs(Fraction(x)) * Fraction(2) ** (16 - t)) ** 2
                    for x in row if math.isfinite(x))
                for row, t in zip(a.double().tolist(), tau.tolist())]
    out = _ops.row_norm_square_sums(a.to(device), tau.to(device))
    assert out.tolist() == expected
    assert out[1] == 0 and out[4] > 0


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_norm_scales_match_python_integers(device, dtype):
    a = phi_tensor((7, 9), dtype, seeded(17), phi=3.0)
    a[1] = 0.0
    a[2, 3], a[3, 0] = float("nan"), float("-inf")
    # norms that are powers of two meet both of norm_scale_code's tests with equality (4^e = sum,
    # (16 + f)^2 sum = 4^(e + 4)): the scale is exactly 1 / norm
    a[4] = 0.0
    a[4, 6] = -2.0 ** -3
    a[5] = 0.0
    a[5, :4] = 1.0
    tau = _ops.row_stats(a)[0]
    sums = _ops.row_norm_square_sums(a, tau)  # Python integers above
    codes = _ops.row_norm_scales(a.to(device), tau.to(device))
    assert codes.dtype == torch.int32 and codes.device.type == device
    assert codes.tolist() == [norm_scale_code(s, t) for s, t in zip(sums.tolist(), tau.tolist())]
    assert [scale_of(code) for code in codes[4:6].tolist()] == [8, Fraction(1, 2)]
    assert codes[1].item() == -16 * tau[1].item() and any(code % 16 for code in codes.tolist())


# ---- crt_magnitude_digits -----------------------------------------------------------------------


def usable(stats):
    return (stats[1] > 0) & ~stats[2]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape_a,shape_b", SHAPES)
@pytest.mark.parametrize("split", SPLITS)
def test_digit_products_add_up_to_crt_magnitude(device, dtype, shape_a, shape_b, split):
    # phi = 0.5: the minimum is positive, so the comparison below is a real one
    a, bt = operands(shape_a, shape_b, dtype, "phi", seed=shape_b[0], device=device, phi=0.5)
    a[2] = 0.0                    # unusable: zero
    a[1, 4] = 1e3 * a[1].abs().max()  # a digit capped at 127
    bt[1, 3] = float("nan")      # unusable: non-finite
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    tau_a, tau_b = stats_a[0], stats_b[0]
    norm_a, norm_b = _ops.row_norm_scales(a, tau_a), _ops.row_norm_scales(bt, tau_b)
    assert (norm_a % 16 != 0).any() and (norm_b % 16 != 0).any()
    k = a.shape[1]
    da, db = (_ops.crt_magnitude_digits(a, tau_a, norm_a),
              _ops.crt_magnitude_digits(bt, tau_b, norm_b))
    assert da.shape == a.shape and da.dtype == torch.int8 and da.is_contiguous()
    assert da.tolist() == reference_digits(a, norm_a, k)
    assert (da == 127).any() and ((da > 0) & (da < 127)).any()  # capped and resolved digits
    whole = _ops.int8_matmul(da, db)
    widths = split(k)
    parts = [_ops.int8_matmul(_ops.crt_magnitude_digits(sa, tau_a, norm_a, k),
                              _ops.crt_magnitude_digits(sb, tau_b, norm_b, k))
             for sa, sb in zip(shards(a, widths), shards(bt, widths))]
    assert torch.equal(summed(parts), whole)
    values = summed(parts).double() * 2.0 ** (-2 * crt.magnitude_gain(k))  # exact
    mask = usable(stats_a).unsqueeze(1) & usable(stats_b).unsqueeze(0)
    smallest = values.masked_fill(~mask, float("inf")).amin()
    expected = _ops.crt_magnitude(a, bt, stats_a, stats_b, norm_a, norm_b, usable(stats_a),
                                  usable(stats_b))
    assert_bitwise_equal(smallest, expected)
    assert 0 < smallest.item() < float("inf")


def test_crt_magnitude_of_tall_operands_in_chunks():
    """The CPU's crt_magnitude reads tall operands in chunks of 2^24 digits (here 256 rows of
    k = 2^16, in 3 x 2 chunks with ragged edges): the same minimum as the whole digit product."""
    g = seeded(21)
    k = 1 << 16
    a = accuracy.phi_matrix(600, k, 0.5, generator=g, dtype=torch.float32)
    bt = accuracy.phi_matrix(300, k, 0.5, generator=g, dtype=torch.float32)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    norm_a, norm_b = _ops.row_norm_scales(a, stats_a[0]), _ops.row_norm_scales(bt, stats_b[0])
    whole = _ops.int8_matmul(_ops.crt_magnitude_digits(a, stats_a[0], norm_a),
                             _ops.crt_magnitude_digits(bt, stats_b[0], norm_b)).double()
    values = whole * 2.0 ** (-2 * crt.magnitude_gain(k))
    expected = _ops.crt_magnitude(a, bt, stats_a, stats_b, norm_a, norm_b, usable(stats_a),
                                  usable(stats_b))
    assert_bitwise_equal(values.amin(), expected)


def reference_digits(a, codes, k):
    """min(127, floor(|a| c 2^g)) per entry (c: its row's norm scale, g the gain of k; 0 for
    NaN/Inf), from Fractions."""
    gain = Fraction(2) ** crt.magnitude_gain(k)
    return [[min(127, math.floor(abs(Fraction(x)) * scale_of(code) * gain)) if math.isfinite(x)
             else 0 for x in row] for row, code in zip(a.double().tolist(), codes.tolist())]


# ---- crt_round: the division by the scales' significands --------------------------------------


def residue_products_of(values, moduli, generator):
    """(moduli, m, n) int32 residue products that crt_round reads as the integers `values` (a list
    of rows of Python ints, |X| < P/2): y_i X mod p_i (the CRT weight that B's residues carry), each
    plus a random multiple of p_i, as the INT32 sums of a GEMM may hold any representative."""
    product = crt.moduli_product(moduli)
    planes = []
    for p in crt.MODULI[:moduli]:
        weight = pow(product // p, -1, p)
        shift = torch.randint(-1000, 1001, (len(values), len(values[0])), generator=generator)
        residues = torch.tensor([[weight * x % p for x in row] for row in values])
        planes.append(residues + p * shift)
    return torch.stack(planes).int()


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype,moduli", [(torch.float64, 15), (torch.float64, crt.MAX_MODULI),
                                          (torch.float32, 7), (torch.float32, 8)])
def test_exact_quotients_and_ties_round_to_nearest_even(device, dtype, moduli):
    """X = d (2 u + 1) 2^s for every significand product d = (16 + f_a)(16 + f_b): X / d is an
    integer (no remainder) that falls exactly halfway between two numbers of the output format,
    where only an exact quotient and sticky bit round to even; and X + 1, X - 1 next to it."""
    generator = seeded(moduli)
    precision = {torch.float64: 53, torch.float32: 24}[dtype]
    limit = crt.moduli_product(moduli) // 2 - crt.moduli_product(moduli) // 2 ** 30
    codes_a = torch.arange(16, dtype=torch.int32)  # f_a = 0 .. 15, e = 0
    codes_b = torch.arange(16, dtype=torch.int32).repeat_interleave(3)  # three columns per f_b
    values = []
    for f_a in range(16):
        row = []
        for column in range(48):
            d = (16 + f_a) * (16 + column // 3)
            odd = 2 * (2 ** (precision - 1) + int(torch.randint(0, 2 ** (precision - 1), (1,),
                                                                generator=generator))) + 1
            room = (limit // (d * odd + 1)).bit_length() - 1  # 2^s d odd + 1 stays within limit
            s = int(torch.randint(0, room + 1, (1,), generator=generator))
            sign = 1 if int(torch.randint(0, 2, (1,), generator=generator)) else -1
            row.append(sign * (d * odd * 2 ** s + (0, 1, -1)[column % 3]))
        values.append(row)
    products = residue_products_of(values, moduli, generator).to(device)
    out = _ops.crt_round(products, codes_a.to(device), codes_b.to(device), dtype)
    exact = [[Fraction(x) / (scale_of(a) * scale_of(b)) for x, b in zip(row, codes_b.tolist())]
             for row, a in zip(values, codes_a.tolist())]
    assert_bitwise_equal(out, round_exact(np.array(exact, dtype=object), dtype=dtype))


# ---- CUDA gives the CPU's bits ------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_matches_cpu(dtype):
    a, bt = operands((33, 130), (21, 130), dtype, "phi", seed=8, device="cpu")
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    ga, gbt = a.cuda(), bt.cuda()
    for x, tau in ((a, stats_a[0]), (bt, stats_b[0])):
        assert torch.equal(_ops.row_norm_square_sums(x.cuda(), tau.cuda()).cpu(),
                           _ops.row_norm_square_sums(x, tau))
        norm = _ops.row_norm_scales(x, tau)
        assert torch.equal(_ops.crt_magnitude_digits(x.cuda(), tau.cuda(), norm.cuda(), 200).cpu(),
                           _ops.crt_magnitude_digits(x, tau, norm, 200))
    for moduli in moduli_counts(a.shape[1]):
        scale_a, scale_b = scales_of(a, bt, stats_a, stats_b, moduli)
        cpu = _ops.crt_residue_products(a, bt, scale_a, scale_b, moduli)
        gpu = _ops.crt_residue_products(ga, gbt, scale_a.cuda(), scale_b.cuda(), moduli)
        assert torch.equal(gpu.cpu(), cpu)
        assert_bitwise_equal(_ops.crt_round(gpu, scale_a.cuda(), scale_b.cuda(), dtype),
                             _ops.crt_round(cpu, scale_a, scale_b, dtype))


# ---- argument checks ----------------------------------------------------------------------------


def f64(*shape):
    return torch.zeros(shape, dtype=torch.float64)


def i32(n):
    return torch.zeros(n, dtype=torch.int32)


RESIDUE_PRODUCTS_ERRORS = [
    pytest.param((f64(2, 3, 4), f64(3, 4), i32(3), i32(3), 4), "a must be 2-D", id="a-3d"),
    pytest.param((f64(2, 4).int(), f64(3, 4), i32(2), i32(3), 4), "a must be float64 or float32",
                 id="a-dtype"),
    pytest.param((f64(2, 4), f64(3, 4).t(), i32(2), i32(4), 4), "bt must be contiguous",
                 id="bt-strided"),
    pytest.param((f64(2, 4), f64(3, 4).float(), i32(2), i32(3), 4), "same dtype", id="dtypes"),
    pytest.param((f64(2, 4), f64(3, 5), i32(2), i32(3), 4), "same number of columns", id="k"),
    pytest.param((f64(2, 4), f64(3, 4), i32(3), i32(3), 4), "scale_a", id="scale_a-length"),
    pytest.param((f64(2, 4), f64(3, 4), i32(2), i32(3).long(), 4), "scale_b", id="scale_b-dtype"),
    pytest.param((f64(2, 4), f64(3, 4), i32(2), i32(3), 0), "moduli must be in [1, 16], got 0",
                 id="moduli-0"),
    pytest.param((f64(2, 4), f64(3, 4), i32(2), i32(3), 17), "moduli must be in [1, 16], got 17",
                 id="moduli-17"),
    # empty operands of a too-large k cost nothing and are still refused
    pytest.param((f64(0, 1 << 17), f64(3, 1 << 17), i32(0), i32(3), 4),
                 "k = 131072 is too large", id="k-too-large"),
]


@pytest.mark.parametrize("args,message", RESIDUE_PRODUCTS_ERRORS)
def test_residue_products_errors(args, message):
    with pytest.raises(RuntimeError, match=r"ozaki::crt_residue_products: .*") as info:
        _ops.crt_residue_products(*args)
    assert message in str(info.value)


def products(*shape):
    return torch.zeros(shape, dtype=torch.int32)


ROUND_ERRORS = [
    pytest.param((products(3, 4), i32(3), i32(4), torch.float64), "products must be a contiguous "
                 "3-D int32", id="products-2d"),
    pytest.param((products(2, 3, 4).long(), i32(3), i32(4), torch.float64), "products must be",
                 id="products-dtype"),
    pytest.param((products(0, 3, 4), i32(3), i32(4), torch.float64),
                 "products.size(0) (the moduli count) must be in [1, 16], got 0", id="moduli-0"),
    pytest.param((products(17, 3, 4), i32(3), i32(4), torch.float64),
                 "products.size(0) (the moduli count) must be in [1, 16], got 17", id="moduli-17"),
    pytest.param((products(2, 3, 4), i32(4), i32(4), torch.float64), "scale_a", id="scale_a"),
    pytest.param((products(2, 3, 4), i32(3), i32(3), torch.float64), "scale_b", id="scale_b"),
    pytest.param((products(2, 3, 4), i32(3), i32(4), torch.int32),
                 "dtype must be float64 or float32, got Int", id="dtype"),
]


@pytest.mark.parametrize("args,message", ROUND_ERRORS)
def test_round_errors(args, message):
    with pytest.raises(RuntimeError) as info:
        _ops.crt_round(*args)
    assert "ozaki::crt_round: " + message in str(info.value)


def magnitude_digits_of(a, tau):
    """crt_magnitude_digits with valid norm codes of 4 rows (checked after a and tau)."""
    return _ops.crt_magnitude_digits(a, tau, i32(4))


def test_magnitude_digits_errors():
    with pytest.raises(RuntimeError, match="norm must be a contiguous 1-D Int tensor of length 4"):
        _ops.crt_magnitude_digits(f64(4, 3), i32(4), i32(5))
    with pytest.raises(RuntimeError, match="total_k must be 0 or at least the operands' inner "
                                           "dimension 3, got 2"):
        _ops.crt_magnitude_digits(f64(4, 3), i32(4), i32(4), 2)
    with pytest.raises(RuntimeError, match="k = 131072 is too large"):
        _ops.crt_magnitude_digits(f64(4, 3), i32(4), i32(4), 1 << 17)


@pytest.mark.parametrize("op", [_ops.row_norm_square_sums, magnitude_digits_of,
                                _ops.row_norm_scales])
def test_row_operator_errors(op):
    with pytest.raises(RuntimeError, match="a must be 2-D, got 1-D"):
        op(f64(4), i32(4))
    with pytest.raises(RuntimeError, match="a must be float64 or float32"):
        op(f64(4, 3).half(), i32(4))
    with pytest.raises(RuntimeError, match="tau must be a contiguous 1-D Int tensor of length 4"):
        op(f64(4, 3), i32(3))
