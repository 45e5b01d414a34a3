"""Randomized differential check of ozaki's promises on inputs that no test fixes.

    python scripts/fuzz_bits.py [--device cuda|cpu] [--seconds 120] [--seed S] [--cases N]
                                [--large-share 0.1]

Each case draws a shape (tile edges and chunked products included), a dtype, a kind of data
(heavy tails, exponent spreads, rows and columns of wide span, integers, sparse rows, exact
cancellation, NaN/Inf), the options of a call (backend, counts, fast mode, rounding="nearest"), the
operands' layout (transposed views), batches and complex operands (through ozaki.matmul),
ozaki.gemm's alpha, beta, C and transposes, the workspace budget and the wave plan, and whether
the gradients of A and B are taken too (of the sum of the result times fixed random weights),
and then checks:

- the CUDA result equals the CPU's bit for bit (NaN where the CPU has NaN), and so do the
  gradients; with --device cpu, the CPU's result (and gradients) with one thread equal those with
  the default threads;
- a second call gives the same bits, and so do the operands' contiguous copies;
- for single real products with finite entries: under rounding="nearest", sampled entries equal
  the exact product rounded once (exact rationals); under the default plan, they lie within
  native's deterministic bound k u (|A||B|)_ij + u |C_ij| of the exact product (a loose check that
  catches wrong numbers).

Every case prints its seed when it fails (rerun it alone with --seed S --cases 1 and the same
--large-share). Exits 1 on any failure. --device cuda needs a CUDA device and the CPU backend
(the same build).
"""

import argparse
import contextlib
import math
import os
import random
import sys
import time
import warnings

import numpy as np
import torch

import ozaki
from ozaki.accuracy import exact_matmul, round_exact
from ozaki.crt import smallest_moduli
from ozaki.study.reproducibility import BIT_VIEWS, cpu_threads

KINDS = ["phi", "spread", "wide rows", "integers", "sparse", "cancellation", "special"]


def set_environment(values):
    """Sets each environment variable to its value (None: unsets it)."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def environment(**values):
    """Sets the environment variables given (None: unset) for the block, then restores them."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        set_environment(values)
        yield
    finally:
        set_environment(saved)


def side(rng, largest):
    """A side length: small, near a multiple of 16/64/128/256 (tile edges), or anywhere."""
    choice = rng.random()
    if choice < 0.25:
        return rng.randint(1, 40)
    if choice < 0.65:
        base = rng.choice([16, 64, 128, 256]) * rng.randint(1, max(1, largest // 256))
        return max(1, min(largest, base + rng.randint(-2, 2)))
    return rng.randint(1, largest)


def draw_case(seed, large_share=0.1):
    """The parameters of one case, all from `seed`; a share of them large (up to 2304 x 3000 x
    2304, where small budgets cut the product into chunks)."""
    rng = random.Random(seed)
    large = rng.random() < large_share
    case = {
        "seed": seed,
        "m": side(rng, 2304 if large else 600),
        "k": side(rng, 3000 if large else 1200),
        "n": side(rng, 2304 if large else 600),
        "dtype": rng.choice([torch.float64, torch.float64, torch.float32]),
        "kind": rng.choice(KINDS),
        # a (batch, m, k) @ (batch, k, n) product
        "batch": None if large else rng.choice([None] * 6 + [2, 3]),
        "complex": rng.random() < 0.1,  # complex operands (one real product each)
        # ozaki.gemm's alpha op(A) op(B) + beta C, with op a transpose where transa/transb say so
        "blas": None,
        "transpose_a": rng.random() < 0.2,
        "transpose_b": rng.random() < 0.3,
        "workspace_mb": rng.choice([None, None, 1, 4, 16, 64]),
        "tile_waves": rng.choice([None, "0", "1"]),
    }
    # large products keep to plans the CPU computes in seconds
    backends = ["auto", "crt"] if large else ["auto", "auto", "auto", "crt", "int8", "fp16"]
    backend = rng.choice(backends)
    options = {"backend": backend}
    if rng.random() < 0.3 and backend != "crt" and not large:
        options["rounding"] = "nearest"
    elif backend == "crt" and rng.random() < 0.4:
        # a complex product runs as one real product of inner dimension 2k (ozaki/complex.py)
        inner = 2 * case["k"] if case["complex"] else case["k"]
        options["moduli"] = rng.randint(smallest_moduli(inner), 16)
    elif backend in ("int8", "fp16") and rng.random() < 0.5:
        options["slices"] = rng.randint(1, 12)
        options["fast"] = rng.choice([None, True, False])
    case["options"] = options
    # gradients of A and B too (a stream of its own, so the other draws stay as they were); their
    # products have inner dimensions n and m, for which a drawn count must suffice as well
    case["grad"] = not large and random.Random(seed + 4).random() < 0.12
    if case["grad"] and "moduli" in options:
        widest = max(case["m"], case["k"], case["n"]) * (2 if case["complex"] else 1)
        options["moduli"] = max(options["moduli"], smallest_moduli(widest))
    if case["batch"] is None and rng.random() < 0.15:
        scalars = [0.0, 1.0, -1.0, 0.5, rng.uniform(-2.0, 2.0)]
        alpha = 0.0 if rng.random() < 0.05 else rng.choice(scalars[1:])  # 0: A and B unread
        case["blas"] = {"alpha": alpha, "beta": rng.choice(scalars), "transa": rng.random() < 0.5,
                        "transb": rng.random() < 0.5}
    return case


def operand(rng, gen, rows, cols, kind, dtype):
    """A (rows, cols) float64 matrix of the given kind, made on the CPU, cast to dtype."""
    u = torch.rand(rows, cols, generator=gen, dtype=torch.float64) - 0.5
    span = 40 if dtype == torch.float64 else 25
    if kind == "phi":
        x = u * torch.exp(rng.choice([0.5, 1.0, 2.0]) * torch.randn(rows, cols, generator=gen,
                                                                    dtype=torch.float64))
    elif kind == "spread":
        e = torch.randint(-span, span + 1, (rows, cols), generator=gen)
        x = torch.ldexp(u, e)
    elif kind == "wide rows":
        e = torch.randint(-span, span + 1, (rows, 1), generator=gen)
        x = torch.ldexp(u, e.expand(rows, cols).contiguous())
    elif kind == "integers":
        x = torch.randint(-1000, 1001, (rows, cols), generator=gen).to(torch.float64)
    elif kind == "sparse":
        x = u * (torch.rand(rows, cols, generator=gen) < 0.05)
        x[rng.randrange(rows)] = 0.0  # a row of zeros
    else:  # cancellation and special start from plain entries
        x = u
    return x.to(dtype)


def make_operands(case):
    """A and B of the case, on the CPU: (m, k) and (k, n), or a batch of such pairs (each drawn
    on its own), complex where the case says so."""
    rng = random.Random(case["seed"] + 1)
    gen = torch.Generator().manual_seed(case["seed"])
    pairs = [real_operands(case, rng, gen) for _ in range(case["batch"] or 1)]
    if case["complex"]:
        imaginary = [real_operands(case, rng, gen) for _ in pairs]
        pairs = [(torch.complex(A, Ai), torch.complex(B, Bi))
                 for (A, B), (Ai, Bi) in zip(pairs, imaginary)]
    if case["batch"] is None:
        return pairs[0]
    return torch.stack([A for A, _ in pairs]), torch.stack([B for _, B in pairs])


def real_operands(case, rng, gen):
    """One real (m, k) A and (k, n) B of the case's kind."""
    m, k, n, dtype, kind = case["m"], case["k"], case["n"], case["dtype"], case["kind"]
    A = operand(rng, gen, m, k, kind, dtype)
    B = operand(rng, gen, k, n, kind, dtype)
    if kind == "cancellation" and n >= 2:
        # column 1 of the product is exactly minus column 0; the terms l = 0 and l = 1 of every
        # entry cancel exactly (A's column 1 is 2^30 times its column 0, B's row 1 is -2^-30
        # times its row 0), so each entry is the rest of its sum beside two large terms
        B[:, 1] = -B[:, 0]
        if k >= 2:
            A[:, 1] = A[:, 0] * 2.0**30
            B[1, :] = -B[0, :] * 2.0**-30
    if kind == "special":
        for _ in range(rng.randint(1, 3)):
            target = A if rng.random() < 0.5 else B
            i, j = rng.randrange(target.shape[0]), rng.randrange(target.shape[1])
            target[i, j] = rng.choice([math.nan, math.inf, -math.inf])
    return A, B


def make_addend(case):
    """The C of a BLAS case, (m, n), drawn like the operands."""
    rng = random.Random(case["seed"] + 3)
    gen = torch.Generator().manual_seed(case["seed"] + 3)
    m, n, dtype = case["m"], case["n"], case["dtype"]
    C = operand(rng, gen, m, n, case["kind"], dtype)
    return torch.complex(C, operand(rng, gen, m, n, case["kind"], dtype)) if case["complex"] else C


def product_of(case):
    """The call of the case: product(A, B, **options) for the logical operands A and B."""
    if case["blas"] is not None:
        blas, C = case["blas"], make_addend(case)

        def product(A, B, **options):
            # op(X) = X is passed as X's transpose with trans=True where the case says so
            return ozaki.gemm(A.mT if blas["transa"] else A, B.mT if blas["transb"] else B,
                              C.to(A.device), alpha=blas["alpha"], beta=blas["beta"],
                              transa=blas["transa"], transb=blas["transb"], **options)

        return product
    if case["batch"] is not None or case["complex"]:
        return ozaki.matmul
    return real_product_of(case["dtype"])


def real_product_of(dtype):
    """ozaki.dgemm for float64 operands, ozaki.sgemm for float32 ones."""
    return ozaki.dgemm if dtype == torch.float64 else ozaki.sgemm


def as_layout(x, transposed):
    """x itself, or the same values as the transpose of a contiguous matrix (or batch)."""
    return x.mT.contiguous().mT if transposed else x


def differing(x, y):
    """How many entries of x and y (same shape and dtype) differ in their bits, NaN counting as
    equal to NaN (payloads may differ between devices); complex: entries with a part differing."""
    if x.is_complex():
        parts = differing_mask(torch.view_as_real(x), torch.view_as_real(y))
        return int(parts.any(dim=-1).sum())
    return int(differing_mask(x, y).sum())


def differing_mask(x, y):
    """Where real x and y differ in their bits, NaN against NaN not counted."""
    x, y = x.contiguous(), y.contiguous()
    view = BIT_VIEWS[x.dtype]
    return (x.view(view) != y.view(view)) & ~(torch.isnan(x) & torch.isnan(y))


def same_bits(x, y):
    """Same shape, dtype and bits (NaN where the other has NaN)."""
    return x.shape == y.shape and x.dtype == y.dtype and differing(x, y) == 0


def mismatches(x, y):
    """How many entries of x differ from y's in their bits: all of them where the shapes differ."""
    return differing(x, y) if x.shape == y.shape else x.numel()


def sample_grid(rng, m, n, count=4):
    """Up to count rows and count columns of the result, sorted, for the exact references."""
    rows = sorted(rng.sample(range(m), min(m, count)))
    cols = sorted(rng.sample(range(n), min(n, count)))
    return rows, cols


def check_case(case, device="cuda"):
    """The failures of one case, as messages (empty: it passed). device "cuda": the CUDA results
    against the CPU's; "cpu": the CPU's with one thread against its default threads."""
    A, B = make_operands(case)
    plain = case["batch"] is None and not case["complex"] and case["blas"] is None
    product = product_of(case)
    options = case["options"]
    budget = case["workspace_mb"]
    env = {"OZAKI_WORKSPACE_MB": None if budget is None else str(budget),
           "OZAKI_TILE_WAVES": case["tile_waves"]}
    failures = []
    with warnings.catch_warnings(), environment(**env):
        warnings.simplefilter("ignore")  # fixed counts warn where they predict poor accuracy
        cpu = product(A, B, **options)
        A_other = as_layout(A.to(device), case["transpose_a"])
        B_other = as_layout(B.to(device), case["transpose_b"])
        with cpu_threads(1) if device == "cpu" else contextlib.nullcontext():
            other = product(A_other, B_other, **options).cpu()
        again = product(A_other, B_other, **options).cpu()
        contiguous = product(A.to(device), B.to(device), **options).cpu()
        if case.get("grad"):
            grads_cpu = gradients(case, product, A, B, options)
            with cpu_threads(1) if device == "cpu" else contextlib.nullcontext():
                grads_other = gradients(case, product, A_other, B_other, options)
    label = "CUDA" if device == "cuda" else "one CPU thread"
    if not same_bits(other, cpu):
        count = mismatches(other, cpu)
        failures.append(f"{label} and CPU bits differ ({count} of {other.numel()} entries)")
    if not same_bits(again, other):
        failures.append(f"a second call ({label}) gave other bits")
    if not same_bits(contiguous, other):
        failures.append("the contiguous operands gave other bits than the transposed views")
    if case.get("grad"):
        for name, mine, theirs in zip("AB", grads_other, grads_cpu):
            if not same_gradients(mine, theirs):
                failures.append(f"{label} and CPU gradients of {name} differ")
    finite = plain and bool(torch.isfinite(A).all() and torch.isfinite(B).all())
    default_plan = set(options) == {"backend"} and options["backend"] == "auto"
    if finite and (options.get("rounding") == "nearest" or default_plan):
        rng = random.Random(case["seed"] + 2)
        rows, cols = sample_grid(rng, case["m"], case["n"])
        exact = exact_matmul(A, B, rows=rows, cols=cols)
        got = cpu[rows][:, cols]
        if options.get("rounding") == "nearest":
            if not same_bits(got, round_exact(exact, dtype=case["dtype"])):
                failures.append("rounding='nearest' differs from the exact product rounded once")
        else:
            u = 2.0**-53 if case["dtype"] == torch.float64 else 2.0**-24
            magnitude = (A[rows].abs().double() @ B[:, cols].abs().double()).numpy()
            error = np.abs(got.double().numpy() - exact.astype(float))
            # error measured against RN(exact): one more half unit of the result
            bound = case["k"] * u * magnitude * (1 + 2**-20) + 2 * u * np.abs(got.double().numpy())
            if not (error <= bound).all():
                failures.append(f"the default plan errs beyond k u |A||B| (worst "
                                f"{float(np.max(error / np.maximum(bound, 1e-300))):.3g} x)")
    return failures


def gradients(case, product, A, B, options):
    """(A.grad, B.grad) of sum(product(A, B) * W) for a fixed random W of the result's shape, A and
    B leaves with A's and B's layouts (None where no gradient reaches them: alpha = 0)."""
    A = A.detach().requires_grad_(True)
    B = B.detach().requires_grad_(True)
    result = product(A, B, **options)
    gen = torch.Generator().manual_seed(case["seed"] + 5)
    weights = torch.rand(result.shape, generator=gen, dtype=torch.float64) - 0.5
    if result.is_complex():
        weights = torch.complex(weights, torch.rand(result.shape, generator=gen,
                                                    dtype=torch.float64) - 0.5)
    loss = (result * weights.to(result.dtype).to(result.device)).sum()
    (loss.real if loss.is_complex() else loss).backward()
    return A.grad, B.grad


def same_gradients(x, y):
    """Both None, or the same bits (on the CPU)."""
    if x is None or y is None:
        return x is None and y is None
    return same_bits(x.cpu(), y.cpu())


def describe(case):
    """The case's parameters on one line, for a failure's report."""
    fields = {key: value for key, value in case.items() if value not in (None, False)}
    fields["dtype"] = str(case["dtype"]).replace("torch.", "")
    return " ".join(f"{key}={value}" for key, value in fields.items())


def run_arguments(description, device_help):
    """The arguments every randomized check takes: --seconds, --cases, --device and --seed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seconds", type=float, default=120.0, help="time to spend (default 120)")
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help=device_help)
    parser.add_argument("--seed", type=int, default=None,
                        help="first case's seed (default: from the clock); case i uses seed + i")
    return parser


def start_run(name, parser, args, cpu_hint, cpu_where):
    """The first case's seed, once a bad --seconds or --cases is named (parser.error exits), a
    missing CUDA device reported, and the run's first line printed."""
    if not args.seconds > 0:  # NaN too: it would end the run before its first case
        parser.error(f"--seconds must be positive, got {args.seconds}")
    if args.cases is not None and args.cases <= 0:
        parser.error(f"--cases must be positive, got {args.cases}")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"{name}.py --device cuda needs a CUDA device: none is available "
                 f"(--device cpu {cpu_hint})")
    first = args.seed if args.seed is not None else int(time.time())
    where = torch.cuda.get_device_name() if args.device == "cuda" else cpu_where
    print(f"# {name}: first seed {first}, {where}, torch {torch.__version__}", flush=True)
    return first


def main():
    parser = run_arguments(__doc__.splitlines()[0],
                           "cuda (default): CUDA against CPU bits; cpu: one CPU thread against the "
                           "default threads (no GPU needed)")
    parser.add_argument("--large-share", type=float, default=0.1,
                        help="share of large cases, in [0, 1] (default 0.1)")
    args = parser.parse_args()
    if not 0.0 <= args.large_share <= 1.0:
        parser.error(f"--large-share must lie in [0, 1], got {args.large_share}")
    first = start_run("fuzz_bits", parser, args, "compares CPU thread counts", "CPU threads")
    start, done, failed = time.monotonic(), 0, 0
    counts = {}
    while time.monotonic() - start < args.seconds and (args.cases is None or done < args.cases):
        case = draw_case(first + done, args.large_share)
        try:
            failures = check_case(case, args.device)
        except Exception as error:  # reported with the seed like any other failure
            failures = [f"raised {type(error).__name__}: {error}"]
        done += 1
        for label in (case["kind"], "batched" if case["batch"] else None,
                      "complex" if case["complex"] else None, "gemm" if case["blas"] else None,
                      "gradients" if case["grad"] else None):
            if label is not None:
                counts[label] = counts.get(label, 0) + 1
        if failures:
            failed += 1
            print(f"FAILED seed={case['seed']}: {'; '.join(failures)}\n  {describe(case)}",
                  flush=True)
        if done % 25 == 0:
            print(f"  {done} cases, {failed} failed, {time.monotonic() - start:.0f} s", flush=True)
    kinds = ", ".join(f"{label} {count}" for label, count in sorted(counts.items()))
    print(f"# {done} cases ({kinds}), {failed} failed, seeds {first}..{first + done - 1}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
