"""torch.library registrations (schemas in csrc/ozaki.cpp): the Python kernel and the autograd
formula of ozaki::gemm, and a fake kernel for every ozaki operator, so torch.compile,
torch.library.opcheck and FakeTensor tracing see shapes and dtypes without running anything.
Imported by ozaki/__init__.py."""

import math
import threading

import torch
import torch.autograd.forward_ad as fwAD
from torch._C._functorch import TransformType

from . import _ops  # noqa: F401  (loads the schemas)
from . import crt
from .gemm_op import check_gemm, check_scalar, gemm_kernel
from .operands import InnerDimensionError

_naming = threading.local()  # .gradient: within _gradient, which names the gradient itself


def _gemm_kernel(*arguments):
    """gemm_kernel, whose inner-dimension limits raised in a backward pass that _gradient does not
    wrap (a compiled backward graph calls the operator itself) tell the gradients' inner
    dimensions, which are not the forward's k."""
    try:
        return gemm_kernel(*arguments)
    except InnerDimensionError as error:
        node = torch._C._current_autograd_node()
        if node is None or getattr(_naming, "gradient", False):
            raise
        raise InnerDimensionError(
            f"{error} (raised in the backward pass {node.name()}, where the gradient of A in "
            "A @ B is a product of inner dimension n and that of B one of inner dimension m)"
        ) from None


torch.library.impl("ozaki::gemm", ("CPU", "CUDA"), _gemm_kernel)


# ---- autograd ----------------------------------------------------------------------------------
# D = alpha A B + beta C: dA = conj(alpha) G B^H, dB = conj(alpha) A^H G, dC = conj(beta) G summed
# over C's broadcast dimensions. The two products run through ozaki::gemm with the forward's
# options, so gradients get ozaki's accuracy and bits (and double backward works).

def _setup_context(ctx, inputs, output):
    A, B, C, alpha, beta, *options = inputs
    ctx.save_for_backward(A if ctx.needs_input_grad[1] else None,
                          B if ctx.needs_input_grad[0] else None)
    # the scalars as the forward took them (rounded to float32 with float32 operands)
    alpha = check_scalar("ozaki::gemm", "alpha", alpha, A.dtype)
    beta = check_scalar("ozaki::gemm", "beta", beta, A.dtype)
    ctx.alpha, ctx.beta, ctx.options = alpha, beta, options
    ctx.shapes = (A.shape, B.shape, None if C is None else C.shape)


def _adjoint(x):
    return x.mT.conj() if x.is_complex() else x.mT


def _gradient(name, product, left, right, alpha, options):
    """alpha left @ right by ozaki::gemm with the forward's options; a limit of the inner dimension
    that these options exceed names the gradient, whose inner dimension is not the forward's."""
    within, _naming.gradient = getattr(_naming, "gradient", False), True
    try:
        return gemm_operator(left, right, None, alpha, 0, *options)
    except InnerDimensionError as error:
        raise InnerDimensionError(f"{error} (in the gradient of {name}, {product}, whose inner "
                                  f"dimension is {left.shape[-1]})") from None
    finally:
        _naming.gradient = within


def _backward(ctx, grad):
    A, B = ctx.saved_tensors
    alpha = complex(ctx.alpha).conjugate() if grad.is_complex() else ctx.alpha
    # alpha = 0 gives A and B zero gradients, as torch's addmm gives zeros there, never NaN from
    # their entries: ozaki::gemm with alpha = 0 reads neither operand, and its zeros stay functions
    # of the other operand for a second backward. beta = 0 gives C zeros without a product.
    grads = [None, None, None]
    if ctx.needs_input_grad[0]:
        grads[0] = _gradient("A", "G op(B)^H", grad, _adjoint(B), alpha, ctx.options)
    if ctx.needs_input_grad[1]:
        grads[1] = _gradient("B", "op(A)^H G", _adjoint(A), grad, alpha, ctx.options)
    if ctx.needs_input_grad[2]:
        beta = complex(ctx.beta).conjugate() if grad.is_complex() else ctx.beta
        grads[2] = grad.new_zeros(ctx.shapes[2]) if beta == 0 else \
            (grad if beta == 1 else grad * beta).sum_to_size(ctx.shapes[2])
    return (*grads, *(None,) * 7)


torch.library.register_autograd("ozaki::gemm", _backward, setup_context=_setup_context)


# ---- forward-mode AD and torch.func --------------------------------------------------------------
# The operator's autograd formula above serves backward only: under forward-mode AD (dual tensors)
# or torch.func's transforms, ozaki::gemm runs inside an autograd.Function that has both formulas
# and a vmap rule, so tangents are never dropped and a vmap is one batched product. The tangent of
# alpha A B + beta C is alpha tA B + alpha A tB + beta tC, its products by ozaki::gemm with the
# forward's options.

class _GemmWithTangents(torch.autograd.Function):
    @staticmethod
    def forward(A, B, C, alpha, beta, *options):
        return torch.ops.ozaki.gemm(A, B, C, alpha, beta, *options)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0], inputs[1])

    @staticmethod
    def backward(ctx, grad):
        return _backward(ctx, grad)

    @staticmethod
    def jvp(ctx, tangent_a, tangent_b, tangent_c, *_):
        A, B = ctx.saved_tensors
        tangent = None
        if ctx.alpha != 0 and tangent_a is not None:
            tangent = gemm_operator(tangent_a, B, None, ctx.alpha, 0, *ctx.options)
        if ctx.alpha != 0 and tangent_b is not None:
            tangent = gemm_operator(A, tangent_b, tangent, ctx.alpha, 0 if tangent is None else 1,
                                    *ctx.options)
        if tangent_c is not None and ctx.beta != 0:
            term = tangent_c if ctx.beta == 1 else torch.mul(tangent_c, ctx.beta)
            tangent = term if tangent is None else torch.add(tangent, term)
        shape = (*A.shape[:-1], B.shape[-1])
        if tangent is None:
            return A.new_zeros(shape)
        return tangent.expand(shape).contiguous() if tangent.shape != shape else tangent

    @staticmethod
    def vmap(info, in_dims, A, B, C, alpha, beta, *options):
        """torch.func.vmap (jacfwd, hessian) over the product: the mapped dimension and a batch
        of the operands become one batch of a batched product."""
        size = info.batch_size

        def mapped_first(x, dim):
            return x.expand(size, *x.shape) if dim is None else x.movedim(dim, 0)

        A, B = mapped_first(A, in_dims[0]), mapped_first(B, in_dims[1])
        shape = (*A.shape[1:-1], B.shape[-1])  # one mapped member's result
        count, (m, k), n = size * math.prod(A.shape[1:-2]), A.shape[-2:], B.shape[-1]
        if C is not None:  # each member's C broadcasts to its result (leading ones added)
            if in_dims[2] is None:
                C = C.expand(size, *shape)
            else:
                C = C.movedim(in_dims[2], 0)
                C = C.reshape(size, *(1,) * (len(shape) + 1 - C.dim()), *C.shape[1:])
            C = C.expand(size, *shape).reshape(count, m, n)
        result = _GemmWithTangents.apply(A.reshape(count, m, k), B.reshape(count, k, n), C,
                                         alpha, beta, *options)
        return result.reshape(size, *shape), 0


def _tangents_wanted():
    """Whether a call runs where tangents, torch.func's gradients or its vmap must pass through
    it: a dual level of forward-mode AD entered, or torch.func's grad, jvp or vmap anywhere
    around it (not while torch.compile traces: its graphs hold the operator)."""
    if torch.compiler.is_compiling():
        if fwAD._current_level >= 0:
            # the graph would hold the operator, whose formula serves backward only: the tangents
            # would be dropped (zeros or None). Raised while tracing, this breaks the graph, and
            # the call then runs eagerly with its tangents (fullgraph=True: an error naming it).
            raise NotImplementedError(
                "ozaki: forward-mode AD (dual tensors, torch.func.jvp, jacfwd) through ozaki's "
                "products cannot be compiled: run that part eagerly, or compile without "
                "fullgraph=True (the product then runs eagerly, with its tangents)")
        return False
    if fwAD._current_level >= 0:
        return True
    if torch._C._functorch.peek_interpreter_stack() is None:
        return False
    # any grad, jvp or vmap transform on the stack (jacrev's backward runs under vmap alone)
    return any(interpreter.key() in (TransformType.Grad, TransformType.Jvp, TransformType.Vmap)
               for interpreter in torch._C._functorch.get_interpreter_stack())


def gemm_operator(A, B, C, alpha, beta, *options):
    """torch.ops.ozaki.gemm(A, B, C, alpha, beta, *options), inside _GemmWithTangents where
    tangents or torch.func's gradients must pass through it."""
    if _tangents_wanted():
        return _GemmWithTangents.apply(A, B, C, alpha, beta, *options)
    return torch.ops.ozaki.gemm(A, B, C, alpha, beta, *options)


# ---- fake kernels --------------------------------------------------------------------------------

@torch.library.register_fake("ozaki::gemm")
def _gemm_fake(A, B, C, alpha, beta, backend, slices, fast, moduli, rounding):
    return A.new_empty(check_gemm("ozaki::gemm", A, B, C, alpha, beta)[0])


@torch.library.register_fake("ozaki::row_stats")
def _row_stats_fake(a):
    rows = a.shape[0]
    return (a.new_empty(rows, dtype=torch.int32), a.new_empty(rows, dtype=torch.int32),
            a.new_empty(rows, dtype=torch.bool))


@torch.library.register_fake("ozaki::split_rows")
def _split_rows_fake(a, tau, slices):
    return a.new_empty((slices, *a.shape), dtype=torch.float16)


def _product_shape(a, bt):
    return (*a.shape[:-1], bt.shape[-2])


@torch.library.register_fake("ozaki::magnitude_product")
def _magnitude_product_fake(a, bt, tau_a, tau_b, total_k=0):
    return a.new_empty(_product_shape(a, bt), dtype=torch.float64)


@torch.library.register_fake("ozaki::sampled_magnitudes")
def _sampled_magnitudes_fake(a, bt, tau_a, tau_b, usable_a, usable_b, rows_a, rows_b, m, n,
                             norm_a=None, norm_b=None):
    return a.new_empty((rows_a.shape[0], rows_b.shape[0]), dtype=torch.float64)


@torch.library.register_fake("ozaki::gemm_slices")
def _gemm_slices_fake(a, bt, tau_a, tau_b, span_a, span_b, nonfinite_a, nonfinite_b, slices, fast,
                      nearest, int8, workspace_bytes):
    return a.new_empty(_product_shape(a, bt))


@torch.library.register_fake("ozaki::row_norm_scales")
def _row_norm_scales_fake(a, tau):
    return a.new_empty(a.shape[0], dtype=torch.int32)


@torch.library.register_fake("ozaki::row_stats_with_norm_scales")
def _row_stats_with_norm_scales_fake(a):
    rows = a.reshape(-1, a.shape[-1])  # a 3-D a is B's columns in place: batch * n rows
    return (*_row_stats_fake(rows), a.new_empty(rows.shape[0], dtype=torch.int32))


@torch.library.register_fake("ozaki::crt_row_scales")
def _crt_row_scales_fake(norm_scales, tau, bit_span, t):
    return torch.empty_like(norm_scales)


@torch.library.register_fake("ozaki::crt_wide_exponents")
def _crt_wide_exponents_fake(norm_scales, tau, bit_span, usable, t):
    return torch.empty_like(norm_scales)


@torch.library.register_fake("ozaki::crt_row_bounds")
def _crt_row_bounds_fake(tau, bit_span, nonfinite, norm_scales):
    return tau.new_empty((2,), dtype=torch.float64)


@torch.library.register_fake("ozaki::crt_magnitude")
def _crt_magnitude_fake(a, bt, tau_a, tau_b, norm_a, norm_b, usable_a, usable_b):
    return a.new_empty((), dtype=torch.float64)


@torch.library.register_fake("ozaki::crt_plan_reads")
def _crt_plan_reads_fake(a, bt):
    def rows(x):  # (tau, bit_span, nonfinite, norm_scales, usable) of the flattened rows
        count = math.prod(x.shape[:-1])
        return (x.new_empty(count, dtype=torch.int32), x.new_empty(count, dtype=torch.int32),
                x.new_empty(count, dtype=torch.bool), x.new_empty(count, dtype=torch.int32),
                x.new_empty(count, dtype=torch.bool))
    return (*rows(a), *rows(bt), a.new_empty((5,), dtype=torch.float64))


@torch.library.register_fake("ozaki::crt_kept_plan_reads")
def _crt_kept_plan_reads_fake(a, tau_a, bit_span_a, nonfinite_a, usable_a, norm_a, digits_a,
                              bounds_a, column_exponents_a, bt):
    n = bt.shape[0]
    values = 5 if column_exponents_a is None else 6
    return (bt.new_empty(n, dtype=torch.int32), bt.new_empty(n, dtype=torch.int32),
            bt.new_empty(n, dtype=torch.bool), bt.new_empty(n, dtype=torch.int32),
            bt.new_empty(n, dtype=torch.bool), bt.new_empty((values,), dtype=torch.float64))


@torch.library.register_fake("ozaki::crt_entry_bound_sum")
def _crt_entry_bound_sum_fake(exponents_a, exponents_b):
    return exponents_a.new_empty((), dtype=torch.float64)


@torch.library.register_fake("ozaki::gemm_crt")
def _gemm_crt_fake(a, bt, scale_a, scale_b, nonfinite_a, nonfinite_b, moduli, workspace_bytes,
                   residues_a=None):
    return a.new_empty(_product_shape(a, bt))


@torch.library.register_fake("ozaki::gemm_crt_exact")
def _gemm_crt_exact_fake(a, bt, exponent_a, exponent_b, nonfinite_a, nonfinite_b, moduli,
                         workspace_bytes, residues_a=None):
    return a.new_empty(_product_shape(a, bt))


@torch.library.register_fake("ozaki::crt_left_residues")
def _crt_left_residues_fake(a, scale, moduli, exact):
    return a.new_empty(crt.left_residue_shape(a.shape, moduli), dtype=torch.int8)


@torch.library.register_fake("ozaki::int8_matmul")
def _int8_matmul_fake(a, bt):
    return a.new_empty(_product_shape(a, bt), dtype=torch.int32)


@torch.library.register_fake("ozaki::slice_levels")
def _slice_levels_fake(a, bt, tau_a, tau_b, slices, fast, int8, total_k, workspace_bytes):
    levels = slices if fast else 2 * slices - 1
    return a.new_empty((levels, *_product_shape(a, bt)), dtype=torch.float64)


@torch.library.register_fake("ozaki::round_levels")
def _round_levels_fake(levels, tau_a, tau_b, span_a, span_b, slices, fast, int8, total_k, nearest,
                       dtype):
    shape = levels.shape[1:]
    return levels.new_empty(shape, dtype=dtype), levels.new_empty(shape, dtype=torch.bool)


@torch.library.register_fake("ozaki::row_norm_square_sums")
def _row_norm_square_sums_fake(a, tau):
    return a.new_empty(a.shape[0], dtype=torch.int64)


@torch.library.register_fake("ozaki::crt_magnitude_digits")
def _crt_magnitude_digits_fake(a, tau, norm, total_k=0):
    return a.new_empty(a.shape, dtype=torch.int8)


@torch.library.register_fake("ozaki::crt_residue_products")
def _crt_residue_products_fake(a, bt, scale_a, scale_b, moduli, workspace_bytes):
    return a.new_empty((moduli, *_product_shape(a, bt)), dtype=torch.int32)


@torch.library.register_fake("ozaki::crt_round")
def _crt_round_fake(products, scale_a, scale_b, dtype):
    return products.new_empty(products.shape[1:], dtype=dtype)


@torch.library.register_fake("ozaki::transposed")
def _transposed_fake(b):
    return b.new_empty((*b.shape[:-2], b.shape[-1], b.shape[-2]))


@torch.library.register_fake("ozaki::fingerprint")
def _fingerprint_fake(a):
    return a.new_empty((), dtype=torch.int64)
