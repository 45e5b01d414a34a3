"""Build switch for ozaki._C: CPU sources always, CUDA sources when torch has CUDA and a CUDA
toolkit (nvcc and the CUDA runtime library) is found: $CUDA_HOME, $CUDA_PATH, torch's guess, the
toolkit of the nvcc on PATH, /usr/local/cuda, the first that has both. Without one the CPU backend
is built, with a message saying why.

Scheme II's reduced residue GEMM (csrc/cuda/reduced_gemm.cu) is built when the targets include
sm_90a and CUTLASS's headers are found ($OZAKI_CUTLASS_INCLUDE, else the nvidia-cutlass
package's); without them the CUDA backend takes its other scheme-II paths, with a message saying
why.

Environment overrides: OZAKI_FORCE_CPU=1 builds the CPU backend only; OZAKI_FORCE_CUDA=1 fails
instead of silently dropping the CUDA backend or its reduced GEMM; OZAKI_CUDA_ARCHS (default
"90a": Hopper, whose warpgroup MMAs need the "a" target) lists the targets to build machine code
for.
"""

import glob
import importlib.util
import os
import shutil
import sys

from setuptools import setup
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.abspath(__file__))

# The summation must not be contracted into FMAs or reassociated (docs/algorithm.md, "Sum").
CXX_FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math"]
# Link the C++ runtime dynamically, as torch does, even where the compiler links it statically by
# default (some toolchains wrap g++ so): a private static copy of libstdc++ in ozaki._C throws
# exceptions that torch's copy cannot catch, so every operator error crashed the process.
SHARED_CXX_RUNTIME = ["-l:libstdc++.so.6"] if sys.platform.startswith("linux") else []
NVCC_FLAGS = ["-O3", "-fmad=false", "--ftz=false", "--prec-div=true",
              "--prec-sqrt=true", "-Xcompiler", "-ffp-contract=off"]


def env_flag(name):
    return os.environ.get(name, "0") not in ("", "0")


def find_cuda_home():
    """The first candidate toolkit with bin/nvcc and the CUDA runtime library (torch guesses
    /usr/local when nvcc lies in /usr/local/bin, where no libcudart is: linking then failed)."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), cpp_extension.CUDA_HOME]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    candidates.append("/usr/local/cuda")
    for home in candidates:
        if not home or not os.path.exists(os.path.join(home, "bin", "nvcc")):
            continue
        runtime = (glob.glob(os.path.join(home, "lib*", "libcudart.so*"))
                   + glob.glob(os.path.join(home, "targets", "*", "lib", "libcudart.so*")))
        if runtime:
            return home
    return None


def cuda_library_dirs():
    """cuBLAS headers and libraries: the toolkit's own, else those of torch's nvidia wheels."""
    include_dirs, library_dirs, link_args = [], [], []
    home = cpp_extension.CUDA_HOME
    if not os.path.exists(os.path.join(home, "include", "cublas_v2.h")):
        import nvidia  # installed with torch's CUDA wheels

        for base in nvidia.__path__:
            for sub in glob.glob(os.path.join(base, "cu*")):
                if os.path.exists(os.path.join(sub, "include", "cublas_v2.h")):
                    include_dirs.append(os.path.join(sub, "include"))
                    library_dirs.append(os.path.join(sub, "lib"))
        if not include_dirs:
            raise RuntimeError("cublas_v2.h found neither in CUDA_HOME nor in torch's nvidia wheels")
    libs = glob.glob(os.path.join(home, "lib64", "libcublas.so*")) or [
        lib for d in library_dirs for lib in glob.glob(os.path.join(d, "libcublas.so*"))]
    if not libs:
        raise RuntimeError("libcublas.so not found in CUDA_HOME/lib64 nor in torch's nvidia wheels")
    for lib in libs:
        library_dirs.append(os.path.dirname(lib))
    # Link the exact soname: the wheels ship libcublas.so.13 without the unversioned link.
    link_args.append("-l:" + os.path.basename(min(libs, key=len)))
    return include_dirs, sorted(set(library_dirs)), link_args


def cutlass_include():
    """The folder holding cutlass/cutlass.h: $OZAKI_CUTLASS_INCLUDE, else the nvidia-cutlass
    package's (cutlass_library/source/include, found without importing the package), else None."""
    given = os.environ.get("OZAKI_CUTLASS_INCLUDE")
    candidates = [given] if given else []
    spec = importlib.util.find_spec("cutlass_library")
    if not given and spec is not None and spec.submodule_search_locations:
        candidates += [os.path.join(base, "source", "include")
                       for base in spec.submodule_search_locations]
    for path in candidates:
        if os.path.exists(os.path.join(path, "cutlass", "cutlass.h")):
            return path
    if given:
        raise RuntimeError(f"OZAKI_CUTLASS_INCLUDE={given} holds no cutlass/cutlass.h")
    return None


def gencode(arch):
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def make_extension():
    cpu_sources = sorted(glob.glob("csrc/*.cpp")) + sorted(glob.glob("csrc/cpu/*.cpp"))
    cuda_sources = sorted(glob.glob("csrc/cuda/*.cu"))
    import torch

    home = find_cuda_home()
    want_cuda = torch.version.cuda is not None and home is not None and bool(cuda_sources)
    why = ("OZAKI_FORCE_CPU=1" if env_flag("OZAKI_FORCE_CPU")
           else f"torch {torch.__version__} has no CUDA" if torch.version.cuda is None
           else "no CUDA toolkit with nvcc and libcudart was found (set CUDA_HOME)" if home is None
           else None)
    if env_flag("OZAKI_FORCE_CPU"):
        want_cuda = False
    elif env_flag("OZAKI_FORCE_CUDA") and not want_cuda:
        raise RuntimeError(f"OZAKI_FORCE_CUDA=1 but the CUDA backend cannot be built: {why}")
    if not want_cuda:
        print(f"ozaki: building the CPU backend only ({why})")
        return cpp_extension.CppExtension(
            "ozaki._C", cpu_sources, extra_compile_args={"cxx": CXX_FLAGS},
            extra_link_args=SHARED_CXX_RUNTIME, py_limited_api=False)
    cpp_extension.CUDA_HOME = home  # the toolkit found above compiles and links the extension
    os.environ["CUDA_HOME"] = home
    archs = os.environ.get("OZAKI_CUDA_ARCHS", "90a").split(",")
    nvcc_flags = NVCC_FLAGS + [gencode(a) for a in archs]
    include_dirs, library_dirs, link_args = cuda_library_dirs()
    cutlass = cutlass_include()
    reduced_why = ("the targets do not include sm_90a" if "90a" not in archs
                   else "no CUTLASS headers (pip install nvidia-cutlass, or set "
                        "OZAKI_CUTLASS_INCLUDE)" if cutlass is None else None)
    if reduced_why is None:
        include_dirs.append(cutlass)
        # CUTLASS's own sources warn about lambdas capturing this implicitly (#2908).
        nvcc_flags += ["-DOZAKI_REDUCED_GEMM", "--diag-suppress=2908"]
    elif env_flag("OZAKI_FORCE_CUDA"):
        raise RuntimeError(f"OZAKI_FORCE_CUDA=1 but the reduced residue GEMM cannot be built: "
                           f"{reduced_why}")
    print(f"ozaki: building the CPU and CUDA backends (sm_{', sm_'.join(archs)}); "
          + ("with the reduced residue GEMM" if reduced_why is None
             else f"without the reduced residue GEMM ({reduced_why})"))
    return cpp_extension.CUDAExtension(
        "ozaki._C", cpu_sources + cuda_sources,
        include_dirs=include_dirs, library_dirs=library_dirs,
        extra_link_args=link_args + SHARED_CXX_RUNTIME,
        extra_compile_args={"cxx": CXX_FLAGS, "nvcc": nvcc_flags})


setup(
    ext_modules=[make_extension()],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
)
