"""ozaki.tensordot and ozaki.einsum: torch's tensor contractions on ozaki products (docs/torch.md,
"Contractions").

Each contraction of two operands runs as one ozaki product: the operands are viewed (permuted,
diagonals taken, broadcast) and reshaped into a (batch, rows, inner) and a (batch, inner, columns)
operand, so every entry of the result is one dot product over all its summed labels, rounded once
with ozaki's accuracy and bits. A label summed in one operand only (as i in "ij,j->") is summed in
the same dot product, the other operand repeated along it. einsum contracts its operands from left
to right; one operand alone is summed against ones.
"""

import math
import numbers
import string

import torch

from .blas import copy_out
from .gemm_op import REAL_OF, run_gemm
from .operands import at_least, check_alike, check_device, check_tensor
from .options import Options


def _check_operands(name, arguments):
    """arguments: (argument name, tensor) pairs; all of one dtype ozaki takes, on one device."""
    first_name, first = arguments[0]
    check_tensor(name, first_name, first, REAL_OF, at_least(0))
    for arg, t in arguments[1:]:
        check_tensor(name, arg, t, REAL_OF, at_least(0))
        check_alike(name, (first_name, arg), first, t)
    check_device(name, first.device)


def _product(a, b, options):
    """a (batch, m, k) @ b (batch, k, n) by one ozaki product (2-D when the batch is one)."""
    if a.shape[0] == 1:
        return run_gemm(a[0], b[0], None, 1, 0, options).unsqueeze(0)
    return run_gemm(a, b, None, 1, 0, options)


def _dimension(name, arg, d, rank):
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or not -rank <= d < rank:
        raise ValueError(f"{name}: {arg} holds {d!r}, not a dimension of a {rank}-D operand")
    return int(d) % rank


def tensordot_dims(name, a, b, dims):
    """(a's contracted dimensions, b's) from tensordot's dims."""
    if isinstance(dims, torch.Tensor):  # as torch reads it: one element an int, two rows a pair
        if dims.numel() == 1:
            dims = int(dims.item())
        elif dims.numel() > 1 and dims.dim() == 2 and dims.shape[0] == 2:
            dims = dims.tolist()
        else:
            raise TypeError(f"{name}: dims as a tensor must hold one element or two rows of "
                            f"dimensions, got one of shape {tuple(dims.shape)}")
    if isinstance(dims, numbers.Integral) and not isinstance(dims, bool):
        if not 0 <= dims <= min(a.dim(), b.dim()):
            raise ValueError(f"{name}: dims = {dims} must be between 0 and the smaller rank, "
                             f"{min(a.dim(), b.dim())} (a is {a.dim()}-D, b is {b.dim()}-D)")
        dims_a, dims_b = list(range(a.dim() - dims, a.dim())), list(range(dims))
    else:
        if not isinstance(dims, (list, tuple)) or len(dims) != 2:
            raise TypeError(f"{name}: dims must be an int or a pair of dimension lists, got "
                            f"{dims!r}")
        if not all(isinstance(d, (list, tuple)) for d in dims):
            raise TypeError(f"{name}: dims as a pair must hold two lists of dimensions, got "
                            f"{dims!r}")
        pair = [list(d) for d in dims]
        dims_a = [_dimension(name, "dims[0]", d, a.dim()) for d in pair[0]]
        dims_b = [_dimension(name, "dims[1]", d, b.dim()) for d in pair[1]]
        if len(dims_a) != len(dims_b) or len(set(dims_a)) != len(dims_a) \
                or len(set(dims_b)) != len(dims_b):
            raise ValueError(f"{name}: dims = {dims!r} must pair distinct dimensions of a with as "
                             "many distinct dimensions of b")
    # every pair, of either form of dims: sizes whose products alone agree would reshape into
    # entries that do not belong together
    for da, db in zip(dims_a, dims_b):
        if a.shape[da] != b.shape[db]:
            raise ValueError(f"{name}: dimension {da} of a (size {a.shape[da]}) and dimension {db}"
                             f" of b (size {b.shape[db]}) are contracted but differ in size")
    return dims_a, dims_b


def tensordot(a, b, dims=2, *, out=None, backend="auto", slices=None, fast=None, moduli=None,
              rounding=None):
    """torch.tensordot(a, b, dims) as one ozaki product: a's free dimensions are the rows, b's the
    columns, and the contracted dimensions (dims: an int, the last dims of a with the first of b,
    or a pair of dimension lists) the inner dimension. The options are ozaki.dgemm's; out as in
    torch."""
    name = "ozaki.tensordot"
    _check_operands(name, [("a", a), ("b", b)])
    options = Options.checked(name, backend, slices, fast, moduli, rounding)
    dims_a, dims_b = tensordot_dims(name, a, b, dims)
    free_a = [d for d in range(a.dim()) if d not in dims_a]
    free_b = [d for d in range(b.dim()) if d not in dims_b]
    sizes_a, sizes_b = [a.shape[d] for d in free_a], [b.shape[d] for d in free_b]
    inner = math.prod([a.shape[d] for d in dims_a])
    rows = a.permute([*free_a, *dims_a]).reshape(1, math.prod(sizes_a), inner)
    columns = b.permute([*dims_b, *free_b]).reshape(1, inner, math.prod(sizes_b))
    result = _product(rows, columns, options)[0].reshape([*sizes_a, *sizes_b])
    return _written(name, result, out)


def _written(name, result, out):
    return result if out is None else copy_out(name, result, out)


# ---- einsum --------------------------------------------------------------------------------------

def _labels(name, term, rank, ellipsis_rank):
    """The labels of one operand's subscripts: letters, and for "..." the ellipsis labels (ints,
    numbered so that they align from the right across operands)."""
    if term.count("...") > 1 or "." in term.replace("...", ""):
        raise ValueError(f"{name}: subscripts {term!r} hold a stray '.' (one '...' at most)")
    head, dots, tail = term.partition("...")
    for letter in head + tail:
        if letter not in string.ascii_letters:
            raise ValueError(f"{name}: subscript {letter!r} in {term!r} is not a letter")
    letters = len(head) + len(tail)
    if (rank < letters) if dots else (rank != letters):
        raise ValueError(f"{name}: subscripts {term!r} do not fit an operand of {rank} dimensions")
    spread = rank - letters
    return [*head, *range(ellipsis_rank - spread, ellipsis_rank), *tail]


def parse_equation(name, equation, operands):
    """(each operand's labels, the output's labels) of an einsum equation."""
    if not isinstance(equation, str):
        raise TypeError(f"{name}: equation must be a str, got {type(equation).__name__}")
    equation = equation.replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"{name}: equation {equation!r} has {len(terms)} operand subscripts for "
                         f"{len(operands)} operands")
    spreads = [t.dim() - len(term.replace("...", "")) if "..." in term else 0
               for term, t in zip(terms, operands)]
    ellipsis_rank = max(spreads, default=0)
    labels = [_labels(name, term, t.dim(), ellipsis_rank) for term, t in zip(terms, operands)]
    if arrow:
        output_rank = len(output.replace("...", "")) + (ellipsis_rank if "..." in output else 0)
        out = _labels(name, output, output_rank, ellipsis_rank)
        if len(set(out)) != len(out):
            raise ValueError(f"{name}: output subscripts {output!r} repeat a label")
        known = {label for term in labels for label in term}
        for label in out:
            if label not in known:
                raise ValueError(f"{name}: output subscript {label!r} is in no operand")
    else:
        counts = {}
        for term in labels:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        letters = sorted([label for label, n in counts.items()
                          if isinstance(label, str) and n == 1])
        out = [*range(ellipsis_rank), *letters]
    return labels, out


def check_sizes(name, equation, labels, operands):
    """Sizes torch takes: a label repeated in one operand (a diagonal) over dimensions of one size,
    and each label's sizes across the operands equal or 1 (broadcast)."""
    terms = equation.replace(" ", "").partition("->")[0].split(",")
    sizes = {}
    for i, (t, term_labels) in enumerate(zip(operands, labels)):
        own = {}
        for label, size in zip(term_labels, t.shape):
            if own.setdefault(label, size) != size:
                raise ValueError(f"{name}: subscript {label!r} is repeated in operands[{i}]'s "
                                 f"{terms[i]!r} over dimensions of sizes {own[label]} and {size}, "
                                 "which must be equal")
        for label, size in own.items():
            known = sizes.setdefault(label, size)
            if known == 1:
                sizes[label] = size
            elif size not in (1, known):
                what = (f"label {label!r} stands for" if isinstance(label, str)
                        else f"the dimension {label} that '...' stands for has")
                raise ValueError(f"{name}: {what} sizes {known} and {size}, which do not "
                                 "broadcast")


def _unique(t, labels):
    """t with each label once: a repeated label's diagonal (a view) in its place."""
    labels = list(labels)
    while len(set(labels)) != len(labels):
        label = [l for l in labels if labels.count(l) > 1][0]
        first = labels.index(label)
        second = labels.index(label, first + 1)
        t = torch.diagonal(t, dim1=first, dim2=second)  # the diagonal becomes the last dimension
        labels = [l for i, l in enumerate(labels) if i not in (first, second)] + [label]
    return t, labels


def _arranged(t, labels, order, sizes):
    """t viewed with dimensions in `order` (labels it lacks added and broadcast to their size)."""
    missing = [label for label in order if label not in labels]
    t = t.reshape([*t.shape, *([1] * len(missing))])
    labels = list(labels) + missing
    t = t.permute([labels.index(label) for label in order])
    return t.expand([sizes[label] for label in order])


def _contract(a, la, b, lb, keep, options):
    """(a·b summed over the labels not in keep, its labels): one ozaki product."""
    a, la = _unique(a, la)
    b, lb = _unique(b, lb)
    sizes = {}  # each label's size, size-1 dimensions broadcast (check_sizes: they do)
    for t, labels in ((a, la), (b, lb)):
        for label, size in zip(labels, t.shape):
            if sizes.setdefault(label, size) == 1:
                sizes[label] = size
    batch = [l for l in la if l in lb and l in keep]
    free_a = [l for l in la if l not in lb and l in keep]
    free_b = [l for l in lb if l not in la and l in keep]
    summed = [l for l in la if l not in keep] + [l for l in lb if l not in keep and l not in la]
    rows = _arranged(a, la, batch + free_a + summed, sizes)
    columns = _arranged(b, lb, batch + summed + free_b, sizes)
    count, m, k, n = [math.prod([sizes[l] for l in group])
                      for group in (batch, free_a, summed, free_b)]
    result = _product(rows.reshape(count, m, k), columns.reshape(count, k, n), options)
    labels = batch + free_a + free_b
    return result.reshape([sizes[l] for l in labels]), labels


def _sublists(name, arguments):
    """einsum's sublist form (t0, s0, t1, s1, ..., [out]) as an equation and operands."""
    def term(sublist):
        letters = []
        for item in sublist:
            if item is Ellipsis:
                letters.append("...")
            elif isinstance(item, numbers.Integral) and 0 <= item < 52:  # torch's: A-Z, then a-z
                letters.append((string.ascii_uppercase + string.ascii_lowercase)[item])
            else:
                raise ValueError(f"{name}: sublist entries must be ints in [0, 52) or ..., got "
                                 f"{item!r}")
        return "".join(letters)
    # the sublists: every second argument, and the output's last where there is one
    sublists = [i for i in range(1, len(arguments)) if i % 2 or i == len(arguments) - 1]
    for index in sublists:  # any sequence of subscripts torch takes (a list, a range, an array)
        if isinstance(arguments[index], (torch.Tensor, str, bytes)) or not hasattr(
                arguments[index], "__iter__"):
            raise TypeError(f"{name}: equation must be a str (or the sublist form: operand, "
                            f"sublist, operand, sublist, ...), and argument {index} of the sublist "
                            f"form must be a sequence of subscripts, got "
                            f"{type(arguments[index]).__name__}")
    operands, terms = list(arguments[0::2]), [term(s) for s in arguments[1::2]]
    if len(arguments) % 2:  # the output sublist
        operands.pop()
        return ",".join(terms) + "->" + term(arguments[-1]), operands
    return ",".join(terms), operands


def einsum_arguments(name, arguments):
    """(equation, operands) of torch.einsum's calling forms: (equation, *operands), (equation,
    [operands]) and the sublist form."""
    if not arguments:
        raise TypeError(f"{name}: an equation and operands are needed")
    equation = arguments[0]
    if isinstance(equation, bytes):  # torch takes an ASCII equation as bytes too
        try:
            equation = equation.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"{name}: equation must be ASCII, got {equation!r}") from None
    if isinstance(equation, str):
        operands = arguments[1:]
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        return equation, list(operands)
    if not isinstance(equation, torch.Tensor):
        raise TypeError(f"{name}: equation must be a str (or the sublist form: operand, sublist, "
                        f"operand, sublist, ...), got {type(equation).__name__} {equation!r}")
    return _sublists(name, arguments)


def einsum(*arguments, backend="auto", slices=None, fast=None, moduli=None, rounding=None):
    """torch.einsum(equation, *operands) on ozaki products: the operands are contracted from left to
    right, each contraction one ozaki product whose entries sum over every label summed there
    (labels in neither the output nor a later operand). Broadcasting, "..." and the implicit output
    (the labels seen once, in alphabetical order, after the ellipsis) are torch's; so are the
    calling forms: (equation, *operands), (equation, [operands]) and the sublist form. The options
    are ozaki.dgemm's."""
    name = "ozaki.einsum"
    equation, operands = einsum_arguments(name, arguments)
    if not operands:
        raise ValueError(f"{name}: no operands")
    _check_operands(name, [(f"operands[{i}]", t) for i, t in enumerate(operands)])
    options = Options.checked(name, backend, slices, fast, moduli, rounding)
    labels, out = parse_equation(name, equation, operands)
    check_sizes(name, equation, labels, operands)
    t, lt = operands[0], labels[0]
    if len(operands) == 1 and t.is_complex():
        # a sum has no complex products: each part summed alone, so that an Inf in one part
        # leaves the other finite (as against complex ones, whose 0 * Inf would make it NaN)
        keywords = dict(backend=backend, slices=slices, fast=fast, moduli=moduli,
                        rounding=rounding)
        return torch.complex(einsum(equation, t.real, **keywords),
                             einsum(equation, t.imag, **keywords))
    if len(operands) == 1:  # summed against ones over the labels the output lacks
        summed = [l for l in dict.fromkeys(lt) if l not in out]
        ones = t.new_ones([dict(zip(lt, t.shape))[l] for l in summed])
        operands, labels = [t, ones], [lt, summed]
    for i in range(1, len(operands)):
        later = {l for term in labels[i + 1:] for l in term}
        keep = set(out) | later
        t, lt = _contract(t, lt, operands[i], labels[i], keep, options)
    return t.permute([lt.index(label) for label in out]).contiguous()
