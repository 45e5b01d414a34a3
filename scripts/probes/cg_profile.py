"""Where a prepared conjugate-gradient iteration's time goes (scripts/programs_bench.py's CG on the
Gaussian-process kernel matrix, K prepared): wall time per iteration with replay on and off, how
many products were replayed, guessed or planned eagerly, and under torch.profiler (where calls
are not replayed) the GPU's busy time per iteration and the kernels that take it.

    python scripts/probes/cg_profile.py [--size 6000] [--rhs 16] [--iterations 50]
"""

import argparse
import collections
import pathlib
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import ozaki
from ozaki import product, replay

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from programs_bench import conjugate_gradients, kernel_matrix, right_hand_sides  # noqa: E402
from plan_reads import median_ms  # noqa: E402  (this folder is the script's own)


def counted_calls():
    """Counters of the products' ways (replayed, eager with a guess kept or dropped, eager)."""
    counts = collections.Counter()
    replayed, planned = replay._replayed, product.planned_product

    def counting_replayed(*args):
        counts["replayed"] += 1
        return replayed(*args)

    def counting_planned(*args, **kwargs):
        counts["eager"] += 1
        return planned(*args, **kwargs)

    replay._replayed = counting_replayed
    product.planned_product = counting_planned
    return counts


def timed(call):
    """Median seconds of 3 runs after a warm-up (plan_reads.median_ms)."""
    return median_ms(call, repeats=3) / 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=6000)
    parser.add_argument("--rhs", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args(argv)
    K = kernel_matrix(args.size, 1.0, 1e-2, 0, "cuda")
    B = right_hand_sides(args.size, args.rhs, 0, "cuda")
    iterations = args.iterations
    native = timed(lambda: conjugate_gradients(K, B, iterations))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; CG n = {args.size}, "
          f"r = {args.rhs}, {iterations} iterations; median of 3")
    print(f"native: {native * 1e3:.2f} ms ({native / iterations * 1e3:.3f} ms per iteration)")
    counts = counted_calls()
    with ozaki.enable(), ozaki.prepare(K):
        conjugate_gradients(K, B, iterations)  # K's kept parts, the first captures
        for enabled in (True, False):
            replay.ENABLED = enabled
            counts.clear()
            seconds = timed(lambda: conjugate_gradients(K, B, iterations))
            print(f"prepared, replay {'on' if enabled else 'off'}: {seconds * 1e3:.2f} ms "
                  f"({seconds / iterations * 1e3:.3f} ms per iteration, "
                  f"{seconds / native:.2f}x native); calls over 4 runs (one warm-up): {dict(counts)}")
        replay.ENABLED = True
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            conjugate_gradients(K, B, iterations)
            torch.cuda.synchronize()
    events = prof.key_averages()
    # kernels, not the ozaki::gemm range that the profiler also shows on the GPU's timeline
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.key.startswith("ozaki::")]
    busy = sum(e.device_time_total for e in kernels) / 1e3
    print(f"profiled (eager): GPU busy {busy:.2f} ms, {busy / iterations:.3f} ms per iteration")
    for e in sorted(kernels, key=lambda e: -e.device_time_total)[:15]:
        print(f"  {e.device_time_total / 1e3 / iterations:8.4f} ms/it  {e.count / iterations:5.1f}/it"
              f"  {e.key[:100]}")


if __name__ == "__main__":
    main()
