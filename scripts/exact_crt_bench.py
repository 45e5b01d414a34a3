"""Exact and wide scheme II on the GPU against native (docs/benchmarks.md, "Exact and wide scheme
II").

    python scripts/exact_crt_bench.py [--out DIR] [--sizes N ...] [--draws D] [--repeats R]

Per case (the correctly rounded dgemm and sgemm, the default dgemm at phi 1 and 2, rows of wide
span) and size: the plan, the median time of the ozaki call and of native torch.matmul in the same
process, the peak memory the call adds beyond A and B (its output included; OZAKI_WORKSPACE_MB
sets the workspace), the INT8 GEMMs'
share (moduli x one INT8 GEMM of the full shape), and the max componentwise error of a sampled
grid of entries against the exact product (ozaki and native), over --draws fresh inputs; with
--profile, one call per case at the largest size split by kernel family. Prints a table and writes
exact_crt.json under --out.
"""
import argparse
import json
import os
import statistics

import numpy as np
import torch

import ozaki
from ozaki import accuracy
from ozaki.bench import time_call
from wide_span_bench import rescaled_units  # this folder: run as python scripts/...

GEMMS = {torch.float64: ozaki.dgemm, torch.float32: ozaki.sgemm}
SAMPLES = 8


def phi_inputs(n, phi, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    A = accuracy.phi_matrix(n, n, phi, generator=g, device="cuda", dtype=dtype)
    B = accuracy.phi_matrix(n, n, phi, generator=g, device="cuda", dtype=dtype)
    return A, B


def cases(sizes):
    for n in sizes:
        yield f"dgemm nearest, phi 0.5, {n}^3", n, torch.float64, "nearest", lambda s, n=n: phi_inputs(n, 0.5, torch.float64, s)
        yield f"dgemm default, phi 1, {n}^3", n, torch.float64, None, lambda s, n=n: phi_inputs(n, 1.0, torch.float64, s)
        yield f"dgemm default, phi 2, {n}^3", n, torch.float64, None, lambda s, n=n: phi_inputs(n, 2.0, torch.float64, s)
        yield f"sgemm nearest, phi 0.5, {n}^3", n, torch.float32, "nearest", lambda s, n=n: phi_inputs(n, 0.5, torch.float32, s)
    for n in (64, 4096):
        if n <= max(sizes):
            yield f"dgemm default, (AD)(D^-1B) 1e-20..1e20, {n}^3", n, torch.float64, None, lambda s, n=n: rescaled_units(
                n, 20, torch.float64, torch.Generator(device="cuda").manual_seed(s))


def sampled_errors(A, B, C, native, seed):
    g = torch.Generator().manual_seed(seed)
    rows, cols = accuracy.sample_entries(A.shape[0], B.shape[1], SAMPLES, generator=g)
    A_rows = A[rows].cpu().double()
    B_cols = B[:, cols].cpu().double()
    exact = accuracy.exact_matmul(A_rows, B_cols)
    out = {}
    for name, X in (("ozaki", C), ("native", native)):
        sampled = X[rows][:, cols].cpu()
        out[f"{name}_max_comp_err"] = float(np.max(accuracy.componentwise_errors(
            sampled.double(), exact, A_rows, B_cols)))
        out[f"{name}_rounded_share"] = accuracy.correctly_rounded_share(sampled, exact)
    return out


#: Kernel families of the time breakdown, by a part of the kernel's name (first match).
FAMILIES = (("residues", "residues"), ("reconstruct", "reconstruct"), ("INT8 GEMMs", "gemm"),
            ("INT8 GEMMs", "xmma"), ("INT8 GEMMs", "cutlass"), ("INT8 GEMMs", "sm90"),
            ("row statistics and norms", "row_stats"), ("row statistics and norms", "norm"),
            ("tables", "exact_table"), ("planning (bounds)", "reduce"),
            ("planning (bounds)", "elementwise"))


def kernel_breakdown(fn):
    """CUDA milliseconds of one call by kernel family (torch.profiler), the rest under 'other'."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = {}
    for event in prof.key_averages():
        ms = event.self_device_time_total / 1e3
        if ms <= 0:
            continue
        name = event.key.lower()
        family = next((f for f, part in FAMILIES if part in name), "other")
        out[family] = out.get(family, 0.0) + ms
    return out


def int8_gemm_ms(n, repeats):
    a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
    times, _ = time_call(lambda: ozaki._ops.int8_matmul(a, a), torch.device("cuda"), 1, repeats)
    return statistics.median(times)


def measure(label, n, dtype, rounding, make, draws, repeats, int8_ms, profile):
    device = torch.device("cuda")
    rows = []
    for seed in range(draws):
        A, B = make(seed)
        plan = ozaki.plan(A, B, rounding=rounding)
        gemm = GEMMS[dtype]
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        C = gemm(A, B, rounding=rounding)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base  # the output included
        del C
        ozaki_ms, C = time_call(lambda: gemm(A, B, rounding=rounding), device, 1, repeats)
        native_ms, native = time_call(lambda: A @ B, device, 1, repeats)
        row = {"case": label, "n": n, "seed": seed, "plan": str(plan), "backend": plan.backend,
               "moduli": plan.moduli, "gemms": plan.gemms, "exact": plan.exact,
               "ozaki_ms": statistics.median(ozaki_ms), "native_ms": statistics.median(native_ms),
               "peak_gib": peak / 2 ** 30}
        row["speedup"] = row["native_ms"] / row["ozaki_ms"]
        if plan.backend in ("crt", "int8") and n in int8_ms:
            row["int8_gemms_ms"] = plan.gemms * int8_ms[n]
        row.update(sampled_errors(A, B, C, native, seed))
        if profile and seed == 0:
            row["breakdown_ms"] = kernel_breakdown(lambda: gemm(A, B, rounding=rounding))
            print("    CUDA time by kernel family (ms): " + ", ".join(
                f"{f} {ms:.2f}" for f, ms in sorted(row["breakdown_ms"].items(), key=lambda x: -x[1])))
        rows.append(row)
        print(f"{label:48s} seed {seed}: {row['ozaki_ms']:9.2f} ms vs native {row['native_ms']:9.2f} ms "
              f"= {row['speedup']:.3f}x; {plan.backend} {plan.moduli or plan.slices} "
              f"({plan.gemms} GEMMs{', exact' if plan.exact else ''}); INT8 GEMMs "
              f"{row.get('int8_gemms_ms', float('nan')):.2f} ms; peak +{row['peak_gib']:.2f} GiB; "
              f"err {row['ozaki_max_comp_err']:.2e} (native {row['native_max_comp_err']:.2e}), "
              f"rounded share {row['ozaki_rounded_share']:.3f}", flush=True)
        del A, B, C, native
        torch.cuda.empty_cache()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384])
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="run only the cases whose label holds this")
    parser.add_argument("--profile", action="store_true",
                        help="split one call per case at the largest size by kernel family")
    args = parser.parse_args()
    int8_ms = {n: int8_gemm_ms(n, args.repeats) for n in args.sizes}
    print("one INT8 GEMM (ms):", {n: round(ms, 3) for n, ms in int8_ms.items()})
    rows = []
    for label, n, dtype, rounding, make in cases(args.sizes):
        if args.only and args.only not in label:
            continue
        rows += measure(label, n, dtype, rounding, make, args.draws, args.repeats, int8_ms,
                        args.profile and n == max(args.sizes))
    with open(os.path.join(args.out, "exact_crt.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "int8_gemm_ms": int8_ms, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
