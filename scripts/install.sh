#!/usr/bin/env bash
# Installs ozaki and what it needs into the current Python (a virtual environment is best).
# torch: an installed torch >= 2.4 is kept; only where there is none (or an older one) is
# torch==2.14.1 installed (OZAKI_TORCH overrides that pin). The CUDA backend is built when torch
# has CUDA and a CUDA toolkit is found (setup.py); OZAKI_FORCE_CPU=1 skips it, OZAKI_FORCE_CUDA=1
# fails rather than skip it. OZAKI_EDITABLE=1 installs in editable mode (for development: Python
# changes apply without reinstalling).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys, torch; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(v < (2, 4))' 2>/dev/null; then
  "$PYTHON" -m pip install -q "${OZAKI_TORCH:-torch==2.14.1}"
fi
# matplotlib, nbclient, nbformat and ipykernel: the notebooks, their figures and their test
"$PYTHON" -m pip install -q numpy mpmath pytest ninja pybind11 setuptools wheel \
  matplotlib nbclient nbformat ipykernel
# CUTLASS's headers, for scheme II's reduced residue GEMM (only its headers are used: its Python
# dependencies are not needed)
"$PYTHON" -m pip install -q --no-deps nvidia-cutlass==4.2.0.0
editable=()
[[ ${OZAKI_EDITABLE:-0} == 1 ]] && editable=(-e)
# --no-build-isolation: the extension is built against the torch installed here, the one it runs
# with (an isolated build would compile against a separately downloaded torch)
"$PYTHON" -m pip install -q --no-build-isolation --no-deps "${editable[@]}" .
cd /  # import the installed package, not the source folder
"$PYTHON" -c 'import ozaki, ozaki._ops as o; print("ozaki", ozaki.__version__, "installed; CUDA backend:", o.cuda_backend_built())'
