"""ozaki.enable, the drop-in mode: which torch calls it sends through ozaki (with its options and
dtypes), what it leaves alone, nesting, leaving the block, errors and repr (ozaki/dropin.py,
docs/torch.md, "Drop-in mode")."""


import contextlib
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import ozaki
from ozaki import dropin
from helpers import assert_bitwise_equal, cpu_and_cuda, phi_tensor, seeded


f64, f32 = torch.float64, torch.float32
nan = float("nan")
OPTIONS = {"slices": 3}




def operands(shapes, seed, device, dtype=f64):
    g = seeded(seed)
    return [phi_tensor(tuple(s), dtype, g).to(device) for s in shapes]


# (id, the torch call, the ozaki call it must equal bit for bit with the mode's options)
CALLS = {
    "torch.matmul": (lambda a, b, c, x, w, bias: torch.matmul(a, b),
                     lambda a, b, c, x, w, bias, o: ozaki.matmul(a, b, **o)),
    "Tensor.matmul": (lambda a, b, c, x, w, bias: a.matmul(b),
                      lambda a, b, c, x, w, bias, o: ozaki.matmul(a, b, **o)),
    "@": (lambda a, b, c, x, w, bias: a @ b,
          lambda a, b, c, x, w, bias, o: ozaki.matmul(a, b, **o)),
    "__rmatmul__": (lambda a, b, c, x, w, bias: b.__rmatmul__(a),
                    lambda a, b, c, x, w, bias, o: ozaki.matmul(a, b, **o)),
    "@-batched-broadcast": (lambda a, b, c, x, w, bias: x @ w.mT,
                            lambda a, b, c, x, w, bias, o: ozaki.matmul(x, w.mT, **o)),
    "@-vector": (lambda a, b, c, x, w, bias: a[0] @ b,
                 lambda a, b, c, x, w, bias, o: ozaki.matmul(a[0], b, **o)),
    "torch.mm": (lambda a, b, c, x, w, bias: torch.mm(a, b),
                 lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, **o)),
    "Tensor.mm": (lambda a, b, c, x, w, bias: a.mm(b),
                  lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, **o)),
    "torch.bmm": (lambda a, b, c, x, w, bias: torch.bmm(x, x.mT),
                  lambda a, b, c, x, w, bias, o: ozaki.gemm(x, x.mT, **o)),
    "Tensor.bmm": (lambda a, b, c, x, w, bias: x.bmm(x.mT),
                   lambda a, b, c, x, w, bias, o: ozaki.gemm(x, x, transb=True, **o)),
    "torch.addmm": (lambda a, b, c, x, w, bias: torch.addmm(c, a, b, beta=0.5, alpha=-2.0),
                    lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, c, alpha=-2.0, beta=0.5, **o)),
    "torch.addmm-default": (lambda a, b, c, x, w, bias: torch.addmm(c, a, b),
                            lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, c, beta=1, **o)),
    "torch.addmm-row": (lambda a, b, c, x, w, bias: torch.addmm(c[0], a, b, alpha=1.5),
                        lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, c[0], alpha=1.5, beta=1,
                                                                  **o)),
    "Tensor.addmm": (lambda a, b, c, x, w, bias: c.addmm(a, b, beta=3.0),
                     lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, c, beta=3.0, **o)),
    "addmm-beta-0-nan": (lambda a, b, c, x, w, bias: torch.addmm(torch.full_like(c, nan), a, b,
                                                                 beta=0),
                         lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, **o)),
    "linear": (lambda a, b, c, x, w, bias: F.linear(a, w),
               lambda a, b, c, x, w, bias, o: ozaki.gemm(a, w, transb=True, **o)),
    "linear-bias": (lambda a, b, c, x, w, bias: F.linear(a, w, bias),
                    lambda a, b, c, x, w, bias, o: ozaki.gemm(a, w, bias, beta=1, transb=True,
                                                              **o)),
    "linear-batched-bias": (lambda a, b, c, x, w, bias: F.linear(x, w, bias),
                            lambda a, b, c, x, w, bias, o: ozaki.gemm(
                                x.reshape(-1, 9), w, bias, beta=1, transb=True,
                                **o).reshape(2, 6, 5)),
    "linear-vector": (lambda a, b, c, x, w, bias: F.linear(a[1], w, bias),
                      lambda a, b, c, x, w, bias, o: ozaki.gemm(a[1:2], w.T, bias, beta=1,
                                                                **o)[0]),
    "torch.linalg.matmul": (lambda a, b, c, x, w, bias: torch.linalg.matmul(a, b),
                            lambda a, b, c, x, w, bias, o: ozaki.matmul(a, b, **o)),
    "addmm-deprecated": (lambda a, b, c, x, w, bias: torch.addmm(0.5, c, -2.0, a, b),
                         lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, c, alpha=-2.0, beta=0.5,
                                                                   **o)),
    "Tensor.addmm-deprecated": (lambda a, b, c, x, w, bias: c.addmm(0.5, a, b),
                                lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, c, beta=0.5, **o)),
    "addmm-torch-scalars": (lambda a, b, c, x, w, bias: torch.addmm(
                                c, a, b, alpha=torch.tensor(2.0), beta=True),
                            lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, c, alpha=2.0, beta=1,
                                                                      **o)),
    "Tensor.addmm_": (lambda a, b, c, x, w, bias: c.clone().addmm_(a, b, alpha=1.5),
                      lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b, c, alpha=1.5, beta=1, **o)),
    "Tensor.addmv_": (lambda a, b, c, x, w, bias: c[:, 2].clone().addmv_(a, b[:, 1], alpha=-1),
                      lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b[:, 1:2], c[:, 2:3], alpha=-1,
                                                                beta=1, **o)[:, 0]),
    "Tensor.baddbmm_": (lambda a, b, c, x, w, bias: x[:, :, :6].clone().baddbmm_(x, x.mT),
                        lambda a, b, c, x, w, bias, o: ozaki.gemm(x, x.mT, x[:, :, :6], beta=1,
                                                                  **o)),
    "torch.mv": (lambda a, b, c, x, w, bias: torch.mv(a, b[:, 0]),
                 lambda a, b, c, x, w, bias, o: ozaki.matmul(a, b[:, 0], **o)),
    "torch.addmv": (lambda a, b, c, x, w, bias: torch.addmv(c[:, 1], a, b[:, 0], beta=2.0),
                    lambda a, b, c, x, w, bias, o: ozaki.gemm(a, b[:, :1], c[:, 1:2], beta=2.0,
                                                              **o)[:, 0]),
    "torch.dot": (lambda a, b, c, x, w, bias: torch.dot(a[0], b[:, 0]),
                  lambda a, b, c, x, w, bias, o: ozaki.matmul(a[0], b[:, 0], **o)),
    "torch.inner": (lambda a, b, c, x, w, bias: torch.inner(a, w),
                    lambda a, b, c, x, w, bias, o: ozaki.gemm(a, w, transb=True, **o)),
    "torch.baddbmm": (lambda a, b, c, x, w, bias: torch.baddbmm(a[:, :6], x, x.mT, alpha=0.5),
                      lambda a, b, c, x, w, bias, o: ozaki.gemm(x, x.mT, a[:, :6], alpha=0.5,
                                                                beta=1, **o)),
    "torch.addbmm": (lambda a, b, c, x, w, bias: torch.addbmm(a[:, :6], x, x.mT),
                     lambda a, b, c, x, w, bias, o: ozaki.gemm(
                         x.permute(1, 0, 2).reshape(6, 18), x.mT.reshape(18, 6), a[:, :6], beta=1,
                         **o)),
    "torch.tensordot": (lambda a, b, c, x, w, bias: torch.tensordot(x, w, ([2], [1])),
                        lambda a, b, c, x, w, bias, o: ozaki.gemm(
                            x.reshape(12, 9), w, transb=True, **o).reshape(2, 6, 5)),
    "torch.linalg.multi_dot": (lambda a, b, c, x, w, bias: torch.linalg.multi_dot([a, b, w]),
                               lambda a, b, c, x, w, bias, o: ozaki.gemm(ozaki.gemm(a, b, **o), w,
                                                                         **o)),
    "torch.linalg.multi_dot-vectors": (
        lambda a, b, c, x, w, bias: torch.linalg.multi_dot([a[0], b, c[0]]),
        lambda a, b, c, x, w, bias, o: ozaki.matmul(ozaki.matmul(a[0], b, **o), c[0], **o)),
    "torch.linalg.vecdot": (lambda a, b, c, x, w, bias: torch.linalg.vecdot(a, w[:1], dim=1),
                            lambda a, b, c, x, w, bias, o: ozaki.gemm(a, w[:1], transb=True,
                                                                      **o)[:, 0]),
    "torch.einsum": (lambda a, b, c, x, w, bias: torch.einsum("bik,jk->bij", x, w),
                     lambda a, b, c, x, w, bias, o: ozaki.gemm(
                         x.reshape(12, 9), w, transb=True, **o).reshape(2, 6, 5)),
    "linear-bias-of-the-output": (lambda a, b, c, x, w, bias: F.linear(a, w, c),
                                  lambda a, b, c, x, w, bias, o: ozaki.gemm(a, w, c, beta=1,
                                                                            transb=True, **o)),
    "linear-vector-weight": (lambda a, b, c, x, w, bias: F.linear(a, w[0]),
                             lambda a, b, c, x, w, bias, o: ozaki.matmul(a, w[0], **o)),
}


def call_operands(seed, device, dtype):
    """a (6, 9), b (9, 5), c (6, 5), x (2, 6, 9), weight (5, 9), bias (5,)."""
    return operands([(6, 9), (9, 5), (6, 5), (2, 6, 9), (5, 9), (5,)], seed, device, dtype)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("call", list(CALLS))
def test_intercepted_calls_give_the_ozaki_bits(device, call):
    """Inside enable(slices=3) each intercepted float64 call returns ozaki.matmul / ozaki.gemm's
    bits with the same options; the mode's result is not the native one."""
    torch_call, ozaki_call = CALLS[call]
    tensors = call_operands(1, device, f64)
    native = torch_call(*tensors)
    with ozaki.enable(**OPTIONS):
        result = torch_call(*tensors)
    expected = ozaki_call(*tensors, OPTIONS)
    assert_bitwise_equal(result, expected)
    assert expected.isfinite().all()
    assert not torch.equal(result, native)  # slices=3 truncates: the mode really ran ozaki
    assert_bitwise_equal(torch_call(*tensors), native)  # and leaving the block restores torch


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("call", list(CALLS))
def test_other_dtypes_are_untouched(device, call):
    """float32 operands under a float64 mode get the native product's bits."""
    torch_call, _ = CALLS[call]
    tensors = call_operands(2, device, f32)
    native = torch_call(*tensors)
    with ozaki.enable(**OPTIONS):
        assert_bitwise_equal(torch_call(*tensors), native)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_nn_linear_forward_and_backward(device):
    """nn.Linear(dtype=float64) runs through ozaki under the mode: the forward is gemm with the
    bias in the epilogue, and the weight gets an ozaki gradient."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(9, 5, dtype=f64).to(device)
    x, G = operands([(4, 9), (4, 5)], 3, device)
    native = layer(x)
    with ozaki.enable(**OPTIONS):
        y = layer(x)
        y.backward(G)
    weight, bias = layer.weight.detach(), layer.bias.detach()
    assert_bitwise_equal(y, ozaki.gemm(x, weight, bias, beta=1, transb=True, **OPTIONS))
    assert not torch.equal(y, native)
    assert_bitwise_equal(layer.weight.grad, ozaki.gemm(x, G, transa=True, **OPTIONS).T)
    assert_bitwise_equal(layer(x), native)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_leaving_the_block_restores_torch(device):
    """After the block, and after an exception raised inside it, a @ b is the native product
    (computed before entering)."""
    a, b = operands([(6, 9), (9, 5)], 4, device)
    native = a @ b
    with ozaki.enable(**OPTIONS):
        assert not torch.equal(a @ b, native)
    assert_bitwise_equal(a @ b, native)
    with pytest.raises(ZeroDivisionError):
        with ozaki.enable(**OPTIONS):
            1 / 0
    assert_bitwise_equal(a @ b, native)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_nested_modes(device):
    """The innermost mode that takes a dtype handles it: float64 goes through the outer options
    under an inner float32 mode, float32 through the inner ones; an inner float64 mode overrides
    the outer one until its block ends."""
    a, b = operands([(6, 9), (9, 5)], 5, device)
    a32, b32 = a.float(), b.float()
    native32 = a32 @ b32
    with ozaki.enable(f64, slices=3):
        with ozaki.enable(dtypes=(f32,), slices=2):
            assert_bitwise_equal(a @ b, ozaki.matmul(a, b, slices=3))
            assert_bitwise_equal(torch.mm(a32, b32), ozaki.sgemm(a32, b32, slices=2))
        assert_bitwise_equal(a32 @ b32, native32)  # the float32 mode has ended
        with ozaki.enable(f64, slices=5):
            assert_bitwise_equal(a @ b, ozaki.matmul(a, b, slices=5))
        assert_bitwise_equal(a @ b, ozaki.matmul(a, b, slices=3))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_float32_outside_any_mode_is_native(device):
    """A float32 product inside a float64 mode equals the one computed before the block."""
    a, b = operands([(6, 9), (9, 5)], 6, device, f32)
    native = a @ b
    with ozaki.enable(f64, slices=3):
        assert_bitwise_equal(a @ b, native)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_calls_not_intercepted_stay_native(device):
    """Products without sums (outer, kron) and a one-operand einsum that only permutes stay plain
    torch inside the mode."""
    a, v = operands([(6, 9), (9,)], 7, device)
    calls = [lambda: torch.outer(v, v), lambda: torch.kron(a, a[:2, :2]),
             lambda: torch.einsum("ij->ji", a)]
    native = [call() for call in calls]
    with ozaki.enable(**OPTIONS):
        for call, expected in zip(calls, native):
            assert_bitwise_equal(call(), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_chain_matmul_is_multi_dot(device):
    """The deprecated torch.chain_matmul runs as torch.linalg.multi_dot does, in the chain's
    cheapest association (here (a b) c: 6 9 5 + 6 5 6 multiply-adds against 9 5 6 + 6 9 6)."""
    a, b, c = operands([(6, 9), (9, 5), (5, 6)], 12, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # chain_matmul is deprecated
        with ozaki.enable(**OPTIONS):
            result = torch.chain_matmul(a, b, c)
    assert_bitwise_equal(result, ozaki.gemm(ozaki.gemm(a, b, **OPTIONS), c, **OPTIONS))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_out_is_resized_as_torch_resizes_it(device):
    """out= of another shape is resized as torch resizes it: silently when empty, with a warning
    when it held entries; out of another dtype is torch's error."""
    a, b, c = operands([(6, 9), (9, 5), (6, 5)], 10, device)
    calls = {"matmul": (lambda out: torch.matmul(a, b, out=out), ozaki.matmul(a, b, **OPTIONS)),
             "mm": (lambda out: torch.mm(a, b, out=out), ozaki.gemm(a, b, **OPTIONS)),
             "addmm": (lambda out: torch.addmm(c, a, b, out=out),
                       ozaki.gemm(a, b, c, beta=1, **OPTIONS))}
    for call, expected in calls.values():
        with ozaki.enable(**OPTIONS):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = torch.empty(0, dtype=f64, device=device)
                assert call(out) is out
            assert not [w for w in caught if "resized" in str(w.message)]
            assert_bitwise_equal(out, expected)
            out = torch.empty(3, dtype=f64, device=device)
            with pytest.warns(UserWarning, match=r"ozaki.enable: out of shape \[3\] held entries "
                                                 r"and was resized to the result's shape"):
                call(out)
            assert_bitwise_equal(out, expected)
            with pytest.raises(RuntimeError):
                call(torch.empty(0, dtype=f32, device=device))


def _resize_warnings(call, out):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(out)
    return [w for w in caught if "resized" in str(w.message)]


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_out_resize_warns_where_torch_warns(device):
    """An out= that held entries and is resized warns under the mode exactly where torch warns:
    every product but addbmm, which torch resizes silently."""
    a, b, c = operands([(6, 9), (9, 5), (6, 5)], 12, device)
    x, y = operands([(2, 6, 9), (2, 9, 5)], 13, device)
    calls = {"mm": lambda out: torch.mm(a, b, out=out),
             "matmul": lambda out: torch.matmul(x, y, out=out),
             "bmm": lambda out: torch.bmm(x, y, out=out),
             "addmm": lambda out: torch.addmm(c, a, b, out=out),
             "baddbmm": lambda out: torch.baddbmm(c, x, y, out=out),
             "addbmm": lambda out: torch.addbmm(c, x, y, out=out),
             "addmv": lambda out: torch.addmv(c[:, 0], a, b[:, 0], out=out),
             "mv": lambda out: torch.mv(a, b[:, 0], out=out),
             "dot": lambda out: torch.dot(a[0], b[:, 0], out=out)}
    for name, call in calls.items():
        torch_warns = bool(_resize_warnings(call, torch.zeros(3, dtype=f64, device=device)))
        with ozaki.enable(**OPTIONS):
            out = torch.zeros(3, dtype=f64, device=device)
            warned = _resize_warnings(call, out)
        assert bool(warned) == torch_warns, name
        assert torch_warns == (name != "addbmm"), name
        assert out.shape == call(torch.empty(0, dtype=f64, device=device)).shape, name


def test_chain_matmul_warns_as_torch_does(monkeypatch):
    """torch.chain_matmul under the mode gives torch's deprecation warning (which torch gives in
    the code the mode replaces): once per process, at the caller's line, and the product still runs
    through ozaki."""
    a, b, c = operands([(6, 9), (9, 5), (5, 6)], 14, "cpu")
    monkeypatch.setattr(dropin, "_chain_matmul_warned", False)
    caught = []
    for _ in range(2):
        with ozaki.enable(**OPTIONS), warnings.catch_warnings(record=True) as round_caught:
            warnings.simplefilter("always")
            result = torch.chain_matmul(a, b, c)
        caught.append([w for w in round_caught if "deprecated" in str(w.message)])
    assert [len(round_caught) for round_caught in caught] == [1, 0]
    assert caught[0][0].filename == __file__ and caught[0][0].category is UserWarning
    assert "torch.linalg.multi_dot" in str(caught[0][0].message)
    assert_bitwise_equal(result, ozaki.gemm(ozaki.gemm(a, b, **OPTIONS), c, **OPTIONS))


def test_calls_with_torchs_other_arguments_go_to_torch():
    """An out_dtype (a form ozaki has no counterpart of) or a keyword ozaki does not know is handed
    to torch, which decides (here: its own error)."""
    a, b, c = operands([(6, 9), (9, 5), (6, 5)], 11, "cpu")
    calls = [lambda: torch.mm(a, b, f64), lambda: torch.addmm(c, a, b, f64),
             lambda: torch.mm(a, b, out_dtype=f64)]
    for call in calls:
        try:
            native = call()
        except (RuntimeError, NotImplementedError, TypeError) as error:
            with ozaki.enable(**OPTIONS):
                with pytest.raises(type(error)):
                    call()
        else:
            with ozaki.enable(**OPTIONS):
                assert_bitwise_equal(call(), native)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_sparse_operands_stay_with_torch(device, monkeypatch):
    """torch.mm, matmul and addmm of a sparse operand inside the mode are torch's own: ozaki,
    which reads dense operands only, is never called (torch's sparse kernels need not give the
    same bits twice, so the results are compared with torch's to within rounding)."""
    a, b, c = operands([(6, 9), (9, 5), (6, 5)], 9, device)
    sparse = a.to_sparse()
    calls = [lambda: torch.mm(sparse, b), lambda: torch.matmul(sparse, b),
             lambda: torch.addmm(c, sparse, b)]
    native = [call().to_dense() for call in calls]

    def refused(*args, **kwargs):
        raise AssertionError("ozaki was called with a sparse operand")

    monkeypatch.setattr(dropin, "matmul", refused)
    monkeypatch.setattr(dropin, "gemm", refused)
    with ozaki.enable(**OPTIONS):
        for call, expected in zip(calls, native):
            torch.testing.assert_close(call().to_dense(), expected, rtol=1e-14, atol=0)


def bad_calls(device):
    """Calls with shapes torch rejects, by name."""
    a, x, w, c, bias = operands([(6, 9), (2, 6, 9), (5, 8), (4, 4), (3,)], 8, device)
    return {"mm": lambda: torch.mm(a, a), "bmm": lambda: torch.bmm(x, x),
            "addmm": lambda: torch.addmm(a, a, a), "linear": lambda: F.linear(a, w),
            "matmul": lambda: torch.matmul(a, a), "@": lambda: a @ a,
            "linear-bias": lambda: F.linear(a, a[:5], bias),
            # torch adds a bias that squeezes to 1-D in the product of x's flattened rows
            "linear-bias-of-rows": lambda: F.linear(x, a, bias[:, None]),
            "addmm-C": lambda: torch.addmm(c, a, a.T)}


def assert_raises_like_torch(call):
    with pytest.raises(Exception) as native:
        call()
    with ozaki.enable(**OPTIONS):
        with pytest.raises(Exception) as inside:
            call()
    assert inside.type is native.type and str(inside.value) == str(native.value), inside.value


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("call", ["mm", "bmm", "addmm", "linear"])
def test_bad_shapes_raise_torchs_error(device, call):
    """Shapes torch rejects are handed to torch, which raises its own RuntimeError."""
    assert_raises_like_torch(bad_calls(device)[call])


@pytest.mark.parametrize("call", ["matmul", "@", "linear-bias", "linear-bias-of-rows", "addmm-C"])
def test_bad_shapes_of_the_other_calls_raise_torchs_error(call):
    assert_raises_like_torch(bad_calls("cpu")[call])


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_linear_biases_torch_adds_to_the_result_go_through_ozaki(device):
    """A bias that broadcasts to F.linear's result where torch adds it to the result (x not
    contiguous, or a bias of more than one dimension left after squeezing) is taken: RN(P + bias)."""
    x, w, bias = operands([(2, 3, 9), (5, 9), (3, 1)], 15, device)
    strided = x.transpose(0, 1).contiguous().transpose(0, 1)
    wide = torch.ones(2, 3, 5, dtype=f64, device=device)
    for inputs, b in ((strided, bias), (x, wide), (x, wide[:1])):
        native = F.linear(inputs, w, b)
        with ozaki.enable(**OPTIONS):
            y = F.linear(inputs, w, b)
        assert y.shape == native.shape
        assert_bitwise_equal(y, torch.add(ozaki.matmul(inputs, w.T, **OPTIONS), b))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("weight_rank", [2, 1])
def test_linear_bias_nans_have_the_epilogues_bits(device, weight_rank):
    """float32 NaNs from a bias that F.linear adds to the result (one of the output's shape, or any
    bias beside a 1-D weight) come out as every ozaki result's quiet NaN 0x7fc00000, on every
    device, as the same bias through ozaki.gemm's C (torch's float32 add keeps the payload on the
    CPU and gives 0x7fffffff on CUDA)."""
    x, w = operands([(2, 3, 4), (5, 4)], 16, device, dtype=torch.float32)
    weight = w if weight_rank == 2 else w[0]
    bias, = operands([(2, 3, 5 if weight_rank == 2 else 1)], 17, device, dtype=torch.float32)
    bias = bias.squeeze(-1).contiguous()
    bits = bias.view(torch.int32).view(-1)
    bits[0], bits[3] = 0x7FC12345, 0x7FA00001  # a quiet NaN with a payload, a signalling NaN
    with ozaki.enable(dtypes=(torch.float32,), **OPTIONS):
        y = F.linear(x, weight, bias)
    columns = weight.reshape(-1, 4)
    expected = ozaki.gemm(x.reshape(6, 4), columns, bias.reshape(6, -1), beta=1, transb=True,
                          **OPTIONS).reshape(y.shape)
    assert_bitwise_equal(y, expected)
    nans = y.isnan()
    assert nans.sum() == 2 and (y.view(torch.int32)[nans] == 0x7FC00000).all()
    assert_bitwise_equal(y[~nans], torch.add(ozaki.matmul(x, weight.T, **OPTIONS), bias)[~nans])


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_float32_products_under_autocast_stay_with_torch(device):
    """Under torch.autocast, which sets the precision of float32 products (bfloat16 on the CPU,
    float16 on CUDA here), float32 calls are torch's: its dtype and bits. float64 products, which
    autocast leaves alone, are still ozaki's."""
    a, b, c = operands([(3, 4), (4, 5), (3, 5)], 22, device, dtype=torch.float32)
    low = torch.bfloat16 if device == "cpu" else torch.float16
    calls = [lambda x, y, z: torch.mm(x, y), lambda x, y, z: x @ y,
             lambda x, y, z: F.linear(x, y.T), lambda x, y, z: torch.addmm(z, x, y),
             lambda x, y, z: torch.einsum("ij,jk->ik", x, y)]
    with torch.autocast(device, dtype=low):
        native = [call(a, b, c) for call in calls]
        with ozaki.enable(dtypes=(torch.float32, f64), **OPTIONS):
            got = [call(a, b, c) for call in calls]
            wide = torch.mm(a.double(), b.double())
    for g, n in zip(got, native):
        assert g.dtype == n.dtype == low
        assert_bitwise_equal(g, n)
    assert_bitwise_equal(wide, ozaki.dgemm(a.double(), b.double(), **OPTIONS))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_checkpointed_blocks_get_ozakis_gradients_the_documented_ways(device):
    """torch.utils.checkpoint recomputes in backward, where autograd runs no function modes: the
    mode entered inside the checkpointed function, or given as the recomputation's context_fn,
    gives the gradients of the block run without checkpointing (correctly rounded, so ozaki's
    bits differ from native torch's)."""
    x, w1, w2 = operands([(6, 8), (8, 8), (8, 5)], 23, device)
    for t in (x, w1, w2):
        t.requires_grad_()
    options = {"rounding": "nearest"}

    def block(inputs):
        return torch.tanh(inputs @ w1) @ w2

    def block_in_mode(inputs):
        with ozaki.enable(**options):
            return block(inputs)

    def gradients(run):  # by .backward(): the reentrant checkpoint refuses autograd.grad
        for t in (x, w1, w2):
            t.grad = None
        run().sum().backward()
        return [t.grad for t in (x, w1, w2)]

    with ozaki.enable(**options):
        expected = gradients(lambda: block(x))
    native = gradients(lambda: block(x))
    assert any(not torch.equal(e, n) for e, n in zip(expected, native))
    recompute_in_mode = lambda: (contextlib.nullcontext(), ozaki.enable(**options))  # noqa: E731
    runs = [lambda: checkpoint(block_in_mode, x, use_reentrant=True),
            lambda: checkpoint(block_in_mode, x, use_reentrant=False)]
    with ozaki.enable(**options):
        runs.append(lambda: checkpoint(block, x, use_reentrant=False,
                                       context_fn=recompute_in_mode))
        for run in runs:
            for got, e in zip(gradients(run), expected):
                assert_bitwise_equal(got, e)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_nested_operands_stay_with_torch(device, monkeypatch):
    """Nested tensors (of torch's default, strided layout) are torch's under the mode, as sparse
    ones: ozaki is never called."""
    rows = [torch.randn(3, 4, dtype=f64, device=device), torch.randn(2, 4, dtype=f64,
                                                                      device=device)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the strided layout of nested tensors is a prototype
        nested = torch.nested.nested_tensor(rows)
        right = torch.nested.nested_tensor([torch.randn(4, 5, dtype=f64, device=device)] * 2)
    w = torch.randn(5, 4, dtype=f64, device=device)
    calls = [lambda: F.linear(nested, w), lambda: torch.bmm(nested, right),
             lambda: torch.matmul(nested, right)]
    native = [call() for call in calls]

    def refused(*args, **kwargs):
        raise AssertionError("ozaki was called with a nested operand")

    for name in ("matmul", "gemm", "einsum", "tensordot"):
        monkeypatch.setattr(dropin, name, refused)
    with ozaki.enable(**OPTIONS):
        for call, expected in zip(calls, native):
            got = call()
            for g, e in zip(got.unbind(), expected.unbind()):
                assert_bitwise_equal(g, e)


def rejected_calls(device):
    """Calls torch refuses for their arguments (not their shapes alone), by name."""
    a, b, c, x, w1, bias = operands([(3, 4), (4, 5), (3, 5), (2, 3, 4), (4,), (3,)], 13, device)
    a32, b32, c32 = a.float(), b.float(), c.float()
    grad_a = a.clone().requires_grad_()
    return {
        "einsum-diagonal-sizes": lambda: torch.einsum("ii->", a[:1]),
        "einsum-diagonal-against-another": lambda: torch.einsum("ij,ii->j", a, a),
        "einsum-label-sizes": lambda: torch.einsum("ij,jk->ik", a, c),
        "chain_matmul-vectors": lambda: torch.chain_matmul(a[0], b, b[0]),
        "linear-matrix-vector-weight-bias": lambda: F.linear(a, w1, bias),
        "tensordot-two-ints": lambda: torch.tensordot(a, b, dims=(1, 0)),
        "tensordot-tensor-of-two-ints": lambda: torch.tensordot(a, b, dims=torch.tensor([1, 0])),
        "tensordot-empty-tensor": lambda: torch.tensordot(a, b, dims=torch.zeros(2, 0,
                                                                                 dtype=torch.long)),
        "tensordot-numpy-int": lambda: torch.tensordot(a, b, dims=np.int64(1)),
        "addmm-float32-alpha-past-range": lambda: torch.addmm(c32, a32, b32, alpha=1e300),
        "addmm-alpha-past-uint64": lambda: torch.addmm(c, a, b, alpha=2**80),
        "addmm-beta-below-int64": lambda: torch.addmm(c, a, b, beta=-2**63 - 1),
        "addmm-float32-beta-past-range": lambda: torch.addmm(c32, a32, b32, beta=-1e39),
        "mm-out-requires-grad": lambda: torch.mm(grad_a, b, out=torch.empty_like(c)),
        "matmul-out-requires-grad": lambda: torch.matmul(grad_a, b, out=torch.empty_like(c)),
        "addmm-out-requires-grad": lambda: torch.addmm(c, grad_a, b, out=torch.empty_like(c)),
        "vecdot-out-requires-grad": lambda: torch.linalg.vecdot(grad_a, a, out=torch.empty(3,
                                                                                      dtype=f64)),
    }


@pytest.mark.parametrize("call", list(rejected_calls("cpu")))
def test_calls_torch_refuses_raise_torchs_error(call):
    """Arguments torch refuses (label sizes, 1-D operands where it wants matrices, dims of a type it
    does not take, float32 scalars past the float32 range, out= beside an operand that requires
    grad) are handed to torch, which raises its own error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # chain_matmul is deprecated
        assert_raises_like_torch(rejected_calls("cpu")[call])


def test_out_beside_an_operand_requiring_grad_is_written_without_grad_mode():
    """Without grad mode torch writes out= whatever the operands require: so does the mode."""
    a, b = operands([(3, 4), (4, 5)], 14, "cpu")
    a.requires_grad_()
    out = torch.empty(3, 5, dtype=f64)
    with torch.no_grad(), ozaki.enable(**OPTIONS):
        assert torch.mm(a, b, out=out) is out
    assert_bitwise_equal(out, ozaki.gemm(a.detach(), b, **OPTIONS))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("shapes, dim", [(((3, 3, 3), (3, 3)), 0), (((3, 3, 3), (3, 3)), 1),
                                         (((3, 3), (3, 3, 3)), 0), (((1, 3), (4, 3)), 0),
                                         (((2, 4, 3), (4, 1)), 1), (((2, 4, 3), (4, 3)), -2)],
                         ids=["3d-2d-dim0", "3d-2d-dim1", "2d-3d-dim0", "broadcast-summed",
                              "broadcast-last", "negative"])
@pytest.mark.parametrize("dtype", [f64, torch.complex128])
def test_vecdot_sums_over_dim_of_the_broadcast_shape(device, shapes, dim, dtype):
    """torch.linalg.vecdot(x, y, dim) sums conj(x) y over dimension dim of x and y broadcast
    together (not of each operand alone): the result is that of the broadcast operands, with
    ozaki's bits, and within rounding of torch's."""
    x, y = operands(shapes, 15, device, dtype)
    native = torch.linalg.vecdot(x, y, dim=dim)
    with ozaki.enable(dtypes=(dtype,)):
        result = torch.linalg.vecdot(x, y, dim=dim)
    wide_x, wide_y = torch.broadcast_tensors(x, y)
    assert_bitwise_equal(result, ozaki.einsum("...i,...i->...", wide_x.movedim(dim, -1).conj(),
                                              wide_y.movedim(dim, -1)))
    torch.testing.assert_close(result, native, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_tensors_passed_by_keyword_go_through_ozaki(device):
    """Calls that name their tensors (torch.mm(input=a, mat2=b), c.addmm(mat1=a, mat2=b), ...) run
    through ozaki as the positional calls do, not silently through torch."""
    a, b, c, x, w, bias = call_operands(17, device, f64)
    v = b[:, 0]
    calls = [
        (lambda: torch.mm(input=a, mat2=b), lambda: torch.mm(a, b)),
        (lambda: a.mm(mat2=b), lambda: torch.mm(a, b)),
        (lambda: torch.matmul(input=a, other=b), lambda: torch.matmul(a, b)),
        (lambda: torch.linalg.matmul(input=a, other=b), lambda: torch.matmul(a, b)),
        (lambda: torch.bmm(input=x, mat2=x.mT), lambda: torch.bmm(x, x.mT)),
        (lambda: torch.mv(input=a, vec=v), lambda: torch.mv(a, v)),
        (lambda: torch.dot(input=a[0], tensor=a[1]), lambda: torch.dot(a[0], a[1])),
        (lambda: torch.inner(input=a, other=w), lambda: torch.inner(a, w)),
        (lambda: torch.addmm(input=c, mat1=a, mat2=b, beta=0.5), lambda: torch.addmm(c, a, b,
                                                                                    beta=0.5)),
        (lambda: c.addmm(mat1=a, mat2=b, alpha=2.0), lambda: torch.addmm(c, a, b, alpha=2.0)),
        (lambda: c.clone().addmm_(mat1=a, mat2=b), lambda: torch.addmm(c, a, b)),
        (lambda: torch.addmv(input=c[:, 0], mat=a, vec=v), lambda: torch.addmv(c[:, 0], a, v)),
        (lambda: torch.baddbmm(input=x[:, :, :6], batch1=x, batch2=x.mT),
         lambda: torch.baddbmm(x[:, :, :6], x, x.mT)),
        (lambda: torch.linalg.vecdot(x=a, y=a), lambda: torch.linalg.vecdot(a, a)),
        (lambda: F.linear(input=a, weight=w, bias=bias), lambda: F.linear(a, w, bias)),
        (lambda: torch.linalg.multi_dot(tensors=[a, b, w]),
         lambda: torch.linalg.multi_dot([a, b, w])),
    ]
    for named, positional in calls:
        with ozaki.enable(**OPTIONS), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # slices=3: the fixed counts' accuracy warning
            expected = positional()
            result = named()
        assert_bitwise_equal(result, expected)
        assert not torch.equal(result, positional()), "the positional call must run ozaki's product"


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_chain_matmul_writes_out(device):
    """torch.chain_matmul(..., out=o) writes o and returns it, as without the mode (torch's
    chain_matmul does not pass out on to function modes; the mode finds it in the call)."""
    a, b, c = operands([(6, 9), (9, 5), (5, 6)], 16, device)
    out = torch.full((6, 6), nan, dtype=f64, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # chain_matmul is deprecated
        with ozaki.enable(**OPTIONS):
            result = torch.chain_matmul(a, b, c, out=out)
    assert result is out
    assert_bitwise_equal(out, ozaki.gemm(ozaki.gemm(a, b, **OPTIONS), c, **OPTIONS))


@pytest.mark.parametrize("dtype, count", [(f32, 3), (f64, 1)], ids=["float32", "one-matrix"])
def test_chain_matmul_writes_out_in_calls_the_mode_leaves_to_torch(dtype, count):
    """A chain_matmul the mode does not take (float32 under the default mode, one matrix) still
    writes out= and returns it: torch's fallback would call chain_matmul without it."""
    matrices = operands([(4, 4)] * count, 17, "cpu", dtype)
    out = torch.full((4, 4), nan, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # chain_matmul is deprecated
        expected = torch.chain_matmul(*matrices)
        with ozaki.enable():
            result = torch.chain_matmul(*matrices, out=out)
    assert result is out
    assert_bitwise_equal(out, expected)


def test_chain_matmul_writes_out_through_nested_modes():
    """Two modes, the inner one for float32 only: the outer one still finds out= and writes it."""
    a, b = operands([(2, 3), (3, 4)], 18, "cpu")
    out = torch.full((2, 4), nan, dtype=f64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ozaki.enable(**OPTIONS), ozaki.enable(dtypes=(f32,)):
            result = torch.chain_matmul(a, b, out=out)
    assert result is out
    assert_bitwise_equal(out, ozaki.gemm(a, b, **OPTIONS))


def test_three_matrices_associate_as_torch_does():
    """Three matrices of equal costs either way go (AB)C, as torch's multi_dot takes them: with
    [inf] [1e-200] [1e-200] that is inf, where A(BC) would be inf * 0 = NaN."""
    A = torch.tensor([[math.inf]], dtype=f64)
    B = torch.tensor([[1e-200]], dtype=f64)
    expected = torch.linalg.multi_dot([A, B, B])
    with ozaki.enable():
        result = torch.linalg.multi_dot([A, B, B])
    assert result.item() == expected.item() == math.inf
    a, b, c = operands([(5, 5), (5, 5), (5, 5)], 19, "cpu")
    with ozaki.enable(**OPTIONS):
        assert_bitwise_equal(torch.linalg.multi_dot([a, b, c]),
                             ozaki.gemm(ozaki.gemm(a, b, **OPTIONS), c, **OPTIONS))


@pytest.mark.parametrize("kwargs", [{"beta": np.False_}, {"alpha": np.True_, "beta": 0},
                                    {"alpha": np.complex64(2), "beta": np.float32(0)}],
                         ids=["beta-false", "alpha-true", "alpha-complex"])
def test_numpy_scalars_as_torch_reads_them(kwargs):
    """NumPy's bool and complex scalars as alpha and beta, which torch takes (beta False ignores
    the NaN of input): the mode's product with the Python numbers they stand for."""
    c = torch.full((3, 5), nan, dtype=f64)
    a, b = operands([(3, 4), (4, 5)], 20, "cpu")
    python = {key: value.item() if isinstance(value, np.generic) else value
              for key, value in kwargs.items()}
    assert not torch.addmm(c, a, b, **kwargs).isnan().any()
    with ozaki.enable():
        result = torch.addmm(c, a, b, **kwargs)
        assert_bitwise_equal(result, torch.addmm(c, a, b, **python))


@pytest.mark.parametrize("leaf", [True, False], ids=["leaf", "non-leaf"])
def test_out_that_requires_grad_is_torchs_error(leaf):
    """out= that requires grad in grad mode: torch's own refusal, under the mode as without."""
    w = torch.zeros(3, 5, dtype=f64, requires_grad=True)
    out = w if leaf else w * 1
    a, b = operands([(3, 4), (4, 5)], 21, "cpu")
    with ozaki.enable(), pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        torch.mm(a, b, out=out)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"dtypes": (torch.int32,)}, ValueError,
     r"ozaki.enable: dtypes may hold torch.float64, torch.float32, torch.complex128, "
     r"torch.complex64; got torch.int32"),
    ({"dtypes": ()}, TypeError, r"ozaki.enable: dtypes must be a non-empty tuple of dtypes"),
    ({"dtypes": "float64"}, TypeError, r"ozaki.enable: dtypes must be a non-empty tuple"),
    ({"slices": 0}, ValueError, r"ozaki.enable: slices must be between 1 and 40, got 0"),
    ({"backend": "x"}, ValueError, r"ozaki.enable: backend must be one of 'auto', 'fp16', "
                                   r"'int8', 'crt', got 'x'"),
    ({"moduli": 4, "slices": 2}, ValueError, r"ozaki.enable: moduli \(scheme II\) cannot be "
                                             r"combined with slices"),
], ids=["int32", "empty", "string", "slices-0", "backend", "moduli-and-slices"])
def test_enable_argument_errors(kwargs, error, message):
    """Bad dtypes and options are rejected when the mode is made, naming ozaki.enable."""
    with pytest.raises(error, match=message):
        ozaki.enable(**kwargs)


def test_enable_accepts_one_dtype_and_complex_dtypes():
    """A single dtype stands for a one-element tuple; complex dtypes are taken too."""
    assert ozaki.enable(f32).dtypes == (f32,)
    assert ozaki.enable(dtypes=[torch.complex128, f64]).dtypes == (torch.complex128, f64)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_complex_dtypes_go_through_ozaki(device):
    """A complex128 mode sends complex products through ozaki.matmul."""
    a_re, a_im, b_re, b_im = operands([(4, 7), (4, 7), (7, 3), (7, 3)], 10, device)
    a, b = torch.complex(a_re, a_im), torch.complex(b_re, b_im)
    with ozaki.enable(torch.complex128, rounding="nearest"):
        result = a @ b
    expected = ozaki.matmul(a, b, rounding="nearest")
    assert_bitwise_equal(torch.view_as_real(result), torch.view_as_real(expected))


def test_repr_names_dtypes_and_options():
    """repr(mode) shows the dtypes and every option."""
    text = repr(ozaki.enable(dtypes=(f64, f32), backend="int8", slices=4, rounding="nearest"))
    assert text == ("ozaki.enable(dtypes=(torch.float64, torch.float32,), backend='int8', "
                    "slices=4, fast=None, moduli=None, rounding='nearest')")
    assert repr(ozaki.enable()) == ("ozaki.enable(dtypes=(torch.float64,), backend='auto', "
                                    "slices=None, fast=None, moduli=None, rounding=None)")
