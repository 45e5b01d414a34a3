"""Where a product's time goes: torch.profiler over ozaki.dgemm calls (fixed moduli, the default
plan, and the default plan with A prepared by ozaki.prepare) at one shape, with the host time per
call against the GPU kernels' time, and the operators and kernels that take most of it.

    python scripts/probes/call_overhead.py [--size 1024] [--calls 20]
    python scripts/probes/call_overhead.py --shape 6000 6000 16 --data kernel

--data phi: phi = 0.5 matrices; kernel: programs_bench.py's Gaussian-process kernel matrix times
standard normal right-hand sides (the conjugate-gradient product).
"""

import argparse
import pathlib
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import ozaki


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--shape", type=int, nargs=3, metavar=("M", "K", "N"),
                        help="m k n (default: --size cubed)")
    parser.add_argument("--data", choices=["phi", "kernel"], default="phi")
    parser.add_argument("--moduli", type=int, default=15)
    args = parser.parse_args(argv)
    m, k, n = args.shape or (args.size,) * 3
    shape = f"{m}x{k}x{n}"
    if args.data == "kernel":
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
        from programs_bench import kernel_matrix, right_hand_sides
        A = kernel_matrix(m, 1.0, 1e-2, 0, "cuda")[:, :k]
        B = right_hand_sides(k, n, 0, "cuda")
    else:
        g = torch.Generator(device="cuda").manual_seed(m + k + n)
        A = ozaki.accuracy.phi_matrix(m, k, 0.5, generator=g, device="cuda")
        B = ozaki.accuracy.phi_matrix(k, n, 0.5, generator=g, device="cuda")
    print(f"default plan at {shape}: {ozaki.plan(A, B)}")
    handles = []  # the prepared A's handle, held from its call on
    calls = [("native", lambda: A @ B),
             (f"moduli={args.moduli}", lambda: ozaki.dgemm(A, B, moduli=args.moduli)),
             ("default", lambda: ozaki.dgemm(A, B)),
             ("default, A prepared", lambda: ozaki.dgemm(A, B))]
    for label, call in calls:
        if label.endswith("prepared"):
            handles.append(ozaki.prepare(A))
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
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        gpu = sum(e.device_time_total for e in kernels) / args.calls / 1e3
        print(f"== {label} at {shape}: {wall * 1e3:.3f} ms per call (wall), GPU kernels "
              f"{gpu:.3f} ms per call")
        print(events.table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60))
        print(events.table(sort_by="self_device_time_total", row_limit=12,
                           max_name_column_width=60))


if __name__ == "__main__":
    main()
