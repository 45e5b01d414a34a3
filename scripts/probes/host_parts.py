"""Where the host's time of a default scheme-II call goes: the whole call against its parts, each
timed alone in a loop of calls on the same inputs (one synchronize per loop, so on a GPU the
host's time is what is measured for small products), with the call through the ozaki::gemm
operator beside the direct call that plain eager products take (ozaki/gemm_op.py, run_gemm).

    PYTHONPATH=src python3 scripts/probes/host_parts.py [--device cuda] [--sizes 64 1024]
"""

import argparse
import time

import torch

import ozaki
from ozaki import _ops, gemm_op, product, speculation
from ozaki.host_copy import HostCopy
from ozaki.options import Options


def per_call_us(call, device, calls=200, repeats=7):
    """The best of `repeats` averages over `calls` calls, in microseconds."""
    for _ in range(10):
        call()
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def parts(A, B):
    """(name, call) of the whole default call and of the steps it takes, on A @ B's operands."""
    options = Options()
    a, bt = product.row_operand(A), product.in_place_bt(B, options)
    est = product._estimates(a, bt, options)
    plan, inputs = product.plan_for(est, A.dtype, options)
    assert plan.backend == "crt" and not (plan.wide or plan.exact), plan
    scale_a, scale_b = inputs.scales(plan.moduli, est.k)
    values = est._values

    def via_operator():
        if not hasattr(gemm_op, "_direct"):  # a tree whose every call runs the operator
            return ozaki.dgemm(A, B)
        direct = gemm_op._direct
        gemm_op._direct = lambda *tensors: False
        try:
            return ozaki.dgemm(A, B)
        finally:
            gemm_op._direct = direct

    def plan_from_values():
        fresh = product.Estimates(a, bt, est.stats_a, est.stats_b, norms=est.norms,
                                  values=values)
        return product.plan_for(fresh, A.dtype, options)

    return [
        ("native A @ B", lambda: A @ B),
        ("ozaki.dgemm (direct)", lambda: ozaki.dgemm(A, B)),
        ("ozaki.dgemm (operator)", via_operator),
        ("  checks (operands, options)",
         lambda: (product.check_operands("ozaki.dgemm", A, B, A.dtype),
                  Options.checked("ozaki.dgemm"))),
        ("  row_operands (B's columns as rows)", lambda: product.row_operands(A, B)),
        ("  crt_plan_reads", lambda: _ops.crt_plan_reads(a, bt)),
        ("  HostCopy of the values", lambda: HostCopy(values).values()),
        ("  crt_row_scales x 2", lambda: inputs.scales(plan.moduli, est.k)),
        ("  gemm_crt", lambda: _ops.gemm_crt(a, bt, scale_a, scale_b, est.stats_a, est.stats_b,
                                             plan.moduli, _ops.workspace_bytes())),
        ("  plan_for (values read)", plan_from_values),
        ("  speculation guess + remember",
         lambda: (speculation.guess(est, A.dtype, options),
                  speculation.remember(est, A.dtype, options, plan))),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1024])
    args = parser.parse_args()
    torch.set_num_threads(1)
    for n in args.sizes:
        g = torch.Generator().manual_seed(n)
        A = torch.randn(n, n, generator=g, dtype=torch.float64).to(args.device)
        B = torch.randn(n, n, generator=g, dtype=torch.float64).to(args.device)
        print(f"== {n}^3 on {args.device}: microseconds per call ({ozaki.plan(A, B).moduli} moduli)")
        for name, call in parts(A, B):
            print(f"{name:34s} {per_call_us(call, args.device):9.1f}")


if __name__ == "__main__":
    main()
