"""`python -m ozaki`: a short demo on a random problem (the GPU if there is one, else the CPU).

For dgemm and sgemm it prints the slice plan, the time, and the error against the exact product
next to the error of torch's native matmul on the same inputs.
"""

import argparse
import time

import torch

from . import accuracy, dgemm, plan, sgemm
from .bench import native_matmul
from .cli import (HelpFormatter, check_operand_memory, check_phi, device_name, phi_value,
                  positive_int, resolve_device, seed_value)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ozaki", description=__doc__.splitlines()[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--size", type=positive_int, default=None,
                        help="m = k = n (default 2048 on a GPU, 512 on the CPU)")
    parser.add_argument("--phi", type=phi_value, default=1.0,
                        help="exponent spread of the inputs (rand - 0.5) * exp(phi * randn)")
    parser.add_argument("--samples", type=positive_int, default=8,
                        help="rows and columns checked against the exact product")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda or cuda:I (default: cuda if usable, else cpu)")
    parser.add_argument("--seed", type=seed_value, default=0,
                        help="seed of the inputs and the sampled entries")
    args = parser.parse_args(argv)
    args.device = resolve_device(parser, args.device)
    if args.size is None:
        args.size = 2048 if args.device.type == "cuda" else 512
    check_operand_memory(parser, "--size", [(args.size,) * 3], [args.device])
    check_phi(parser, [args.phi], [(args.size,) * 3], args.seed, [torch.float64, torch.float32])
    return args


def timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return result, time.perf_counter() - start


def main(argv=None):
    args = parse_args(argv)
    n, device = args.size, args.device
    g = torch.Generator().manual_seed(args.seed)
    A = accuracy.phi_matrix(n, n, args.phi, generator=g).to(device)
    B = accuracy.phi_matrix(n, n, args.phi, generator=g).to(device)
    rows, cols = accuracy.sample_entries(n, n, args.samples, generator=g)
    name = device_name(device)
    print(f"ozaki demo: {n} x {n} x {n}, phi = {args.phi}, on {name}; errors on "
          f"{len(rows)} x {len(cols)} sampled entries against the exact product")
    for label, routine, dtype in [("dgemm", dgemm, torch.float64), ("sgemm", sgemm, torch.float32)]:
        a, b = A.to(dtype), B.to(dtype)
        exact = accuracy.exact_matmul(a, b, rows=rows, cols=cols)
        routine(a, b)  # warm-up: kernels, cuBLAS handle
        C, seconds = timed(lambda: routine(a, b), device)
        with native_matmul():
            a @ b  # the same warm-up for the native product
            native, native_seconds = timed(lambda: a @ b, device)
        p = plan(a, b)
        ours = accuracy.componentwise_error(C, exact, a, b, rows=rows, cols=cols)
        theirs = accuracy.componentwise_error(native, exact, a, b, rows=rows, cols=cols)
        share = accuracy.correctly_rounded_share(C, exact, rows=rows, cols=cols)
        print(f"\nozaki.{label}: {p}")
        if p.predicted_error and not p.exact:
            unit = 2.0 ** -(53 if dtype == torch.float64 else 24)
            print(f"  (the predicted error is the truncation alone; the final rounding adds up to "
                  f"{unit:.1e} x |C_ij|)")
        print(f"  time  {seconds * 1e3:9.2f} ms   (torch.matmul {native_seconds * 1e3:.2f} ms)")
        print(f"  max |C - exact| / (|A||B|):  ozaki {ours:.2e}   torch.matmul {theirs:.2e}")
        print(f"  correctly rounded entries:   ozaki {share:.1%}")


if __name__ == "__main__":
    main()
