"""Quick timing probe used during development (the full benchmark is python -m ozaki.bench):
ozaki dgemm at 8192^3 (or argv[1]) for a few slice counts and workspace budgets."""
import os
import sys

import torch

import ozaki
from ozaki import accuracy

n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
g = torch.Generator().manual_seed(0)
A = accuracy.phi_matrix(n, n, 0.5, generator=g).cuda()
B = accuracy.phi_matrix(n, n, 0.5, generator=g).cuda()


def time_ms(fn, reps=5):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


flops = 2 * n ** 3
h = torch.randn(n, n, device="cuda").half()
t16 = time_ms(lambda: torch.mm(h, h, out_dtype=torch.float32))
print(f"fp16->fp32 gemm {t16:.2f} ms {flops / t16 / 1e9:.1f} TFLOPS")
for budget_mb in ["", "20000", "4096"]:
    os.environ["OZAKI_WORKSPACE_MB"] = budget_mb
    for s, fast in [(9, True), (10, True)]:
        t = time_ms(lambda: ozaki.dgemm(A, B, slices=s, fast=fast))
        gemms = ozaki.plan(A, B, slices=s, fast=fast).gemms
        print(f"budget {budget_mb or 'default'} MB: s={s} fast={fast} {t:.2f} ms "
              f"{flops / t / 1e9:.2f} TFLOPS ({gemms * t16 / t:.2f} of floor)")
os.environ["OZAKI_WORKSPACE_MB"] = ""
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    ozaki.dgemm(A, B, slices=10, fast=True)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
