#!/usr/bin/env bash
# Installs ozaki and everything it needs, from scratch, into the current Python.
# The CUDA backend is built when torch has CUDA and nvcc is found (CUDA_HOME, or /usr/local/cuda);
# set OZAKI_FORCE_CPU=1 to skip it, OZAKI_FORCE_CUDA=1 to fail rather than skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# matplotlib, nbclient, nbformat and ipykernel: the notebooks, their figures and their test
"$PYTHON" -m pip install -q "torch==2.14.1" numpy mpmath pytest ninja pybind11 setuptools wheel \
  matplotlib nbclient nbformat ipykernel
if [[ -z "${CUDA_HOME:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDA_HOME=/usr/local/cuda
fi
"$PYTHON" -m pip install -q --no-build-isolation --no-deps -e .
"$PYTHON" -c 'import ozaki, ozaki._ops as o; print("ozaki", ozaki.__version__, "installed; CUDA backend:", o.cuda_backend_built())'
