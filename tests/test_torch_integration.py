"""ozaki and torch's machinery: torch.library registrations (opcheck of every operator),
torch.compile (fullgraph, same bits as eager, forward and backward, with ozaki.enable) and
autograd (gradcheck, gradgradcheck, and gradients that are ozaki products with the forward's
options) (ozaki/library.py, docs/torch.md)."""

import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import ozaki
from helpers import assert_bitwise_equal, cpu_and_cuda, phi_tensor, seeded
from ozaki import _ops, crt, gemm_op, replay

OPS = torch.ops.ozaki
nan = float("nan")
f64 = torch.float64






def operands(shapes, seed, device, dtype=f64, requires_grad=False):
    g = seeded(seed)
    return [phi_tensor(tuple(s), dtype, g).to(device).requires_grad_(requires_grad) for s in shapes]


# ---- torch.library.opcheck of every operator ----------------------------------------------------


def row_operands(device, batch=None, m=5, n=4, k=9, seed=1):
    """What ozaki/product.py hands the low-level operators: a (m, k) and bt (n, k) (or batches
    (batch, m, k), (batch, n, k)), row stats of the flattened rows, norm scale codes, usable
    masks."""
    lead = () if batch is None else (batch,)
    a, bt = operands([(*lead, m, k), (*lead, n, k)], seed, device)
    stats_a, stats_b = _ops.row_stats(a.reshape(-1, k)), _ops.row_stats(bt.reshape(-1, k))
    norm_a = _ops.row_norm_scales(a.reshape(-1, k), stats_a[0])
    norm_b = _ops.row_norm_scales(bt.reshape(-1, k), stats_b[0])
    usable_a = (stats_a[1] > 0) & ~stats_a[2]
    usable_b = (stats_b[1] > 0) & ~stats_b[2]
    return a, bt, stats_a, stats_b, norm_a, norm_b, usable_a, usable_b


def slices_args(device, batch=None, int8=False, nearest=False):
    a, bt, sa, sb, *_ = row_operands(device, batch)
    return (a, bt, sa[0], sb[0], sa[1], sb[1], sa[2], sb[2], 3, True, nearest, int8, 0)


def kept_plan_reads_args(device, exponents=False):
    """crt_kept_plan_reads' arguments: a's parts as ozaki.prepare keeps them (its usable rows, the
    magnitude digits of its rows padded to 16 columns, its row bounds, its column exponents as
    int64 (k,) or None) and bt."""
    a, bt, sa, _, norm_a, _, usable_a, _ = row_operands(device)
    digits = _ops.crt_magnitude_digits(a, sa[0], norm_a)
    digits = torch.nn.functional.pad(digits, (0, -digits.shape[1] % 16))
    bounds = _ops.crt_row_bounds(sa, norm_a)
    column = torch.arange(a.shape[-1], device=device, dtype=torch.int64) if exponents else None
    return (a, *sa, usable_a, norm_a, digits, bounds, column, bt)


def entry_bound_sum_args(device, dtype=torch.int64):
    exponents = torch.randint(-30, 30, (2, 2, 40), device=device).to(dtype)
    exponents[0, 0, 3] = -10000
    return tuple(exponents)


def crt_args(device, batch=None, count=8):
    a, bt, sa, sb, norm_a, norm_b, *_ = row_operands(device, batch)
    t_a, t_b = crt.scale_bits(count, a.shape[-1])
    return (a, bt, crt.times_power_of_two(norm_a, t_a), crt.times_power_of_two(norm_b, t_b),
            sa[2], sb[2], count, 0)


def crt_exact_args(device, batch=None, count=24):
    a, bt, sa, sb, *_ = row_operands(device, batch)
    return (a, bt, _ops.integer_exponents(sa), _ops.integer_exponents(sb), sa[2], sb[2], count, 0)


def with_residues(args, exact):
    """gemm_crt's or gemm_crt_exact's arguments with a's residues (crt_left_residues) appended."""
    a, _, scale_a, *_, count, _ = args
    return (*args, OPS.crt_left_residues(a, scale_a, count, exact))


def magnitude_args(device, batch=None):
    a, bt, sa, sb, *_ = row_operands(device, batch)
    return (a, bt, sa[0], sb[0])


def crt_magnitude_args(device, batch=None):
    a, bt, sa, sb, norm_a, norm_b, usable_a, usable_b = row_operands(device, batch)
    return (a, bt, sa[0], sb[0], norm_a, norm_b, usable_a, usable_b)


def sampled_args(device, norms=False):
    a, bt, sa, sb, norm_a, norm_b, usable_a, usable_b = row_operands(device, batch=2)
    rows = torch.tensor([4, 0, 0, 7], device=device)
    return (a.reshape(-1, a.shape[-1]), bt.reshape(-1, bt.shape[-1]), sa[0], sb[0], usable_a,
            usable_b, rows, torch.tensor([1, 6], device=device), a.shape[1], bt.shape[1],
            norm_a if norms else None, norm_b if norms else None)


def int8_args(device):
    g = seeded(2)
    return (torch.randint(-128, 128, (5, 40), generator=g, dtype=torch.int8).to(device),
            torch.randint(-128, 128, (3, 40), generator=g, dtype=torch.int8).to(device))


def gemm_args(device, shapes, dtype=f64, alpha=1, beta=0, requires_grad=False, options=None):
    tensors = operands(shapes, 3, device, dtype, requires_grad)
    A, B = tensors[:2]
    C = tensors[2] if len(tensors) > 2 else None
    backend, slices, fast, moduli_, rounding = options or ("auto", None, None, None, None)
    return (A, B, C, alpha, beta, backend, slices, fast, moduli_, rounding)


def slice_levels_args(device, int8=False):
    a, bt, sa, sb, *_ = row_operands(device)
    return (a, bt, sa[0], sb[0], 3, False, int8, 2 * a.shape[1], 0)


def round_levels_args(device, nearest=False, dtype=f64):
    a, bt, sa, sb, *_ = row_operands(device)
    levels = OPS.slice_levels(a, bt, sa[0], sb[0], 3, True, False, a.shape[1], 0)
    return (levels, sa[0], sb[0], sa[1], sb[1], 3, True, False, a.shape[1], nearest, dtype)


def crt_shard_args(device):
    a, bt, scale_a, scale_b, _, _, count, workspace = crt_args(device)
    return (a, bt, scale_a, scale_b, count, workspace)


def crt_round_args(device, dtype=f64):
    a, bt, scale_a, scale_b, _, _, count, workspace = crt_args(device)
    products = OPS.crt_residue_products(a, bt, scale_a, scale_b, count, workspace)
    return (products, scale_a, scale_b, dtype)


OPCHECK_CASES = {
    "row_stats": (OPS.row_stats, lambda d: (row_operands(d)[0],)),
    "split_rows": (OPS.split_rows, lambda d: (row_operands(d)[0], row_operands(d)[2][0], 3)),
    "magnitude_product": (OPS.magnitude_product, magnitude_args),
    "magnitude_product-batched": (OPS.magnitude_product, lambda d: magnitude_args(d, 2)),
    "sampled_magnitudes": (OPS.sampled_magnitudes, sampled_args),
    "sampled_magnitudes-norms": (OPS.sampled_magnitudes, lambda d: sampled_args(d, norms=True)),
    "gemm_slices-fp16": (OPS.gemm_slices, slices_args),
    "gemm_slices-fp16-nearest": (OPS.gemm_slices, lambda d: slices_args(d, nearest=True)),
    "gemm_slices-int8": (OPS.gemm_slices, lambda d: slices_args(d, int8=True)),
    "gemm_slices-int8-nearest": (OPS.gemm_slices,
                                 lambda d: slices_args(d, int8=True, nearest=True)),
    "gemm_slices-batched-fp16": (OPS.gemm_slices, lambda d: slices_args(d, 3)),
    "gemm_slices-batched-int8-nearest": (OPS.gemm_slices,
                                         lambda d: slices_args(d, 3, int8=True, nearest=True)),
    "row_norm_scales": (OPS.row_norm_scales,
                        lambda d: (row_operands(d)[0], row_operands(d)[2][0])),
    "row_stats_with_norm_scales": (OPS.row_stats_with_norm_scales, lambda d: (row_operands(d)[0],)),
    "crt_row_scales": (OPS.crt_row_scales,
                       lambda d: (row_operands(d)[4], *row_operands(d)[2][:2], 30)),
    "crt_wide_exponents": (OPS.crt_wide_exponents,
                           lambda d: (row_operands(d)[4], *row_operands(d)[2][:2],
                                      row_operands(d)[6], 40)),
    "crt_row_bounds": (OPS.crt_row_bounds, lambda d: (*row_operands(d)[2], row_operands(d)[4])),
    "crt_plan_reads": (OPS.crt_plan_reads, lambda d: row_operands(d)[:2]),
    "crt_plan_reads-batched": (OPS.crt_plan_reads, lambda d: row_operands(d, 2)[:2]),
    "crt_kept_plan_reads": (OPS.crt_kept_plan_reads, kept_plan_reads_args),
    "crt_kept_plan_reads-exponents": (OPS.crt_kept_plan_reads,
                                      lambda d: kept_plan_reads_args(d, True)),
    "crt_entry_bound_sum": (OPS.crt_entry_bound_sum, entry_bound_sum_args),
    "crt_entry_bound_sum-float64": (OPS.crt_entry_bound_sum,
                                    lambda d: entry_bound_sum_args(d, torch.float64)),
    "crt_magnitude": (OPS.crt_magnitude, crt_magnitude_args),
    "crt_magnitude-batched": (OPS.crt_magnitude, lambda d: crt_magnitude_args(d, 2)),
    "gemm_crt": (OPS.gemm_crt, crt_args),
    "gemm_crt-batched": (OPS.gemm_crt, lambda d: crt_args(d, 3)),
    "gemm_crt_exact": (OPS.gemm_crt_exact, crt_exact_args),
    "gemm_crt_exact-batched": (OPS.gemm_crt_exact, lambda d: crt_exact_args(d, 3)),
    "gemm_crt-residues": (OPS.gemm_crt, lambda d: with_residues(crt_args(d), False)),
    "gemm_crt_exact-residues-batched": (OPS.gemm_crt_exact,
                                        lambda d: with_residues(crt_exact_args(d, 3), True)),
    "crt_left_residues": (OPS.crt_left_residues, lambda d: crt_args(d)[::2][:2] + (8, False)),
    "crt_left_residues-exact-batched": (OPS.crt_left_residues,
                                        lambda d: crt_exact_args(d, 3)[::2][:2] + (24, True)),
    "int8_matmul": (OPS.int8_matmul, int8_args),
    "magnitude_product-total_k": (OPS.magnitude_product,
                                  lambda d: (*magnitude_args(d), 2 * magnitude_args(d)[0].shape[1])),
    "slice_levels-fp16": (OPS.slice_levels, slice_levels_args),
    "slice_levels-int8": (OPS.slice_levels, lambda d: slice_levels_args(d, int8=True)),
    "round_levels": (OPS.round_levels, round_levels_args),
    "round_levels-nearest-float32": (OPS.round_levels,
                                     lambda d: round_levels_args(d, True, torch.float32)),
    "row_norm_square_sums": (OPS.row_norm_square_sums,
                             lambda d: (row_operands(d)[0], row_operands(d)[2][0])),
    "crt_magnitude_digits": (OPS.crt_magnitude_digits,
                             lambda d: (row_operands(d)[0], row_operands(d)[2][0],
                                        row_operands(d)[4], 20)),
    "crt_residue_products": (OPS.crt_residue_products, crt_shard_args),
    "crt_round": (OPS.crt_round, crt_round_args),
    "crt_round-float32": (OPS.crt_round, lambda d: crt_round_args(d, torch.float32)),
    "transposed": (OPS.transposed, lambda d: tuple(operands([(9, 5)], 5, d))),
    "transposed-batched-float32": (OPS.transposed,
                                   lambda d: tuple(operands([(2, 9, 5)], 5, d, torch.float32))),
    "transposed-strided": (OPS.transposed, lambda d: (operands([(12, 5)], 5, d)[0][::2, 1:],)),
    "transposed-of-transposed": (OPS.transposed, lambda d: (operands([(5, 9)], 5, d)[0].mT,)),
    "fingerprint": (OPS.fingerprint, lambda d: tuple(operands([(7, 5)], 5, d))),
    "fingerprint-strided-float32": (
        OPS.fingerprint, lambda d: (operands([(12, 6)], 5, d, torch.float32)[0][::2, 1:],)),
    "gemm-2d": (OPS.gemm, lambda d: gemm_args(d, [(5, 9), (9, 4)])),
    "gemm-batched": (OPS.gemm, lambda d: gemm_args(d, [(2, 5, 9), (2, 9, 4)],
                                                   options=("int8", 3, False, None, None))),
    "gemm-complex": (OPS.gemm, lambda d: gemm_args(d, [(5, 9), (9, 4), (4,)], torch.complex128,
                                                   alpha=0.5 - 1j, beta=2.0)),
    "gemm-C-alpha-beta": (OPS.gemm, lambda d: gemm_args(d, [(5, 9), (9, 4), (5, 1)], alpha=-1.5,
                                                        beta=0.25,
                                                        options=("crt", None, None, 6, None))),
    "gemm-requires-grad": (OPS.gemm, lambda d: gemm_args(d, [(5, 9), (9, 4), (5, 4)], alpha=2.0,
                                                         beta=1.0, requires_grad=True)),
    "gemm-batched-requires-grad": (OPS.gemm, lambda d: gemm_args(
        d, [(2, 5, 9), (2, 9, 4), (4,)], beta=1.5, requires_grad=True,
        options=("auto", None, None, None, "nearest"))),
    "gemm-complex-requires-grad": (OPS.gemm, lambda d: gemm_args(
        d, [(5, 9), (9, 4)], torch.complex128, alpha=1j, requires_grad=True)),
}


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("case", list(OPCHECK_CASES))
def test_opcheck_passes_for_every_operator(device, case):
    """torch.library.opcheck (schema, autograd registration, fake tensor, AOT dispatch) passes for
    every ozaki operator, 2-D and batched, real and complex, with and without requires_grad."""
    op, make_args = OPCHECK_CASES[case]
    torch.library.opcheck(op, make_args(device))


def test_every_operator_has_an_opcheck_case():
    """No operator of the ozaki namespace is left out of the opcheck cases above."""
    checked = {case.split("-")[0] for case in OPCHECK_CASES}
    registered = {name.split("::")[1] for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("ozaki::")}
    assert registered <= checked, registered - checked


# ---- torch.compile ------------------------------------------------------------------------------


@pytest.fixture
def fresh_dynamo():
    """Compile tests start and end with a clean Dynamo cache."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_compiled_matmul_gives_eager_bits(device, fresh_dynamo, monkeypatch):
    """torch.compile(fullgraph=True) of a function calling ozaki.matmul and elementwise ops gives
    eager's bits, for matrices and for a batch. (The elementwise ops are ones whose bits Inductor
    cannot change, fused or not: a power-of-two scaling, an addition, abs.) Replayed calls' quick
    index is not empty, as after earlier CUDA products: compiled code never looks into it."""
    monkeypatch.setitem(replay._quick, ("an entry of earlier calls",), None)

    def f(x, y):
        return (ozaki.matmul(x, y) * 2.0 + 1.0).abs()

    compiled = torch.compile(f, fullgraph=True, dynamic=False)
    for shapes in ([(6, 9), (9, 5)], [(2, 6, 9), (2, 9, 5)]):
        x, y = operands(shapes, 4, device)
        assert_bitwise_equal(compiled(x, y), f(x, y))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.complex128, torch.complex64],
                         ids=["float64", "float32", "complex128", "complex64"])
def test_compiled_scalars_that_torch_makes_symbolic(device, dtype, fresh_dynamo):
    """alpha and beta that torch.compile traces as symbolic floats (dynamic=True, or a value that
    changes between calls, a 0-d tensor's too) give eager's bits: ozaki.gemm, nn.Linear and
    torch.addmm under ozaki.enable, in one graph each (fullgraph)."""
    A, B, C, x = (t.to(dtype) for t in operands([(4, 9), (9, 5), (4, 5), (3, 9)], 16, device))
    layer = torch.nn.Linear(9, 5, dtype=dtype).to(device)
    dynamic = torch.compile(lambda A, B: ozaki.gemm(A, B), dynamic=True, fullgraph=True)
    assert_bitwise_equal(dynamic(A, B), ozaki.gemm(A, B))

    def linear(x):
        with ozaki.enable(dtypes=(dtype,)):
            return layer(x)

    with torch.no_grad():
        assert_bitwise_equal(torch.compile(linear, dynamic=True, fullgraph=True)(x), linear(x))
    scaled = torch.compile(lambda A, B, C, alpha: ozaki.gemm(A, B, C, alpha=alpha, beta=1.0),
                           fullgraph=True)

    def addmm(A, B, C, alpha):
        with ozaki.enable(dtypes=(dtype,)):
            return torch.addmm(C, A, B, alpha=alpha)

    added = torch.compile(addmm, fullgraph=True)
    for alpha in (0.5, 0.25, 0.3, torch.tensor(0.7, dtype=torch.float64)):
        value = alpha.item() if isinstance(alpha, torch.Tensor) else alpha
        assert_bitwise_equal(scaled(A, B, C, value), ozaki.gemm(A, B, C, alpha=value, beta=1.0))
        assert_bitwise_equal(added(A, B, C, alpha), addmm(A, B, C, alpha))


@pytest.mark.parametrize("alpha", [2 ** 128 - 2 ** 103 - 1, 2 ** 63 + 2 ** 39 + 1, -2 ** 64 - 1],
                         ids=["below-float32-overflow", "past-int64", "negative-past-int64"])
def test_compiled_integers_past_int64_round_once_to_float32(alpha, fresh_dynamo):
    """An integer alpha past what the operator's Scalar holds, with float32 operands, is rounded
    to float32 once while torch.compile traces, as eagerly (through float64 it was refused just
    below float32's overflow, or rounded twice)."""
    A, B = (t.float() for t in operands([(3, 4), (4, 2)], 19, "cpu"))
    compiled = torch.compile(lambda a, b: ozaki.gemm(a, b, alpha=alpha), fullgraph=True)
    assert_bitwise_equal(compiled(A, B), ozaki.gemm(A, B, alpha=alpha))


def test_compiled_scalars_act_as_in_eager(fresh_dynamo):
    """Values eager takes, compiled calls take alike: a float32 beta that rounds to 0 reads no C
    (None, or one that would not fit), and integers past int64 (which the operator's Scalar cannot
    hold) scale as their float64 values."""
    A, B, C = operands([(3, 4), (4, 2), (3, 2)], 21, "cpu")
    a, b = A.float(), B.float()
    compiled = torch.compile(lambda a, b, c, alpha, beta: ozaki.gemm(a, b, c, alpha=alpha,
                                                                     beta=beta),
                             backend="eager", fullgraph=True)
    for c in (None, torch.ones(5)):
        assert_bitwise_equal(compiled(a, b, c, 1.0, 1e-50), ozaki.sgemm(a, b))
    for alpha in (2 ** 64, 2 ** 70, -2 ** 63 - 1):
        assert_bitwise_equal(compiled(A, B, C, alpha, 1.0),
                             ozaki.gemm(A, B, C, alpha=alpha, beta=1.0))
    past = torch.compile(lambda a, b: ozaki.gemm(a, b, alpha=2 ** 2000), backend="eager",
                         fullgraph=True)
    with pytest.raises(Exception, match=r"ozaki.gemm: alpha = \d+ is past the float64 range"):
        past(A, B)


def test_compiled_shape_errors_carry_ozakis_message(fresh_dynamo):
    """A C that does not broadcast to the result, and batches that do not broadcast together, are
    named in the error torch.compile raises, as eager names them."""
    A, B = operands([(3, 4), (4, 2)], 22, "cpu")
    compiled = torch.compile(lambda a, b, c: ozaki.gemm(a, b, c, beta=1.0), backend="eager",
                             fullgraph=True)
    with pytest.raises(Exception, match=r"ozaki.gemm: C of shape \(5,\) does not broadcast to "
                                        r"the result.{0,2}s shape \(3, 2\)"):
        compiled(A, B, torch.ones(5, dtype=f64))
    x, y = operands([(2, 4, 5), (3, 5, 2)], 23, "cpu")
    with pytest.raises(Exception, match=r"ozaki.matmul: the batch dimensions of a \(2,\) and b "
                                        r"\(3,\) do not broadcast"):
        torch.compile(ozaki.matmul, backend="eager", fullgraph=True)(x, y)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_enable_around_a_compiled_call(device, fresh_dynamo):
    """A `with ozaki.enable(...)` entered outside a compiled function is traced: `a @ b` inside
    becomes the ozaki product (eager's bits); outside the block the same function is native."""
    def f(x, y):
        return (x @ y) * 3.0

    compiled = torch.compile(f, fullgraph=True, dynamic=False)
    x, y = operands([(6, 9), (9, 5)], 5, device)
    with ozaki.enable(slices=3):
        inside = compiled(x, y)
    assert_bitwise_equal(inside, ozaki.matmul(x, y, slices=3) * 3.0)
    assert_bitwise_equal(compiled(x, y), (x @ y) * 3.0)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_enable_inside_a_compiled_function(device, fresh_dynamo):
    """A `with ozaki.enable(...)` block inside a function compiled with fullgraph=True is traced
    too: its products are ozaki's (eager's bits), the one after the block is native."""
    def f(x, y):
        with ozaki.enable(slices=3):
            inside = x @ y
        return inside, x @ y

    x, y = operands([(6, 9), (9, 5)], 6, device)
    inside, after = torch.compile(f, fullgraph=True, dynamic=False)(x, y)
    assert_bitwise_equal(inside, ozaki.matmul(x, y, slices=3))
    torch.testing.assert_close(after, x @ y, rtol=0, atol=0)


def test_compiled_chain_matmul_under_enable_gives_eager_bits(fresh_dynamo, monkeypatch):
    """torch.chain_matmul under ozaki.enable compiles with fullgraph=True (the mode reads its out=
    from the caller's frame and gives torch's deprecation warning only in eager code) to eager's
    bits; the eager call after it still warns."""
    from ozaki import dropin
    monkeypatch.setattr(dropin, "_chain_matmul_warned", False)
    a, b, c = operands([(4, 6), (6, 5), (5, 3)], 34, "cpu")
    compiled = torch.compile(lambda x, y, z: torch.chain_matmul(x, y, z), fullgraph=True)
    with ozaki.enable():
        result = compiled(a, b, c)
        with pytest.warns(UserWarning, match="torch.chain_matmul is deprecated"):
            eager = torch.chain_matmul(a, b, c)
        assert_bitwise_equal(result, eager)
        assert_bitwise_equal(eager, torch.linalg.multi_dot([a, b, c]))  # ozaki's, in the mode


def test_warnings_of_compiled_products_point_at_the_callers_file(fresh_dynamo):
    """A product's warning (here BackendWarning: backend="crt" on rows of 1000-bit span) is
    attributed to the caller's file under torch.compile too, not to the generated code."""
    from ozaki.product import BackendWarning
    A = torch.tensor([[1.0, 2.0 ** -1000], [0.5, 3.0]], dtype=f64)
    B = torch.tensor([[2.0 ** -1000, 1.0], [1.0, 1.0]], dtype=f64)
    compiled = torch.compile(lambda a, b: ozaki.matmul(a, b, backend="crt"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(A, B)
    files = [w.filename for w in caught if issubclass(w.category, BackendWarning)]
    assert files and set(files) == {__file__}


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_compiled_backward_gives_eager_gradient_bits(device, fresh_dynamo):
    """The gradients of A and B through a compiled function holding ozaki.gemm are eager's bits
    (the upstream gradient of each product entry is a fixed weight w, exactly). C's gradient, a
    torch reduction over its broadcast dimension that Inductor compiles, is only close."""
    def f(x, y, c, w):
        return (ozaki.gemm(x, y, c, alpha=1.5, beta=0.5, transb=True) * w).sum()

    compiled = torch.compile(f, fullgraph=True, dynamic=False)
    w, = operands([(6, 5)], 18, device)
    grads = []
    for function in (compiled, f):
        x, y, c = operands([(6, 9), (5, 9), (5,)], 6, device, requires_grad=True)
        function(x, y, c, w).backward()
        grads.append((x.grad, y.grad, c.grad))
    (compiled_a, compiled_b, compiled_c), (eager_a, eager_b, eager_c) = grads
    assert_bitwise_equal(compiled_a, eager_a)
    assert_bitwise_equal(compiled_b, eager_b)
    torch.testing.assert_close(compiled_c, eager_c, rtol=1e-15, atol=1e-15)


def test_compiled_backward_names_a_gradients_inner_dimension(fresh_dynamo):
    """Compiled, the backward graph calls ozaki::gemm itself, not the eager backward that names
    the gradient (test_a_count_too_few_for_a_gradient_names_the_gradient): a count that the
    forward's k allows but the gradient's inner dimension n does not is refused there with the
    backward pass named and the gradients' inner dimensions told."""
    k = 1
    n = next(n for n in range(2, crt.MAX_INNER) if crt.smallest_moduli(n) > crt.smallest_moduli(k))
    count = crt.smallest_moduli(k)
    compiled = torch.compile(lambda x, y: ozaki.dgemm(x, y, backend="crt", moduli=count),
                             fullgraph=True, dynamic=False)
    A = torch.rand(3, k, dtype=torch.float64, requires_grad=True)
    B = torch.rand(k, n, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fixed count's check finds one modulus coarse
        C = compiled(A, B)
    with pytest.raises(ValueError, match=(
            rf"moduli = {count} is too few for inner dimension k = {n}: .* \(raised in the "
            r"backward pass CompiledFunctionBackward, where the gradient of A in A @ B is a "
            r"product of inner dimension n and that of B one of inner dimension m\)$")):
        C.sum().backward()
    assert A.grad is None


# ---- autograd -----------------------------------------------------------------------------------

GRADCHECK_CASES = {
    "dgemm": (ozaki.dgemm, [(3, 4), (4, 2)], {}),
    "dgemm-fp16-s4": (ozaki.dgemm, [(3, 4), (4, 2)], {"backend": "fp16", "slices": 4}),
    "matmul-2d": (ozaki.matmul, [(3, 4), (4, 2)], {}),
    "matmul-batched": (ozaki.matmul, [(2, 3, 4), (2, 4, 2)], {}),
    "matmul-shared-right": (ozaki.matmul, [(2, 3, 4), (4, 2)], {}),
    "matmul-shared-left": (ozaki.matmul, [(3, 4), (2, 4, 2)], {}),
    "matmul-broadcast": (ozaki.matmul, [(2, 1, 3, 4), (2, 4, 2)], {}),
    "matmul-vector-matrix": (ozaki.matmul, [(4,), (4, 2)], {}),
    "matmul-matrix-vector": (ozaki.matmul, [(3, 4), (4,)], {}),
    "matmul-dot": (ozaki.matmul, [(4,), (4,)], {}),
    "gemm-alpha-beta-C": (ozaki.gemm, [(3, 4), (4, 2), (3, 2)], {"alpha": -1.5, "beta": 0.75}),
    "gemm-broadcast-C": (ozaki.gemm, [(3, 4), (4, 2), (2,)], {"alpha": 2.0, "beta": 1.25}),
    "gemm-column-C": (ozaki.gemm, [(3, 4), (4, 2), (3, 1)], {"beta": 1.0}),
    "gemm-trans": (ozaki.gemm, [(4, 3), (2, 4), (3, 2)],
                   {"transa": True, "transb": "T", "alpha": 0.5, "beta": 2.0}),
    "gemm-batched": (ozaki.gemm, [(2, 3, 4), (2, 2, 4), (2,)],
                     {"transb": "C", "beta": 1.0, "rounding": "nearest"}),
}


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_gradcheck_float64(device, case):
    """torch.autograd.gradcheck passes in float64 for dgemm, matmul (2-D, batched, folded,
    broadcast, 1-D) and gemm (alpha, beta, full and broadcast C, transa/transb)."""
    function, shapes, options = GRADCHECK_CASES[case]
    inputs = operands(shapes, 7, device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *t: function(*t, **options), inputs)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("case", ["matmul", "matmul-batched", "gemm"])
def test_gradcheck_complex128(device, case):
    """gradcheck passes for complex128 products (conjugate Wirtinger gradients), with complex
    alpha and beta and conjugate transposes."""
    if case == "gemm":
        inputs = operands([(4, 3), (4, 2), (2,)], 8, device, torch.complex128, True)
        function = lambda a, b, c: ozaki.gemm(a, b, c, alpha=0.5 - 1.5j, beta=2 + 1j,  # noqa
                                              transa="C")
    else:
        shapes = [(3, 4), (4, 2)] if case == "matmul" else [(2, 3, 4), (4, 2)]
        inputs = operands(shapes, 8, device, torch.complex128, True)
        function = ozaki.matmul
    assert torch.autograd.gradcheck(function, inputs)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("options", [{}, {"backend": "crt"}, {"rounding": "nearest"}],
                         ids=["auto", "crt", "nearest"])
def test_gradgradcheck_dgemm(device, options):
    """Double backward works: the backward products are ozaki::gemm calls themselves (plans at
    float64 accuracy: a truncating slices=3 plan is too coarse for finite differences)."""
    inputs = operands([(3, 4), (4, 2)], 9, device, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda a, b: ozaki.dgemm(a, b, **options), inputs)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("options", [{"slices": 4, "backend": "fp16"}, {"backend": "crt"},
                                     {"rounding": "nearest"}], ids=["fp16-s4", "crt", "nearest"])
def test_gradients_are_ozaki_products_with_the_forward_options(device, options):
    """A.grad is bitwise dgemm(G, B.T) and B.grad dgemm(A.T, G) with the forward's options, scaled
    by alpha in one rounding; C.grad is beta G summed over C's broadcast dimension."""
    A, B, C = operands([(6, 13), (13, 5), (5,)], 10, device, requires_grad=True)
    G, = operands([(6, 5)], 11, device)
    ozaki.dgemm(A, B, **options).backward(G)
    assert_bitwise_equal(A.grad, ozaki.dgemm(G, B.detach().T, **options))
    assert_bitwise_equal(B.grad, ozaki.dgemm(A.detach().T, G, **options))
    for t in (A, B):
        t.grad = None
    ozaki.gemm(A, B, C, alpha=-1.5, beta=0.5, **options).backward(G)
    assert_bitwise_equal(A.grad, torch.mul(ozaki.dgemm(G, B.detach().T, **options), -1.5))
    assert_bitwise_equal(B.grad, torch.mul(ozaki.dgemm(A.detach().T, G, **options), -1.5))
    torch.testing.assert_close(C.grad, (0.5 * G).sum(0), rtol=0, atol=1e-15)


def test_a_count_too_few_for_a_gradient_names_the_gradient():
    """The gradients' products have inner dimensions n (A's) and m (B's), not the forward's k: a
    moduli count that k allows but n does not is refused in backward with the gradient and its
    inner dimension named (the forward ran; nothing is computed with another count)."""
    k = 1
    n = next(n for n in range(2, crt.MAX_INNER) if crt.smallest_moduli(n) > crt.smallest_moduli(k))
    A = torch.rand(3, k, dtype=torch.float64, requires_grad=True)
    B = torch.rand(k, n, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fixed count's check finds one modulus coarse
        C = ozaki.dgemm(A, B, backend="crt", moduli=crt.smallest_moduli(k))
    with pytest.raises(ValueError, match=(
            rf"moduli = {crt.smallest_moduli(k)} is too few for inner dimension k = {n}: .* "
            rf"\(in the gradient of A, G op\(B\)\^H, whose inner dimension is {n}\)$")):
        C.sum().backward()
    assert A.grad is None


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_nearest_reaches_the_backward_of_a_folded_batch(device):
    """Under rounding="nearest" the gradients of a batch folded into rows are correctly rounded
    too: a.grad[e] = dgemm(G[e], b^T) and b.grad = the one length-(batch m) product a^T G."""
    a, b = operands([(3, 4, 10), (10, 5)], 12, device, requires_grad=True)
    G, = operands([(3, 4, 5)], 13, device)
    ozaki.matmul(a, b, rounding="nearest").backward(G)
    for e in range(3):
        assert_bitwise_equal(a.grad[e], ozaki.dgemm(G[e], b.detach().T, rounding="nearest"))
    assert_bitwise_equal(b.grad, ozaki.dgemm(a.detach().reshape(12, 10).T, G.reshape(12, 5),
                                  rounding="nearest"))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_complex_gradients_use_the_conjugate_alpha(device):
    """dA = conj(alpha) G B^H and dB = conj(alpha) A^H G, as ozaki products (bitwise gemm with
    transb/transa = "C")."""
    A, B = operands([(4, 6), (6, 3)], 14, device, torch.complex128, True)
    G, = operands([(4, 3)], 15, device, torch.complex128)
    alpha = 0.75 - 2j
    ozaki.gemm(A, B, alpha=alpha).backward(G)
    assert_bitwise_equal(A.grad, ozaki.gemm(G, B.detach(), alpha=alpha.conjugate(), transb="C"))
    assert_bitwise_equal(B.grad, ozaki.gemm(A.detach(), G, alpha=alpha.conjugate(), transa="C"))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_alpha_zero_sends_no_gradient_to_a_and_b(device):
    """alpha = 0: A and B get zero gradients (as torch's addmm gives, never NaN) even when A holds
    NaN; C gets beta G."""
    A, B, C = operands([(4, 6), (6, 3), (4, 3)], 16, device)
    A[1, 2] = nan
    for t in (A, B, C):
        t.requires_grad_()
    G, = operands([(4, 3)], 17, device)
    ozaki.gemm(A, B, C, alpha=0, beta=2.0).backward(G)
    for grad, t in ((A.grad, A), (B.grad, B)):
        assert_bitwise_equal(grad, torch.zeros_like(t))
    assert_bitwise_equal(C.grad, G * 2.0)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_second_backward_through_alpha_zero_gives_zeros_as_torch_does(device):
    """The zero gradients of A and B with alpha = 0 are functions of the other operand, as
    torch.addmm's are: a second backward through them gives zeros, as torch's does (it raised:
    they had no graph), and zeros still where A holds NaN (torch's first gradients are NaN
    there)."""
    A, B, C = operands([(3, 4), (4, 5), (3, 5)], 21, device)
    for t in (A, B, C):
        t.requires_grad_()

    def second_order(product):
        ga, gb = torch.autograd.grad(product().sum(), (A, B), create_graph=True)
        assert ga.requires_grad and gb.requires_grad
        return torch.autograd.grad((ga * ga).sum() + (gb * gb).sum(), (A, B))

    products = (lambda: ozaki.gemm(A, B, C, alpha=0, beta=1), lambda: ozaki.gemm(A, B, alpha=0))
    native = second_order(lambda: torch.addmm(C, A, B, alpha=0))
    for product in products:
        for got, expected in zip(second_order(product), native):
            assert_bitwise_equal(got, expected)
    with torch.no_grad():
        A[0, 1] = nan
    for product in products:
        for got, t in zip(second_order(product), (A, B)):
            assert_bitwise_equal(got, torch.zeros_like(t))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [f64, torch.complex128])
def test_zero_coefficients_give_zero_gradients_as_torch_does(device, dtype):
    """torch.autograd.grad of a product with alpha = 0 or beta = 0 gives the unused operands zero
    gradients, as it does for torch.addmm (it would raise if they had none), and the used ones
    ozaki's gradients; batched C broadcast from one row."""
    A, B, C = (t.to(dtype).requires_grad_() for t in operands([(2, 4, 6), (2, 6, 3), (3,)], 18,
                                                             device))
    G = operands([(2, 4, 3)], 19, device)[0].to(dtype)
    ga, gb, gc = torch.autograd.grad(ozaki.gemm(A, B, C, alpha=0, beta=0.5), (A, B, C), G)
    assert_bitwise_equal(ga, torch.zeros_like(A))
    assert_bitwise_equal(gb, torch.zeros_like(B))
    assert_bitwise_equal(gc, (G * 0.5).sum_to_size(C.shape))
    ga, gb, gc = torch.autograd.grad(ozaki.gemm(A, B, C, alpha=2.0, beta=0), (A, B, C), G)
    assert_bitwise_equal(gc, torch.zeros_like(C))
    assert_bitwise_equal(ga, ozaki.gemm(G, B.detach(), alpha=2.0, transb="C"))
    native = torch.autograd.grad(torch.baddbmm(C, A, B, beta=0), (A, B, C), G)
    assert_bitwise_equal(native[2], gc)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_a_c_that_cannot_take_its_gradient_is_refused_with_beta_zero(device):
    """beta = 0 with a C that requires grad but does not fit the result (another dtype, device or
    a shape that does not broadcast) is an error naming C, as torch.addmm raises on the CPU, not
    a C left without its gradient or a zero gradient for a C that never fitted."""
    A, B = operands([(4, 6), (6, 3)], 20, device)
    wrong = {"dtype": (torch.zeros(4, 3, dtype=torch.float32, device=device), TypeError,
                       r"ozaki.gemm: C must be torch.float64 like A and B, got torch.float32 \(C "
                       r"requires grad, so with beta = 0 it still gets its zero gradient\)"),
             "shape": (torch.zeros(2, 2, dtype=f64, device=device), ValueError,
                       r"ozaki.gemm: C of shape \(2, 2\) does not broadcast to the result's shape "
                       r"\(4, 3\) \(C requires grad"),
             "device": (torch.zeros(4, 3, dtype=f64, device="meta"), ValueError,
                        r"ozaki.gemm: C must be on .* like A and B, got meta \(C requires grad")}
    for what, (C, error, message) in wrong.items():
        C.requires_grad_()
        with pytest.raises(error, match=message):
            ozaki.gemm(A, B, C, beta=0)
        if what != "device" and device == "cpu":  # (a meta C is torch's to take; CUDA's addmm
            with pytest.raises(RuntimeError):        # skips some checks with beta = 0)
                torch.addmm(C, A, B, beta=0)
        with torch.no_grad():
            assert_bitwise_equal(ozaki.gemm(A, B, C, beta=0), ozaki.gemm(A, B))


# ---- forward-mode AD and torch.func --------------------------------------------------------------

def _expected_tangent(A, B, C, tA, tB, tC, alpha, beta, options):
    """d(alpha A B + beta C) = alpha tA B + alpha A tB + beta tC, the products by ozaki with the
    forward's options, added as the operator's epilogue adds them."""
    t = ozaki.gemm(tA, B, alpha=alpha, **options)
    t = ozaki.gemm(A, tB, t, alpha=alpha, beta=1, **options)
    return t if tC is None else torch.add(t, torch.mul(tC, beta))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [f64, torch.complex128])
@pytest.mark.parametrize("options", [{}, {"rounding": "nearest"}], ids=["auto", "nearest"])
def test_forward_mode_tangents_are_ozaki_products(device, dtype, options):
    """Dual tensors (torch.autograd.forward_ad) carry their tangents through dgemm, matmul and
    gemm: the tangent of alpha A B + beta C is alpha tA B + alpha A tB + beta tC, each product by
    ozaki with the forward's options (never a zero or missing tangent)."""
    A, B, C, tA, tB, tC = (t.to(dtype) for t in operands(
        [(5, 7), (7, 3), (5, 3), (5, 7), (7, 3), (5, 3)], 30, device))
    alpha, beta = (0.75 - 0.5j, 2.0 + 1j) if dtype.is_complex else (-1.5, 0.25)
    with fwAD.dual_level():
        dA, dB, dC = fwAD.make_dual(A, tA), fwAD.make_dual(B, tB), fwAD.make_dual(C, tC)
        primal, tangent = fwAD.unpack_dual(ozaki.gemm(dA, dB, dC, alpha=alpha, beta=beta,
                                                      **options))
        assert_bitwise_equal(primal, ozaki.gemm(A, B, C, alpha=alpha, beta=beta, **options))
        assert_bitwise_equal(tangent, _expected_tangent(A, B, C, tA, tB, tC, alpha, beta,
                                                        options))
        _, tangent = fwAD.unpack_dual(ozaki.matmul(dA, B, **options))
        assert_bitwise_equal(tangent, ozaki.matmul(tA, B, **options))
        with ozaki.enable(dtypes=(dtype,), **options):
            _, tangent = fwAD.unpack_dual(A @ dB)
        assert_bitwise_equal(tangent, ozaki.matmul(A, tB, **options))
    native = torch.func.jvp(lambda a, b: a @ b, (A, B), (tA, B.new_zeros(B.shape)))[1]
    torch.testing.assert_close(ozaki.matmul(tA, B), native, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_torch_func_jvp_and_grad_run_through_ozaki(device):
    """torch.func.jvp gives the forward-mode tangent and torch.func.grad the gradients that
    backward gives, as ozaki products, directly and under ozaki.enable."""
    A, B, tA = operands([(4, 6), (6, 3), (4, 6)], 31, device)
    _, tangent = torch.func.jvp(lambda a: ozaki.matmul(a, B), (A,), (tA,))
    assert_bitwise_equal(tangent, ozaki.matmul(tA, B))
    with ozaki.enable():
        _, tangent = torch.func.jvp(lambda a: a @ B, (A,), (tA,))
    assert_bitwise_equal(tangent, ozaki.matmul(tA, B))
    grad = torch.func.grad(lambda a: ozaki.matmul(a, B).sum())(A)
    assert_bitwise_equal(grad, ozaki.dgemm(torch.ones(4, 3, dtype=f64, device=device), B.T))
    with ozaki.enable():
        grad = torch.func.grad(lambda a: (a @ B).sum())(A)
    assert_bitwise_equal(grad, ozaki.dgemm(torch.ones(4, 3, dtype=f64, device=device), B.T))


def test_compiled_forward_mode_ad_never_drops_tangents(fresh_dynamo):
    """Forward-mode AD through an ozaki product under torch.compile: the graph would hold the
    operator (backward formula only) and drop the tangent, so tracing raises. With
    fullgraph=True the compile fails naming it; without, the graph breaks and the product runs
    eagerly with its tangent: torch.func.jvp compiled, dual tensors made inside the compiled
    function, and dual tensors passed into it."""
    A, B, tA = operands([(4, 5), (5, 2), (4, 5)], 34, "cpu")
    expected = ozaki.matmul(tA, B)

    def jvp(a, b, t):
        return torch.func.jvp(lambda x: ozaki.matmul(x, b), (a,), (t,))[1]

    with pytest.raises(Exception, match="ozaki: forward-mode AD .* cannot be compiled"):
        torch.compile(jvp, fullgraph=True)(A, B, tA)
    torch._dynamo.reset()
    assert_bitwise_equal(torch.compile(jvp)(A, B, tA), expected)

    def dual_inside(a, b, t):
        with fwAD.dual_level():
            return fwAD.unpack_dual(ozaki.matmul(fwAD.make_dual(a, t), b)).tangent

    torch._dynamo.reset()
    assert_bitwise_equal(torch.compile(dual_inside)(A, B, tA), expected)
    torch._dynamo.reset()
    product = torch.compile(lambda a, b: ozaki.matmul(a, b))
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(product(fwAD.make_dual(A, tA), B)).tangent
    assert tangent is not None
    assert_bitwise_equal(tangent, expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_torch_func_jacfwd_and_hessian(device):
    """torch.func.jacfwd (vmap over jvp) and hessian run through ozaki, 2-D and batched, with C:
    the Jacobian of A @ B in A holds B's entries exactly (each is one product by 1), and the
    Hessian of |A B|^2 matches native's within float64 rounding."""
    A, B, C = operands([(3, 4), (4, 2), (2,)], 32, device)
    jacobian = torch.func.jacfwd(lambda a: ozaki.matmul(a, B))(A)
    assert_bitwise_equal(jacobian, torch.func.jacfwd(lambda a: a @ B)(A))
    jacobian = torch.func.jacfwd(lambda c: ozaki.gemm(A, B, c, alpha=2.0, beta=3.0))(C)
    assert_bitwise_equal(jacobian, torch.func.jacfwd(
        lambda c: torch.addmm(c, A, B, alpha=2.0, beta=3.0))(C))
    A3, B3 = operands([(2, 3, 4), (2, 4, 5)], 33, device)
    assert_bitwise_equal(torch.func.jacfwd(lambda a: ozaki.matmul(a, B3))(A3),
                         torch.func.jacfwd(lambda a: a @ B3)(A3))
    rows = operands([(2, 5)], 35, device)[0]  # five C's of shape (2,), mapped along dim 1
    values, tangents = torch.func.vmap(lambda c: torch.func.jvp(
        lambda a: ozaki.gemm(a, B, c, beta=1.5), (A,), (A,)), in_dims=1)(rows)
    for e in range(5):
        assert_bitwise_equal(values[e], ozaki.gemm(A, B, rows[:, e], beta=1.5))
        assert_bitwise_equal(tangents[e], ozaki.matmul(A, B))
    native = torch.func.hessian(lambda a: ((a @ B) ** 2).sum())(A)
    torch.testing.assert_close(torch.func.hessian(lambda a: (ozaki.matmul(a, B) ** 2).sum())(A),
                               native, rtol=1e-14, atol=1e-14)
    with ozaki.enable():
        hessian = torch.func.hessian(lambda a: ((a @ B) ** 2).sum())(A)
    torch.testing.assert_close(hessian, native, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_torch_func_nested_transforms_and_vmap(device):
    """jacrev of jacrev and grad of vmap run through ozaki (the grad below a vmap included), and
    torch.func.vmap of ozaki.matmul is the batched product of the same batch, bit for bit."""
    A, B = operands([(3, 4), (4, 5)], 36, device)
    nested = torch.func.jacrev(torch.func.jacrev(lambda a: ozaki.matmul(a, B)))(A)
    assert_bitwise_equal(nested, torch.zeros(3, 5, 3, 4, 3, 4, dtype=f64, device=device))
    grad = torch.func.grad(lambda a: torch.func.vmap(lambda r: ozaki.matmul(r, B))(a).sum())(A)
    assert_bitwise_equal(grad, ozaki.dgemm(torch.ones(3, 5, dtype=f64, device=device), B.T))
    batch, = operands([(7, 3, 4)], 37, device)
    assert_bitwise_equal(torch.func.vmap(ozaki.matmul, in_dims=(0, None))(batch, B),
                         ozaki.matmul(batch, B))
    jacobian = torch.func.jacrev(ozaki.matmul)(A, B)
    assert_bitwise_equal(jacobian, torch.func.jacrev(lambda a, b: a @ b)(A, B))


# ---- plain eager calls: the operator's kernel called directly (ozaki/gemm_op.py, run_gemm) -------


def _through_operator(monkeypatch, call):
    """call() with every product sent through the ozaki::gemm operator."""
    with monkeypatch.context() as patch:
        patch.setattr(gemm_op, "_direct", lambda *tensors: False)
        return call()


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("options", [{}, {"backend": "crt", "moduli": 16}, {"rounding": "nearest"},
                                     {"backend": "fp16", "slices": 8}, {"backend": "int8"}],
                         ids=["default", "crt", "nearest", "fp16", "int8"])
def test_direct_calls_give_the_operators_bits(device, options, monkeypatch):
    """dgemm, sgemm, gemm (alpha, beta, C, complex) and matmul (batched) give the same bits called
    directly as through the operator."""
    A, B, C = operands([(7, 33), (33, 5), (7, 5)], 18, device)
    Z, W = operands([(3, 7, 33), (3, 33, 5)], 19, device, torch.complex128)
    calls = [lambda: ozaki.dgemm(A, B, **options),
             lambda: ozaki.sgemm(A.float(), B.float(), **options),
             lambda: ozaki.gemm(A, B, C, alpha=-1.5, beta=0.25, transb=False, **options),
             lambda: ozaki.gemm(Z[0], W[0].mT, alpha=2 - 1j, transb="C", **options),
             lambda: ozaki.matmul(Z, W, **options)]
    for call in calls:
        assert_bitwise_equal(call(), _through_operator(monkeypatch, call))


def test_direct_calls_only_where_nothing_needs_the_operator():
    """The kernel runs without the operator only for plain eager calls: not for operands that
    require grad (in grad mode), tensor subclasses, torch function or dispatch modes, or under
    functorch transforms or a dual level of forward-mode AD."""
    A, B = operands([(4, 6), (6, 3)], 20, "cpu")
    assert gemm_op._direct(A, B, None)
    assert gemm_op._direct(A, B, B.new_ones(4, 3))
    grad_a = A.clone().requires_grad_()
    assert not gemm_op._direct(grad_a, B, None)
    assert not gemm_op._direct(A, B, B.new_ones(4, 3).requires_grad_())
    with torch.no_grad():
        assert gemm_op._direct(grad_a, B, None)
    assert not gemm_op._direct(torch.nn.Parameter(A), B, None)
    with _PassingFunctionMode():
        assert not gemm_op._direct(A, B, None)
    with TorchDispatchMode():
        assert not gemm_op._direct(A, B, None)
    seen = []
    torch.func.vmap(lambda a: seen.append(gemm_op._direct(a, B, None)) or a)(A.unsqueeze(0))
    assert seen == [False]
    with fwAD.dual_level():
        assert not gemm_op._direct(A, B, None)
    assert gemm_op._direct(A, B, None)


class _PassingFunctionMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _RecordingMode(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_operator_is_seen_by_modes_and_the_profiler(device):
    """A dispatch mode sees ozaki::gemm, and a direct call shows in the profiler as ozaki::gemm."""
    A, B = operands([(4, 6), (6, 3)], 21, device)
    with _RecordingMode() as mode:
        ozaki.dgemm(A, B)
    assert "ozaki.gemm.default" in mode.ops
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        ozaki.dgemm(A, B)
    assert "ozaki::gemm" in {event.key for event in prof.key_averages()}
