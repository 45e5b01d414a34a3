"""The reconstruction's float64-first rounding (round_quotient_float64, csrc/crt.h): host code
compiled here with the system's C++ compiler (scripts/probes/reconstruct_float64_check.cpp) and
run on residues of exact integers of every kind that makes rounding hard (ties, near-ties, ties
below powers of two, exact quotients, overflow and subnormal results). crt_reconstruct with the
float64 rounding first returns the exact path's bits on every draw; the float64 rounding decides
most draws and never an exact tie; with a reciprocal off by up to 2^-40 whatever it decides is
still the exact rounding. The GPU runs the same source (its CPU == CUDA bits are in the scheme II
tests)."""

import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "probes" / "reconstruct_float64_check.cpp"
DRAWS = 300_000
LINE = re.compile(r"^(N=(\d+)|perturbed) draws (\d+) differing (\d+) decided (\d+)"
                  r"(?: ties (\d+) ties_decided (\d+))?$")


@pytest.fixture(scope="module")
def counts(tmp_path_factory):
    """{moduli count or "perturbed": (draws, differing, decided, ties, ties decided)}."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    program = tmp_path_factory.mktemp("float64_rounding") / "check"
    # no FMA contraction: the rounding's error-free transformations need each operation rounded
    subprocess.run([compiler, "-std=c++20", "-O2", "-ffp-contract=off", f"-I{ROOT / 'csrc'}",
                    str(CHECK), "-o", str(program)], check=True)
    run = subprocess.run([str(program), str(DRAWS)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    found = {}
    for line in run.stdout.splitlines():
        match = LINE.match(line)
        if match:
            key = int(match[2]) if match[2] else "perturbed"
            found[key] = tuple(int(g) if g is not None else None for g in match.groups()[2:])
    assert set(found) == {15, 16, 8, 12, "perturbed"}, run.stdout
    return found


@pytest.mark.parametrize("moduli_count", [8, 12, 15, 16])
def test_float64_first_reconstruction_returns_the_exact_paths_bits(counts, moduli_count):
    draws, differing, decided, ties, ties_decided = counts[moduli_count]
    assert draws == DRAWS and differing == 0
    # the float64 rounding is what decides most entries (else it saves nothing)...
    assert decided > 0.6 * draws
    # ...and never an exact tie, which it cannot tell from a near-tie: those go the exact way
    assert ties > 0.01 * draws and ties_decided == 0


def test_float64_rounding_with_a_reciprocal_off_by_2_to_the_minus_40_is_still_exact(counts):
    draws, differing, decided, _, _ = counts["perturbed"]
    assert draws == DRAWS and differing == 0 and decided > 0.9 * draws
