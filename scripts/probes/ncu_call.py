"""One scheme-II product for Nsight Compute: ozaki.dgemm on fresh data, a single call.

    ncu --clock-control none --kernel-name regex:'device_kernel|reconstruct' \
        python3 scripts/probes/ncu_call.py M K N [MODULI]

MODULI: a fixed count (default 15), or "auto" for the default call (its plan's reads included).
"""
import sys

import torch

import ozaki

m, k, n = (int(v) for v in sys.argv[1:4])
given = sys.argv[4] if len(sys.argv) > 4 else "15"
moduli = None if given == "auto" else int(given)
generator = torch.Generator(device="cuda").manual_seed(1)
a = torch.randn(m, k, dtype=torch.float64, device="cuda", generator=generator)
b = torch.randn(k, n, dtype=torch.float64, device="cuda", generator=generator)
c = ozaki.dgemm(a, b, moduli=moduli)
torch.cuda.synchronize()
print("done", tuple(c.shape), float(c.abs().max()))
