"""Where a small product's time goes: torch.profiler over ozaki.dgemm calls (fixed moduli and the
default plan) at one size, with the host time per call against the GPU kernels' time, and the
operators and kernels that take most of it.

    python scripts/probes/call_overhead.py [--size 1024] [--calls 20]
"""

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

import ozaki


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--moduli", type=int, default=15)
    args = parser.parse_args(argv)
    n = args.size
    g = torch.Generator(device="cuda").manual_seed(n)
    A = ozaki.accuracy.phi_matrix(n, n, 0.5, generator=g, device="cuda")
    B = ozaki.accuracy.phi_matrix(n, n, 0.5, generator=g, device="cuda")
    for label, call in [("native", lambda: A @ B),
                        (f"moduli={args.moduli}", lambda: ozaki.dgemm(A, B, moduli=args.moduli)),
                        ("default", lambda: ozaki.dgemm(A, B))]:
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.calls):
            call()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / args.calls
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.calls):
                call()
            torch.cuda.synchronize()
        events = prof.key_averages()
        gpu = sum(e.self_device_time_total for e in events) / args.calls / 1e3
        print(f"== {label} at {n}^3: {wall * 1e3:.3f} ms per call (wall), GPU kernels "
              f"{gpu:.3f} ms per call")
        print(events.table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60))
        print(events.table(sort_by="self_device_time_total", row_limit=12,
                           max_name_column_width=60))


if __name__ == "__main__":
    main()
