"""The CUDA time of each kernel of a default ozaki.dgemm call (replayed, as a loop on the same
operands calls it), per shape, with native DGEMM's time in the same run (docs/benchmarks.md,
"Scheme II paths"): which pass of the call to work on next. Then the kernels of the plan's reads
alone (ozaki::crt_plan_reads of A and B's columns in place), which a repeated call skips for a
kept A.

    python scripts/probes/call_kernels.py [--shapes 2048,2048,2048 ...] [--calls 5] [--b-rows]
        [--moduli 15] [--float32]

--b-rows: B's columns stored as rows (B = B.mT.contiguous().mT), so that the call reads bt as rows
(the row plan pass, the weighted row residues) instead of B's columns in place. --moduli: the call
ozaki.dgemm(A, B, moduli=...) instead of the default (eager: a fixed count is not replayed).
--float32: the operands rounded to float32, ozaki.sgemm against native SGEMM (TF32 off).
"""

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crt_paths import phi_operands, shape_value, timed  # noqa: E402

import ozaki  # noqa: E402
from ozaki import _ops  # noqa: E402

SHAPES = ["1024,1024,1024", "2048,2048,2048", "4096,4096,4096", "8192,8192,8192",
          "16384,1024,16384", "6000,6000,16"]


def kernel_times(call, calls):
    """{kernel name: (CUDA microseconds per call, launches per call)} over `calls` calls."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    per_kernel = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        entry = per_kernel[event.name]
        entry[0] += event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
        entry[1] += 1
    return {name: (us / calls, count / calls) for name, (us, count) in per_kernel.items()}


def print_kernels(times):
    for name, (us, count) in sorted(times.items(), key=lambda item: -item[1][0]):
        print(f"   {us:8.1f}  x{count:g}  {name[:110]}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", type=shape_value, default=[shape_value(s) for s in SHAPES])
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--b-rows", action="store_true", help="B's columns stored as rows")
    parser.add_argument("--moduli", type=int, help="a fixed moduli count instead of the default")
    parser.add_argument("--float32", action="store_true", help="ozaki.sgemm on float32 operands")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    product = ozaki.sgemm if args.float32 else ozaki.dgemm
    print("#", torch.cuda.get_device_name(), "torch", torch.__version__,
          "B's columns stored as rows" if args.b_rows else "B row-major", flush=True)
    for m, k, n in args.shapes:
        A, B = phi_operands(m, k, n)
        if args.float32:
            A, B = A.float(), B.float()
        if args.b_rows:
            B = B.mT.contiguous().mT
        native_s, expected, _ = timed(lambda: A @ B, 11)
        call = lambda: product(A, B, moduli=args.moduli)  # noqa: E731
        for _ in range(4):  # the guess, the capture, then replays
            call()
        default_s, got, _ = timed(call, 11)
        assert torch.equal(got, call()), "a repeated call changed its bits"
        times = kernel_times(call, args.calls)
        total = sum(us for us, _ in times.values())
        what = ("default" if args.moduli is None else f"moduli={args.moduli}") + (
            " float32" if args.float32 else "")
        print(f"== {m}x{k}x{n} {what}: native {native_s * 1e3:.3f} ms, ozaki {default_s * 1e3:.3f} ms "
              f"({native_s / default_s:.2f}x), kernels {total:.1f} us per call", flush=True)
        print_kernels(times)
        reads = kernel_times(lambda: _ops.crt_plan_reads(A, B.mT), args.calls)
        print(f"   the plan's reads alone: {sum(us for us, _ in reads.values()):.1f} us per call",
              flush=True)
        print_kernels(reads)
        del A, B, expected, got
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
