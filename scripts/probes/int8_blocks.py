"""INT8 GEMM unit time of ozaki's column-blocked cublasGemmEx for several block widths and the
output shapes gemm_crt's chunks give (OZAKI_INT8_BLOCK is read once per process, so each width
runs in its own process; "rule" is the built-in choice).

    python scripts/probes/int8_blocks.py            # rows x cols x k of the chunks at 8192^3, 16384^3, ...
"""
import os
import subprocess
import sys

CHILD = r"""
import sys, torch, ozaki
rows, cols, k = map(int, sys.argv[1:4])
a = torch.randint(-128, 128, (rows, k), dtype=torch.int8, device="cuda")
b = torch.randint(-128, 128, (cols, k), dtype=torch.int8, device="cuda")
for _ in range(2):
    torch.ops.ozaki.int8_matmul(a, b)
times = []
for _ in range(7):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); torch.ops.ozaki.int8_matmul(a, b); e.record(); e.synchronize()
    times.append(s.elapsed_time(e))
ms = sorted(times)[3]
print(f"rows={rows} cols={cols} k={k} block={sys.argv[4]}: {ms:.3f} ms "
      f"{2 * rows * cols * k / ms / 1e9:.0f} TOPS", flush=True)
"""
# (rows, cols, k): the per-chunk GEMMs of 8192^3, 16384^3 (two column chunks of 8192),
# 16384 x 4096 x 16384 and 8192 x 16384 columns.
SHAPES = [(8192, 8192, 8192), (16384, 8192, 16384), (16384, 8192, 4096), (8192, 16384, 8192),
          (4096, 4096, 4096)]
for rows, cols, k in SHAPES:
    for block in ("rule", "4096", "8192"):
        env = dict(os.environ)
        env.pop("OZAKI_INT8_BLOCK", None)
        if block != "rule":
            if int(block) > cols:
                continue
            env["OZAKI_INT8_BLOCK"] = block
        subprocess.run([sys.executable, "-c", CHILD, str(rows), str(cols), str(k), block], env=env,
                       check=False)
