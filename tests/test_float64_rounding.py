"""The reconstruction's rounding in float64 arithmetic first (quotient_in_float64,
round_quotient_float64, round_quotient_float32 in csrc/crt.h): host code compiled here with the
system's C++ compiler (scripts/probes/reconstruct_float64_check.cpp) and run on residues of exact
integers of every kind that makes rounding hard (ties, near-ties, ties below powers of two, exact
quotients, overflow and subnormal results), for float64 and float32 results. crt_reconstruct with
the float64 arithmetic first returns the exact path's bits on every draw; that arithmetic decides
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
LINE = re.compile(r"^(float64|float32) (?:N=(\d+)|perturbed) draws (\d+) differing (\d+) "
                  r"decided (\d+)(?: ties (\d+) ties_decided (\d+))?$")
CASES = [("float64", 15), ("float64", 16), ("float64", 8), ("float64", 12), ("float32", 7),
         ("float32", 8), ("float32", 15)]
# the share of draws the float64 arithmetic must decide (measured: 0.73-0.93 for float64 results,
# 0.60-0.66 for float32; with the perturbed reciprocal 0.93 and 0.62)
DECIDED_AT_LEAST = {"float64": 0.6, "float32": 0.5}
PERTURBED_DECIDED_AT_LEAST = {"float64": 0.9, "float32": 0.5}


@pytest.fixture(scope="module")
def counts(tmp_path_factory):
    """{(format, moduli count or "perturbed"): (draws, differing, decided, ties, ties decided)}."""
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
            key = (match[1], int(match[2]) if match[2] else "perturbed")
            found[key] = tuple(int(g) if g is not None else None for g in match.groups()[2:])
    expected = set(CASES) | {("float64", "perturbed"), ("float32", "perturbed")}
    assert set(found) == expected, run.stdout
    return found


@pytest.mark.parametrize("case", CASES, ids=[f"{f}-{n}" for f, n in CASES])
def test_float64_first_reconstruction_returns_the_exact_paths_bits(counts, case):
    draws, differing, decided, ties, ties_decided = counts[case]
    assert draws == DRAWS and differing == 0
    # the float64 arithmetic decides most entries (else it saves nothing; many draws here are
    # ties, near-ties and results past the formats' ranges, which it leaves: more of them for
    # float32, whose range is narrower)...
    assert decided > DECIDED_AT_LEAST[case[0]] * draws
    # ...and never an exact tie, which it cannot tell from a near-tie: those go the exact way
    assert ties > 0.01 * draws and ties_decided == 0


@pytest.mark.parametrize("format_name", ["float64", "float32"])
def test_float64_rounding_with_a_reciprocal_off_by_2_to_the_minus_40_is_still_exact(counts,
                                                                                   format_name):
    draws, differing, decided, _, _ = counts[(format_name, "perturbed")]
    assert draws == DRAWS and differing == 0
    assert decided > PERTURBED_DECIDED_AT_LEAST[format_name] * draws
