"""Helpers shared by the test modules."""

import functools
import importlib.util
import math
import os
import pathlib
import re
import sys
import threading
from fractions import Fraction

import pytest
import torch

import ozaki
from ozaki import accuracy

# The dtypes of the public products, as test parameters, and the real dtype of each.
REAL_GEMMS = {torch.float64: ozaki.dgemm, torch.float32: ozaki.sgemm}
REAL_OF = {torch.float64: torch.float64, torch.float32: torch.float32,
           torch.complex128: torch.float64, torch.complex64: torch.float32}
REAL_DTYPES = [pytest.param(torch.float64, id="float64"), pytest.param(torch.float32, id="float32")]
COMPLEX_DTYPES = [pytest.param(torch.complex128, id="complex128"),
                  pytest.param(torch.complex64, id="complex64")]
ALL_DTYPES = REAL_DTYPES + COMPLEX_DTYPES
BACKENDS = ("auto", "fp16", "int8", "crt")


def load_script(name):
    """scripts/<name>.py as a module (the randomized checks, which their tests drive)."""
    path = pathlib.Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_unit_up(C):
    """A contiguous copy of C with its first entry one unit in the last place up."""
    C = C.clone(memory_format=torch.contiguous_format)
    C.view(-1)[0] = torch.nextafter(C.view(-1)[0], torch.tensor(math.inf, dtype=C.dtype))
    return C


def cpu_and_cuda():
    """Device parameters: the CUDA case is marked so conftest skips it where no GPU is usable."""
    return [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)]


@functools.cache
def crt_paths():
    """Scheme II's CUDA paths as OZAKI_CRT_PATH names them ("" for the rule's choice); the reduced
    GEMMs where this build and GPU run them (built for sm_90a with CUTLASS, compute capability
    9.0), which a call on that path reports."""
    paths = ["cublas", "fused", ""]
    before = os.environ.get("OZAKI_CRT_PATH")
    os.environ["OZAKI_CRT_PATH"] = "reduced"
    try:
        ones = torch.ones(2, 2, dtype=torch.float64, device="cuda")
        ozaki.dgemm(ones, ones, backend="crt", moduli=3)
        paths.insert(2, "reduced")
    except RuntimeError as error:
        if "no reduced residue GEMM" not in str(error):
            raise
    finally:
        if before is None:
            os.environ.pop("OZAKI_CRT_PATH")
        else:
            os.environ["OZAKI_CRT_PATH"] = before
    return paths


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def phi_pair(m, k, n, phi, seed, dtype=torch.float64, device="cpu"):
    """Fresh (A, B) with the (rand - 0.5) * exp(phi * randn) distribution, drawn on the CPU."""
    g = seeded(seed)
    A = accuracy.phi_matrix(m, k, phi, generator=g, dtype=dtype)
    B = accuracy.phi_matrix(k, n, phi, generator=g, dtype=dtype)
    return A.to(device), B.to(device)


def phi_tensor(shape, dtype, generator, phi=1.0):
    """Fresh phi_matrix entries of any shape (empty too) and float or complex dtype, drawn on the
    CPU; complex entries get independent real and imaginary parts."""
    real = {torch.complex128: torch.float64, torch.complex64: torch.float32}.get(dtype, dtype)

    def part():
        if math.prod(shape) == 0:
            return torch.empty(shape, dtype=real)
        flat = accuracy.phi_matrix(1, math.prod(shape), phi, generator=generator, dtype=real)
        return flat.reshape(shape)

    return torch.complex(part(), part()) if dtype.is_complex else part()


def scale_of(code: int) -> Fraction:
    """Scheme II's row scale of an int scale code 16 e + f: c = (16 + f) 2^(e - 4), f in [0, 16)
    (floor division, so negative codes too), decoded here apart from ozaki.crt.scale_value so
    that the exact references do not share the code they check."""
    e, f = divmod(code, 16)
    return (16 + f) * Fraction(2) ** (e - 4)


def run_in_threads(*works):
    """Runs the callables at once, each in a thread of its own, switching threads every
    microsecond and on one torch thread each, so that races inside products show; returns the
    exceptions they raised."""
    errors = []

    def guarded(work):
        try:
            work()
        except Exception as error:  # noqa: BLE001 (returned to the test)
            errors.append(error)

    interval, threads_before = sys.getswitchinterval(), torch.get_num_threads()
    sys.setswitchinterval(1e-6)
    torch.set_num_threads(1)
    try:
        threads = [threading.Thread(target=guarded, args=(work,)) for work in works]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
        torch.set_num_threads(threads_before)
    return errors


def assert_bitwise_equal(x: torch.Tensor, y: torch.Tensor):
    """Same shape, dtype and bits (NaN payloads and signed zeros included; complex: both parts)."""
    assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
    if x.is_complex():
        x, y = torch.view_as_real(x.resolve_conj()), torch.view_as_real(y.resolve_conj())
    int_type = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
                torch.bfloat16: torch.int16}[x.dtype]
    xb = x.detach().cpu().contiguous().view(int_type)
    yb = y.detach().cpu().contiguous().view(int_type)
    differing = (xb != yb).sum().item()
    assert differing == 0, f"{differing} of {x.numel()} entries differ bitwise"


def seeded_operands(shapes, dtype, seed, device, phi=1.0):
    """Tensors of the given shapes from one seeded CPU generator, moved to device."""
    g = seeded(seed)
    return [phi_tensor(tuple(shape), dtype, g, phi).to(device) for shape in shapes]


def ones(*shape, dtype=torch.float64):
    """A tensor of ones, for argument checks that fail before any product."""
    return torch.ones(shape, dtype=dtype)


def error_cases(cases):
    """pytest params from rows (id, args, kwargs, exception, message)."""
    return [pytest.param(*case[1:], id=case[0]) for case in cases]


def error_test(function, cases):
    """A test, one case per row (id, args, kwargs, exception, message), that function(*args,
    **kwargs) raises the exception with a message matching the row's."""
    @pytest.mark.parametrize("args, kwargs, error, message", error_cases(cases))
    def test(args, kwargs, error, message):
        with pytest.raises(error, match=message):
            function(*args, **kwargs)
    return test


def assert_wrong_out_is_named(name, product, shape, wrong_dtype, device):
    """product(out=...) rejects an out of the transposed shape, one of wrong_dtype and a leaf that
    requires grad, with messages naming the function and out; product's result is float64 of the
    given shape."""
    transposed = tuple(reversed(shape))
    with pytest.raises(ValueError, match=re.escape(f"{name}: out must have the result's shape "
                                                   f"{shape}, got {transposed}")):
        product(out=torch.empty(transposed, dtype=torch.float64, device=device))
    with pytest.raises(TypeError, match=re.escape(f"{name}: out must have the result's dtype "
                                                   f"torch.float64, got {wrong_dtype}")):
        product(out=torch.empty(shape, dtype=wrong_dtype, device=device))
    leaf = torch.empty(shape, dtype=torch.float64, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match=re.escape(f"{name}: out is a leaf tensor that requires "
                                                     "grad")):
        product(out=leaf)


def assert_usage_error(parse, argv, message, capsys):
    """A command line rejected by argparse: exit status 2 and `message` on stderr."""
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


FLOAT32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103  # float32 max + half an ulp: rounds to +Inf


def format_product(a, b, dtype):
    """a * b of two float values of `dtype` as that format's IEEE product (float32: the exact
    float64 product, rounded to float32 only past its range, where it is +-Inf)."""
    product = a * b
    if dtype == torch.float32 and math.isfinite(product) and abs(product) >= FLOAT32_OVERFLOW:
        return math.copysign(math.inf, product)
    return product


def ieee_dot(row, col, dtype=torch.float64):
    """The IEEE result of the plain dot product in `dtype` of a row and a column holding NaN or
    +-Inf (NaN on any NaN, 0 * Inf or infinite products of both signs, a finite product that
    overflows counting as infinite; else the signed infinity); None when every product is
    finite."""
    products = [format_product(a, b, dtype) for a, b in zip(row, col)]
    if any(math.isnan(p) for p in products):
        return math.nan
    infinite = {p for p in products if math.isinf(p)}
    if len(infinite) == 2:
        return math.nan
    return infinite.pop() if infinite else None


def assert_special_values_follow_ieee(C, A, B):
    """Every entry of C = A @ B whose dot product meets NaN or +-Inf holds its IEEE value; the
    others hold the float sum of the products (inputs chosen so that sum is exact)."""
    C = C.cpu()
    for i, row in enumerate(A.cpu().double().tolist()):
        for j, col in enumerate(B.cpu().double().t().tolist()):
            expected, got = ieee_dot(row, col, A.dtype), C[i, j].item()
            if expected is None:
                assert got == sum(a * b for a, b in zip(row, col)), (i, j, got)
            elif math.isnan(expected):
                assert math.isnan(got), (i, j, got)
            else:
                assert got == expected, (i, j, got, expected)


def norm_scale_code(square_sum, tau):
    """csrc/crt.h norm_scale_code in Python integers: e the smallest with 4^e >= the sum,
    nu = tau - 16 + e, f the largest in [0, 15] with (16 + f)^2 sum <= 4^(e + 4), the code
    -16 nu + f of c = (16 + f) 2^(-nu - 4); -16 tau (c = 2^-tau) for a zero sum. A sum past 2^53
    is rounded up to 53 bits first, ceil(sum / 2^s) 2^s, as the kernel does."""
    if square_sum == 0:
        return -16 * tau
    e = 0
    while 4 ** e < square_sum:
        e += 1
    shift = max(0, 2 * e - 53)
    rounded = -(-square_sum >> shift) << shift
    f = max(f for f in range(16) if (16 + f) ** 2 * rounded <= 4 ** (e + 4))
    return -16 * (tau - 16 + e) + f
