"""ozaki.einsum and ozaki.tensordot: torch's shapes and calling forms, every entry one dot product
rounded once (checked against exact references under rounding="nearest"), the bits of the
ozaki product they reshape to, gradients, and errors (ozaki/contractions.py, docs/torch.md)."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

import ozaki
from ozaki import accuracy
from helpers import assert_bitwise_equal, cpu_and_cuda, phi_tensor, seeded

f64, f32 = torch.float64, torch.float32


def operands(shapes, seed, device="cpu", dtype=f64):
    g = seeded(seed)
    return [phi_tensor(tuple(s), dtype, g).to(device) for s in shapes]


def exact_einsum(equation, *tensors):
    """The exact value of every entry of an explicit einsum (letters only), as Fractions, by
    summing over every assignment of the summed labels."""
    inputs, output = equation.split("->")
    terms = inputs.split(",")
    sizes = {}
    for term, t in zip(terms, tensors):
        for label, size in zip(term, t.shape):
            sizes[label] = max(sizes.get(label, 1), size)
    values = [t.cpu().double().tolist() for t in tensors]
    summed = sorted({l for term in terms for l in term} - set(output))

    def entry(value, shape, term, assignment):
        for label, size in zip(term, shape):
            value = value[assignment[label] if size != 1 else 0]
        return Fraction(value)

    result = {}
    for out_index in itertools.product(*(range(sizes[l]) for l in output)):
        total = Fraction(0)
        for summed_index in itertools.product(*(range(sizes[l]) for l in summed)):
            assignment = dict(zip(output, out_index)) | dict(zip(summed, summed_index))
            total += math.prod(entry(v, t.shape, term, assignment)
                               for v, t, term in zip(values, tensors, terms))
        result[out_index] = total
    return result


def assert_correctly_rounded(result, exact):
    """Every entry of result is its exact value rounded once to result's dtype."""
    for index, value in exact.items():
        expected = accuracy.round_exact([[value]], result.dtype).item()
        assert result[index].item() == expected, (index, result[index].item(), expected)


EQUATIONS = [
    ("ij,jk->ik", [(4, 5), (5, 3)]),
    ("bij,bjk->bik", [(2, 4, 5), (2, 5, 3)]),
    ("ij,j->", [(4, 5), (5,)]),           # i summed in the first operand only
    ("ijk,kj->i", [(2, 3, 4), (4, 3)]),   # two labels contracted at once
    ("ij,ij->i", [(3, 4), (3, 4)]),       # a batch label and a contracted one
    ("bij,jk->bik", [(2, 3, 4), (4, 5)]),
    ("iij,jk->ik", [(3, 3, 4), (4, 2)]),  # a diagonal
    ("ij,kl->ijkl", [(2, 3), (4, 5)]),    # an outer product
    ("bij,bjk->ik", [(2, 3, 4), (2, 4, 2)]),  # the batch summed too
    ("ij,j->i", [(3, 4), (1,)]),          # a size-1 dimension broadcast
    ("ij->", [(3, 4)]),                   # one operand, summed
    ("ii->", [(4, 4)]),                   # a trace
]


@pytest.mark.parametrize("equation, shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
@pytest.mark.parametrize("dtype", [f64, f32])
def test_einsum_entries_are_one_dot_product_rounded_once(equation, shapes, dtype):
    """Under rounding="nearest" every entry of ozaki.einsum is its exact sum over all the labels
    summed there, correctly rounded (one dot product per entry, even where a label is summed in
    one operand only), in torch.einsum's shape."""
    tensors = operands(shapes, 1, dtype=dtype)
    result = ozaki.einsum(equation, *tensors, rounding="nearest")
    assert result.shape == torch.einsum(equation, *tensors).shape and result.dtype == dtype
    assert_correctly_rounded(result, exact_einsum(equation, *tensors))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [f64, f32, torch.complex128])
def test_einsum_gives_the_bits_of_the_product_it_reshapes_to(device, dtype):
    """A batched contraction equals ozaki.matmul of the permuted operands bit for bit, with the
    options passed on."""
    x, y = operands([(3, 2, 7), (2, 7, 5)], 2, device, dtype)
    result = ozaki.einsum("ibk,bkj->bij", x, y, backend="int8")
    assert_bitwise_equal(result, ozaki.matmul(x.transpose(0, 1), y, backend="int8"))


def test_einsum_calling_forms_and_implicit_output():
    """The list form, the sublist form, "..." and the implicit output (labels seen once, in
    alphabetical order, uppercase first) give torch.einsum's shapes and the same bits."""
    a, b, x, y = operands([(3, 4), (4, 5), (2, 1, 3, 4), (6, 4, 2)], 3)
    reference = ozaki.einsum("ij,jk->ik", a, b)
    assert_bitwise_equal(ozaki.einsum("ij,jk", a, b), reference)
    assert_bitwise_equal(ozaki.einsum("ij,jk->ik", [a, b]), reference)
    assert_bitwise_equal(ozaki.einsum(a, [0, 1], b, [1, 2], [0, 2]), reference)
    assert_bitwise_equal(ozaki.einsum("Bk,kA", a, b), reference.T.contiguous())
    assert ozaki.einsum("...ij,...jk->...ik", x, y).shape == (2, 6, 3, 2)
    assert ozaki.einsum("...ij,...jk", x, y).shape == torch.einsum("...ij,...jk", x, y).shape
    assert_bitwise_equal(ozaki.einsum(b"ij,jk", a, b), reference)  # torch takes bytes too
    # sublists of any sequence torch takes: ranges, NumPy arrays, tuples
    assert_bitwise_equal(ozaki.einsum(a, range(2), b, np.array([1, 2]), (0, 2)), reference)


def test_einsum_sublists_read_integers_as_torch_does():
    """Sublist integers 0-25 are the labels A-Z and 26-51 a-z, as torch reads them: without an
    output list the implicit output orders them so (uppercase first), here the product's
    transpose, of torch.einsum's shape."""
    x, y = operands([(2, 3), (3, 4)], 6)
    expected = torch.einsum(x, [26, 1], y, [1, 0])
    result = ozaki.einsum(x, [26, 1], y, [1, 0])
    assert result.shape == expected.shape == (4, 2)
    assert_bitwise_equal(result, ozaki.dgemm(x, y).T.contiguous())


@pytest.mark.parametrize("equation", ["ij->i", "ij->j", "ij->", "ii", "ii->i"])
def test_complex_sums_keep_an_inf_to_its_own_part(equation):
    """One complex operand summed (rows, all, the trace): each part is its own sum, so an Inf in
    one part leaves the other finite, where a sum against complex ones made it NaN (Im(z 1) =
    Re z 0 + Im z 1); the finite parts are the real sums' bits."""
    z = torch.complex(*operands([(3, 3), (3, 3)], 8))
    z[0, 0] = complex(math.inf, 1.0)
    z[1, 1] = complex(2.0, -math.inf)
    expected = torch.einsum(equation, z)
    result = ozaki.einsum(equation, z)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    for part in (torch.real, torch.imag):
        assert torch.equal(part(result).isnan(), part(expected).isnan())
        assert torch.equal(part(result).isinf(), part(expected).isinf())
        assert_bitwise_equal(part(result), ozaki.einsum(equation, part(z).contiguous()))


def test_einsum_of_three_operands_contracts_from_left_to_right():
    """Each contraction is one product rounded once: (a b) c, as two ozaki products."""
    a, b, c = operands([(2, 3), (3, 4), (4, 5)], 4)
    assert_bitwise_equal(ozaki.einsum("ab,bc,cd->ad", a, b, c),
                         ozaki.dgemm(ozaki.dgemm(a, b), c))


def test_einsum_gradients():
    """ozaki.einsum is differentiable (views and ozaki products): gradcheck in float64."""
    a, b = operands([(3, 4), (4, 2)], 5)
    a.requires_grad_()
    b.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: ozaki.einsum("ij,jk->ki", a, b), (a, b))


def test_contractions_compile_to_eager_bits():
    """torch.compile(fullgraph=True) of ozaki.einsum, ozaki.tensordot and torch.einsum under
    ozaki.enable gives eager's bits."""
    torch._dynamo.reset()
    x, y = operands([(2, 3, 4), (2, 4, 5)], 10)

    def enabled(x, y):
        with ozaki.enable():
            return torch.einsum("bij,bjk->bik", x, y)
    calls = [lambda x, y: ozaki.einsum("bij,bjk->bik", x, y) * 2.0,
             lambda x, y: ozaki.tensordot(x, y, ([0, 2], [0, 1])), enabled]
    for call in calls:
        compiled = torch.compile(call, fullgraph=True, dynamic=False)
        assert_bitwise_equal(compiled(x, y), call(x, y))
    torch._dynamo.reset()


@pytest.mark.parametrize("dims", [0, 1, 2, ([0, 2], [1, 0]), torch.tensor([[2], [0]]),
                                  torch.tensor([2]), torch.tensor(1), torch.tensor([2.0])],
                         ids=["0", "1", "2", "pairs", "tensor", "one-element-tensor",
                              "0-d-tensor", "one-float-tensor"])
def test_tensordot_matches_torch_and_is_one_product(dims):
    """ozaki.tensordot has torch.tensordot's shape and equals ozaki.dgemm of the operands
    reshaped to (free a, contracted) and (contracted, free b), bit for bit."""
    x = operands([(3, 4, 2)], 6)[0]
    y_shapes = {"0": (5,), "1": (2, 5), "2": (4, 2, 5), "pairs": (2, 3, 5), "tensor": (2, 5)}
    if isinstance(dims, torch.Tensor) and dims.numel() == 1:
        key = int(dims.item())  # torch reads a one-element tensor as that int
    else:
        key = dims if isinstance(dims, int) else ("tensor" if isinstance(dims, torch.Tensor)
                                                  else "pairs")
    y = operands([y_shapes[str(key)]], 7)[0]
    result = ozaki.tensordot(x, y, dims, rounding="nearest")
    native = torch.tensordot(x, y, dims)
    assert result.shape == native.shape
    torch.testing.assert_close(result, native, rtol=1e-13, atol=1e-13)


def test_tensordot_entries_are_correctly_rounded():
    x, y = operands([(3, 4, 2), (4, 2, 5)], 8)
    assert_correctly_rounded(ozaki.tensordot(x, y, 2, rounding="nearest"),
                             exact_einsum("ijk,jkl->il", x, y))


def test_tensordot_of_an_int_dims_checks_every_contracted_size():
    """dims = 2 on (2, 3, 4) and (4, 3, 5): the contracted sizes (3, 4) and (4, 3) differ pair by
    pair though their products agree, which a reshape alone would take (pairing entries that do
    not belong together). ozaki.tensordot refuses it by name; under the drop-in mode torch raises
    its own error, and takes its own rule for a contracted size of 1 in one operand."""
    a, b = operands([(2, 3, 4), (4, 3, 5)], 9)
    with pytest.raises(ValueError, match=r"ozaki.tensordot: dimension 1 of a \(size 3\) and "
                                         r"dimension 0 of b \(size 4\) are contracted"):
        ozaki.tensordot(a, b, 2)
    with ozaki.enable(), pytest.raises(RuntimeError, match="contracted dimensions need to match"):
        torch.tensordot(a, b, dims=2)
    x, y = operands([(6, 2), (1, 12)], 10)
    expected = torch.tensordot(x, y, dims=1)
    with ozaki.enable():
        assert_bitwise_equal(torch.tensordot(x, y, dims=1), expected)


@pytest.mark.parametrize("call, error, message", [
    (lambda a, b: ozaki.tensordot(a, b, 3), ValueError,
     r"ozaki.tensordot: dims = 3 must be between 0 and the smaller rank, 2"),
    (lambda a, b: ozaki.tensordot(a, b, ([0], [0])), ValueError,
     r"ozaki.tensordot: dimension 0 of a \(size 3\) and dimension 0 of b \(size 4\) are "
     r"contracted but differ in size"),
    (lambda a, b: ozaki.tensordot(a, b, "x"), TypeError,
     r"ozaki.tensordot: dims must be an int or a pair of dimension lists, got 'x'"),
    (lambda a, b: ozaki.tensordot(a, b, (1, 0)), TypeError,
     r"ozaki.tensordot: dims as a pair must hold two lists of dimensions, got \(1, 0\)"),
    (lambda a, b: ozaki.tensordot(a, b, torch.tensor([1, 0])), TypeError,
     r"ozaki.tensordot: dims as a tensor must hold one element or two rows of dimensions, got "
     r"one of shape \(2,\)"),
    (lambda a, b: ozaki.tensordot(a, b, torch.zeros(2, 0, dtype=torch.long)), TypeError,
     r"ozaki.tensordot: dims as a tensor must hold one element or two rows of dimensions, got "
     r"one of shape \(2, 0\)"),
    (lambda a, b: ozaki.tensordot(a, b.int()), TypeError, r"ozaki.tensordot: b must be"),
    (lambda a, b: ozaki.einsum("ij,jk->ik", a), ValueError,
     r"ozaki.einsum: equation 'ij,jk->ik' has 2 operand subscripts for 1 operands"),
    (lambda a, b: ozaki.einsum("ij,jk->iz", a, b), ValueError,
     r"ozaki.einsum: output subscript 'z' is in no operand"),
    (lambda a, b: ozaki.einsum("ijk,jk->i", a, b), ValueError,
     r"ozaki.einsum: subscripts 'ijk' do not fit an operand of 2 dimensions"),
    (lambda a, b: ozaki.einsum("i1,1k->ik", a, b), ValueError,
     r"ozaki.einsum: subscript '1' in 'i1' is not a letter"),
    (lambda a, b: ozaki.einsum("ij,ik->jk", a, b), ValueError,
     r"ozaki.einsum: label 'i' stands for sizes 3 and 4, which do not broadcast"),
    (lambda a, b: ozaki.einsum("ij,jk->ik", a, b.float()), TypeError,
     r"ozaki.einsum: operands\[0\] and operands\[1\] must have the same dtype"),
    (lambda a, b: ozaki.einsum("ii->", a[:1]), ValueError,
     r"ozaki.einsum: subscript 'i' is repeated in operands\[0\]'s 'ii' over dimensions of sizes "
     r"1 and 4, which must be equal"),
    (lambda a, b: ozaki.einsum("ij,ii->j", a, a), ValueError,
     r"ozaki.einsum: subscript 'i' is repeated in operands\[1\]'s 'ii' over dimensions of sizes "
     r"3 and 4, which must be equal"),
    (lambda a, b: ozaki.einsum(a, b), TypeError,
     r"ozaki.einsum: equation must be a str \(or the sublist form: operand, sublist, operand, "
     r"sublist, ...\), and argument 1 of the sublist form must be a sequence of subscripts, "
     r"got Tensor"),
    (lambda a, b: ozaki.einsum("é".encode() + b"ij,jk", a, b), ValueError,
     r"ozaki.einsum: equation must be ASCII, got b'\\xc3\\xa9ij,jk'"),
    (lambda a, b: ozaki.einsum(3, a), TypeError,
     r"ozaki.einsum: equation must be a str \(or the sublist form: operand, sublist, operand, "
     r"sublist, ...\), got int 3"),
    (lambda a, b: ozaki.einsum("...ij,...jk", a.expand(2, 3, 4), b.expand(3, 4, 5)), ValueError,
     r"ozaki.einsum: the dimension 0 that '...' stands for has sizes 2 and 3, which do not "
     r"broadcast"),
], ids=["dims-rank", "dims-size", "dims-type", "dims-two-ints", "dims-tensor-of-two-ints",
        "dims-empty-tensor", "b-int", "operand-count", "output-label", "subscripts-rank",
        "subscript-digit", "sizes", "dtypes", "diagonal-sizes", "diagonal-against-other-operand",
        "sublist-not-a-list", "equation-not-ascii", "equation-type", "ellipsis-sizes"])
def test_contraction_errors_name_the_argument(call, error, message):
    a, b = operands([(3, 4), (4, 5)], 9)
    with pytest.raises(error, match=message):
        call(a, b)
