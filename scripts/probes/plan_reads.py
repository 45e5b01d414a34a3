"""The default plan's device reads: ozaki::crt_plan_reads (one call; on CUDA fused) against the
operators that compute each part called one by one, per shape, on the same phi = 0.5 operands,
with a bitwise check of the values (docs/benchmarks.md, "Scheme II paths").

    python scripts/probes/plan_reads.py [--shapes 4096,4096,4096 16384,1024,16384 ...]
"""

import argparse
import time

import torch

from ozaki import _ops

SHAPES = ["16384,16384,16384", "4096,4096,4096", "16384,1024,16384", "16384,16384,64",
          "6000,6000,16"]


def median_ms(call, repeats=10):
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def separate(a, bt):
    """crt_plan_reads' values from its parts, one operator at a time."""
    (stats_a, norm_a), (stats_b, norm_b) = (_ops.row_stats_with_norm_scales(a),
                                            _ops.row_stats_with_norm_scales(bt))
    magnitude = _ops.crt_magnitude(a, bt, stats_a, stats_b, norm_a, norm_b, stats_a.usable,
                                   stats_b.usable)
    return torch.cat([-magnitude.reshape(1), _ops.crt_row_bounds(stats_a, norm_a),
                      _ops.crt_row_bounds(stats_b, norm_b)])


def phi_rows(rows, k, generator):
    uniform = torch.rand(rows, k, device="cuda", dtype=torch.float64, generator=generator) - 0.5
    return uniform * torch.exp(0.5 * torch.randn(rows, k, device="cuda", dtype=torch.float64,
                                                 generator=generator))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=SHAPES, metavar="M,K,N")
    args = parser.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, median of 10")
    print("| m × k × n | crt_plan_reads ms | separate operators ms | their row passes ms | "
          "values equal |")
    print("|---|---|---|---|---|")
    for shape in args.shapes:
        m, k, n = map(int, shape.split(","))
        generator = torch.Generator("cuda").manual_seed(0)
        a, bt = phi_rows(m, k, generator), phi_rows(n, k, generator)
        fused = median_ms(lambda: _ops.crt_plan_reads(a, bt))
        parts = median_ms(lambda: separate(a, bt))
        rows = median_ms(lambda: (_ops.row_stats_with_norm_scales(a),
                                  _ops.row_stats_with_norm_scales(bt)))
        equal = torch.equal(_ops.crt_plan_reads(a, bt)[-1], separate(a, bt))
        print(f"| {m} × {k} × {n} | {fused:.3f} | {parts:.3f} | {rows:.3f} | "
              f"{'yes' if equal else '**no**'} |", flush=True)
        del a, bt


if __name__ == "__main__":
    main()
