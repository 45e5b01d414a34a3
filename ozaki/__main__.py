"""`python -m ozaki`: a short demo on a random problem (the GPU if there is one, else the CPU).

For dgemm and sgemm it prints the slice plan, the time, and the error against the exact product
next to the error of torch's native matmul on the same inputs.
"""

import argparse
import time

import torch

from . import _ops, accuracy, dgemm, plan, sgemm


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ozaki", description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=None,
                        help="m = k = n (default 2048 on a GPU, 512 on the CPU)")
    parser.add_argument("--phi", type=float, default=1.0,
                        help="exponent spread of the inputs (rand - 0.5) * exp(phi * randn)")
    parser.add_argument("--samples", type=int, default=8,
                        help="rows and columns checked against the exact product")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() and _ops.cuda_backend_built() else "cpu"
    if args.size is None:
        args.size = 2048 if args.device == "cuda" else 512
    if args.size < 1:
        parser.error(f"--size must be >= 1, got {args.size}")
    if args.samples < 1:
        parser.error(f"--samples must be >= 1, got {args.samples}")
    return args


def timed(fn, device):
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def main(argv=None):
    args = parse_args(argv)
    n, device = args.size, args.device
    g = torch.Generator().manual_seed(args.seed)
    A = accuracy.phi_matrix(n, n, args.phi, generator=g).to(device)
    B = accuracy.phi_matrix(n, n, args.phi, generator=g).to(device)
    rows, cols = accuracy.sample_entries(n, n, args.samples, generator=g)
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"ozaki demo: {n} x {n} x {n}, phi = {args.phi}, on {name}; errors on "
          f"{len(rows)} x {len(cols)} sampled entries against the exact product")
    for label, routine, dtype in [("dgemm", dgemm, torch.float64), ("sgemm", sgemm, torch.float32)]:
        a, b = A.to(dtype), B.to(dtype)
        exact = accuracy.exact_matmul(a, b, rows=rows, cols=cols)
        routine(a, b)  # warm-up: kernels, cuBLAS handle
        C, seconds = timed(lambda: routine(a, b), device)
        native, native_seconds = timed(lambda: a @ b, device)
        p = plan(a, b)
        ours = accuracy.componentwise_error(C, exact, a, b, rows=rows, cols=cols)
        theirs = accuracy.componentwise_error(native, exact, a, b, rows=rows, cols=cols)
        share = accuracy.correctly_rounded_share(C, exact, rows=rows, cols=cols)
        print(f"\nozaki.{label}: {p}")
        print(f"  time  {seconds * 1e3:9.2f} ms   (torch.matmul {native_seconds * 1e3:.2f} ms)")
        print(f"  max |C - exact| / (|A||B|):  ozaki {ours:.2e}   torch.matmul {theirs:.2e}")
        print(f"  correctly rounded entries:   ozaki {share:.1%}")


if __name__ == "__main__":
    main()
