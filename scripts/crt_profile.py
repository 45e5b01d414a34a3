"""Where the time of the INT8 backends goes, on the GPU (docs/benchmarks.md, "Fixed moduli counts").

    python scripts/crt_profile.py [sizes ...] [--shape m k n] [--out DIR]

For each shape: native DGEMM/SGEMM, the INT8 GEMM unit (ozaki's column-blocked cublasGemmEx,
torch._int_mm for reference), and ozaki.dgemm/sgemm with backend="crt" (default plan and fixed
moduli), with the CUDA time of one call split by kernel family (profiler): transpose/copy, row
statistics, norm bounds, magnitude estimate, residues, INT8 GEMMs, reconstruction; and the host's
time to issue the call. Inputs are phi = 0.5 matrices (--seed draws others); errors are median/max
relative errors of a sampled grid against exact products. Prints a table and writes profile.json
under --out.
"""
import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

import ozaki
from ozaki import accuracy


def time_ms(fn, repeats):
    return statistics.median(times_ms(fn, repeats))


def times_ms(fn, repeats):
    """Milliseconds of each of `repeats` calls after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def host_issue_ms(fn, repeats):
    """Median host time to issue one call (the GPU idle, after a synchronize): when it comes near
    the call's time, the host's launches, not the GPU, set the pace."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


FAMILIES = [("reconstruct", "reconstruct"), ("residues", "residues"), ("magnitude", "magnitude"),
            ("norm", "row_norm"), ("stats", "row_stats"), ("int8 gemm", "gemm"),
            ("int8 gemm", "xmma"), ("int8 gemm", "sm90"), ("int8 gemm", "cutlass"),
            ("copy/transpose", "copy"), ("copy/transpose", "transpose"),
            ("copy/transpose", "elementwise")]


def breakdown(fn):
    """CUDA milliseconds of one call by kernel family."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    totals, others = {}, {}
    for event in prof.key_averages():
        ms = event.device_time_total / 1e3 if hasattr(event, "device_time_total") else event.cuda_time_total / 1e3
        if ms <= 0:
            continue
        name = event.key.lower()
        family = next((f for f, key in FAMILIES if key in name), "other")
        totals[family] = totals.get(family, 0.0) + ms
        if family == "other":
            others[event.key[:60]] = ms
    if others:  # what "other" is made of, largest first
        print("   other:", "; ".join(f"{name} {ms:.3f}" for name, ms in
                                      sorted(others.items(), key=lambda x: -x[1])[:6]), flush=True)
    print_idle_time(prof)
    return totals


def print_idle_time(prof):
    """The GPU's idle time between the first and the last kernel of the call, and its largest gaps
    (with the kernels around them)."""
    spans = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    if not spans:
        return
    gaps, busy_until, previous = [], spans[0][0], spans[0][2]
    for start, end, name in spans:
        if start > busy_until:
            gaps.append((start - busy_until, previous[:40], name[:40]))
        if end > busy_until:
            busy_until, previous = end, name
    idle = sum(g[0] for g in gaps)
    print(f"   gpu span {(busy_until - spans[0][0]) / 1e3:.2f} ms, idle {idle / 1e3:.2f} ms in "
          f"{len(gaps)} gaps; largest: " + "; ".join(
              f"{g:.0f} us {a} -> {b}" for g, a, b in sorted(gaps, reverse=True)[:4]), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[4096, 8192, 16384])
    parser.add_argument("--shape", nargs=3, type=int, action="append", default=[])
    parser.add_argument("--moduli", nargs="*", type=int, default=[13, 14, 15, 16])
    parser.add_argument("--sgemm-moduli", nargs="*", type=int, default=[6, 7, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0,
                        help="added to each shape's seed (other draws)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    shapes = [(n, n, n) for n in args.sizes] + [tuple(s) for s in args.shape]
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    results = []
    for m, k, n in shapes:
        flops = 2.0 * m * k * n
        g = torch.Generator().manual_seed(m + 3 * k + 7 * n + args.seed)
        A = accuracy.phi_matrix(m, k, 0.5, generator=g).cuda()
        B = accuracy.phi_matrix(k, n, 0.5, generator=g).cuda()
        rows, cols = accuracy.sample_entries(m, n, 16, generator=g)
        A_rows, B_cols = A[rows].cpu(), B[:, cols].cpu()
        exact = {torch.float64: accuracy.exact_matmul(A_rows, B_cols),
                 torch.float32: accuracy.exact_matmul(A_rows.float(), B_cols.float())}

        def errors(C, dtype):
            rel = accuracy.relative_errors(C[rows][:, cols].cpu(), exact[dtype])
            return float(np.median(rel)), float(np.max(rel))

        def record(label, dtype, fn, plan=None, profile=False):
            times = times_ms(fn, args.repeats)
            ms = statistics.median(times)
            C = fn()
            med, mx = errors(C, dtype)
            row = {"shape": [m, k, n], "label": label, "ms": ms, "tflops": flops / ms / 1e9,
                   "median_rel_err": med, "max_rel_err": mx,
                   "plan": str(plan) if plan is not None else None, "repeats_ms": times}
            if profile:
                row["breakdown_ms"] = breakdown(fn)
                row["host_issue_ms"] = host_issue_ms(fn, args.repeats)
                print(f"   host issue {row['host_issue_ms']:.2f} ms", flush=True)
            results.append(row)
            parts = "" if not profile else "  [" + ", ".join(
                f"{f} {t:.2f}" for f, t in sorted(row["breakdown_ms"].items(), key=lambda x: -x[1])) + "]"
            print(f"{m}x{k}x{n} {label:28s} {ms:9.2f} ms ({min(times):.2f}-{max(times):.2f}) "
                  f"{row['tflops']:7.1f} TFLOPS  "
                  f"err {med:.1e} / {mx:.1e}{parts}", flush=True)
            del C
            torch.cuda.empty_cache()
            return ms

        native64 = record("native dgemm", torch.float64, lambda: A @ B)
        torch.backends.cuda.matmul.allow_tf32 = False
        A32, B32 = A.float(), B.float()
        native32 = record("native sgemm", torch.float32, lambda: A32 @ B32)
        a8 = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
        b8 = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
        unit = time_ms(lambda: torch.ops.ozaki.int8_matmul(a8, b8), args.repeats)
        torch_unit = time_ms(lambda: torch._int_mm(a8, b8.t()), args.repeats) if m >= 17 else float("nan")
        print(f"{m}x{k}x{n} int8 gemm unit {unit:.3f} ms ({flops / unit / 1e9:.0f} TOPS); "
              f"torch._int_mm {torch_unit:.3f} ms ({flops / torch_unit / 1e9:.0f} TOPS)", flush=True)
        results.append({"shape": [m, k, n], "label": "int8 gemm unit", "ms": unit,
                        "torch_int_mm_ms": torch_unit})
        del a8, b8
        plan = ozaki.plan(A, B)
        t = record("dgemm default", torch.float64, lambda: ozaki.dgemm(A, B), plan, profile=True)
        print(f"   plan: {plan}; x native {native64 / t:.2f}", flush=True)
        for moduli in args.moduli:
            t = record(f"dgemm crt m={moduli}", torch.float64,
                       lambda: ozaki.dgemm(A, B, backend="crt", moduli=moduli), None, profile=moduli == 15)
            print(f"   x native {native64 / t:.2f}; INT8 floor {moduli * unit / t:.0%}", flush=True)
        plan32 = ozaki.plan(A32, B32)
        t = record("sgemm default", torch.float32, lambda: ozaki.sgemm(A32, B32), plan32, profile=True)
        print(f"   plan: {plan32}; x native {native32 / t:.2f}", flush=True)
        for moduli in args.sgemm_moduli:
            t = record(f"sgemm crt m={moduli}", torch.float32,
                       lambda: ozaki.sgemm(A32, B32, backend="crt", moduli=moduli), None,
                       profile=moduli == 7)
            print(f"   x native {native32 / t:.2f}; INT8 floor {moduli * unit / t:.0%}", flush=True)
        del A, B, A32, B32
        torch.cuda.empty_cache()
    with open(os.path.join(args.out, "profile.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
