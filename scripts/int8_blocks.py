"""INT8 GEMM unit time of ozaki's column-blocked cublasGemmEx for several block widths
(OZAKI_INT8_BLOCK is read once per process, so each width runs in its own process)."""
import os
import subprocess
import sys

CHILD = r"""
import sys, torch, ozaki
n = int(sys.argv[1])
a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
b = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
for _ in range(2):
    torch.ops.ozaki.int8_matmul(a, b)
times = []
for _ in range(7):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); torch.ops.ozaki.int8_matmul(a, b); e.record(); e.synchronize()
    times.append(s.elapsed_time(e))
ms = sorted(times)[3]
print(f"n={n} block={sys.argv[2]}: {ms:.3f} ms {2 * n ** 3 / ms / 1e9:.0f} TOPS", flush=True)
"""
for n in (8192, 16384):
    for block in ("2048", "4096", "8192", "16384"):
        env = dict(os.environ, OZAKI_INT8_BLOCK=block)
        subprocess.run([sys.executable, "-c", CHILD, str(n), block], env=env, check=False)
