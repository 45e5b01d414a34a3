"""Tests for ozaki.study: the error sweep (rows, CSV, summary, exact references), the
reproducibility check (verdict on identical and on differing bits) and argument errors."""

import contextlib
import csv
import io
import math
import os
import warnings
from fractions import Fraction
from pathlib import Path

import pytest
import torch

import ozaki
from ozaki import accuracy, plots
from ozaki.study import __main__ as cli
from ozaki.study import errors, reproducibility

from helpers import assert_usage_error, cpu_and_cuda

SMALL = ["accuracy", "--device", "cpu", "--phi", "0.5", "3", "--k", "16", "100", "--size", "6",
         "--slices", "1", "2", "5", "--quiet"]


@pytest.fixture(scope="module")
def study_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("study") / "errors.csv"
    assert cli.main(SMALL + ["--csv", str(path)]) == 0
    return path


def test_csv_has_every_case_and_method(study_csv):
    with open(study_csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == errors.CSV_COLUMNS
    # 2 dtypes x 2 phi x 2 k cases; per case: native, 3 fast, 3 all pairs, auto, nearest
    assert len(rows) == 8 * 9
    case = [r for r in rows if (r["dtype"], r["phi"], r["k"]) == ("float64", "3.0", "100")]
    assert [(r["mode"], r["slices"]) for r in case] == (
        [("native", "")] + [("fast", s) for s in "125"] + [("all-pairs", s) for s in "125"]
        + [("auto", case[7]["slices"]), ("nearest", case[8]["slices"])])
    assert {r["device"] for r in rows} == {"cpu"}


def test_default_backend_is_fp16_as_in_the_committed_study(study_csv):
    with open(study_csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["backend"] for r in rows if r["mode"] != "native"} == {"fp16"}
    assert {r["plan_backend"] for r in rows if r["mode"] != "native"} == {"fp16"}
    assert {(r["backend"], r["moduli"]) for r in rows if r["mode"] == "native"} == {("", "")}
    assert {r["moduli"] for r in rows} == {""}
    # the automatic rows are scheme I with FP16 slices, as the committed H100 rows
    generator = torch.Generator().manual_seed(0)
    A = accuracy.phi_matrix(6, 100, 3.0, generator)
    B = accuracy.phi_matrix(100, 6, 3.0, generator)
    row = next(r for r in rows if (r["dtype"], r["phi"], r["k"], r["mode"])
               == ("float64", "3.0", "100", "auto"))
    plan = ozaki.plan(A, B, backend="fp16")
    assert (int(row["slices"]), row["fast"] == "True") == (plan.slices, plan.fast)


def test_study_rows_match_an_independent_computation(study_csv):
    rows = plots.load_study_csv(study_csv)
    row = next(r for r in rows if (r["dtype"], r["phi"], r["k"], r["mode"], r["slices"])
               == ("float32", 0.5, 100, "fast", 2))
    # redraw the case's inputs the documented way and recompute the error with mpmath references
    generator = torch.Generator().manual_seed(0)
    A = accuracy.phi_matrix(6, 100, 0.5, generator, torch.float32)
    B = accuracy.phi_matrix(100, 6, 0.5, generator, torch.float32)
    C = ozaki.sgemm(A, B, slices=2, fast=True)
    exact = accuracy.exact_matmul(A, B, method="mpmath")
    assert row["max_comp_err"] == accuracy.componentwise_error(C, exact, A, B)
    assert row["rounded_share"] == accuracy.correctly_rounded_share(C, exact)
    assert row["gemms"] == 3 and row["fast"] is True


def test_errors_fall_with_slices_and_nearest_rounds_every_entry(study_csv):
    rows = plots.load_study_csv(study_csv)
    for dtype in ("float64", "float32"):
        for phi in (0.5, 3.0):
            case = [r for r in rows if (r["dtype"], r["phi"], r["k"]) == (dtype, phi, 100)]
            fast = [r["max_comp_err"] for r in case if r["mode"] == "fast"]
            assert fast[0] > fast[1] > fast[2]
            native = next(r for r in case if r["mode"] == "native")
            auto = next(r for r in case if r["mode"] == "auto")
            assert auto["max_comp_err"] <= native["max_comp_err"]
            nearest = next(r for r in case if r["mode"] == "nearest")
            assert nearest["rounded_share"] == 1.0


def test_summary_names_native_level_and_plan(study_csv):
    rows = plots.load_study_csv(study_csv)
    summary = errors.summarize(rows)
    assert len(summary) == 8
    line = next(s for s in summary if s["case"] == "float64 phi=0.5 k=16")
    native = next(r for r in rows if (r["dtype"], r["phi"], r["k"], r["mode"])
                  == ("float64", 0.5, 16, "native"))
    assert line["native max comp err"] == f"{native['max_comp_err']:.1e}"
    assert line["nearest RN share"] == "100.0%"
    reaching = [r["slices"] for r in rows if (r["dtype"], r["phi"], r["k"], r["mode"])
                == ("float64", 0.5, 16, "fast") and r["max_comp_err"] <= native["max_comp_err"]]
    assert line["fast s at native level"] == (str(min(reaching)) if reaching else "")


def test_cases_inputs_depend_only_on_seed_and_case():
    case = errors.Case(torch.float64, 1.0, 33, 5)
    A1, B1 = case.inputs(7, "cpu")
    errors.Case(torch.float64, 2.0, 12, 5).inputs(7, "cpu")
    A2, B2 = case.inputs(7, "cpu")
    assert torch.equal(A1, A2) and torch.equal(B1, B2)
    assert not torch.equal(A1, case.inputs(8, "cpu")[0])


def test_stdout_has_the_summary_and_progress_goes_to_stderr(capsys):
    assert cli.main(["accuracy", "--device", "cpu", "--phi", "1", "--k", "8", "--size", "4",
                     "--dtype", "float64", "--modes", "auto", "nearest"]) == 0
    out, err = capsys.readouterr()
    assert "float64 phi=1 k=8" in out and "native max comp err" in out
    assert "1/1" in err and "accuracy [" in err


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_reproducibility_verdict_when_bits_agree(device, capsys):
    devices = ["cpu"] + ([device] if device != "cpu" else [])
    code = cli.main(["reproducibility", "--shape", "9", "70", "11", "--shape", "3", "5", "2",
                     "--threads", "1", "2", "--devices", *devices, "--quiet"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    settings = 2 + (2 if device != "cpu" else 0)
    compared = 2 * len(reproducibility.PRODUCTS) * (settings * 2 - 1)
    assert out[-1].startswith(f"REPRODUCIBLE: {len(reproducibility.PRODUCTS)} products x 2 "
                              f"shapes, {compared} results bitwise identical across cpu "
                              "threads=1, cpu threads=2")


def test_reproducibility_reports_a_difference(monkeypatch, capsys):
    real = reproducibility.compute

    def flaky(setting, dtype, options, A, B):
        C = real(setting, dtype, options, A, B)
        if setting.threads == 2 and options.get("rounding") == "nearest":
            C[1, 2] = torch.nextafter(C[1, 2], torch.tensor(math.inf, dtype=C.dtype))
        return C

    monkeypatch.setattr(reproducibility, "compute", flaky)
    code = cli.main(["reproducibility", "--shape", "4", "30", "5", "--threads", "1", "2",
                     "--devices", "cpu", "--quiet"])
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1
    # dgemm and sgemm nearest of each default backend (fp16, int8, crt), both runs on 2 threads
    compared = len(reproducibility.PRODUCTS) * 3
    assert verdict.startswith(f"NOT REPRODUCIBLE: 12 of {compared} results differ from cpu "
                              "threads=1 run 1; ")
    assert "first: dgemm fp16 nearest 4x30x5 on cpu threads=2 run 1, 1 entries differ (first at " \
           "[1, 2])" in verdict


def test_negative_zero_and_nan_payloads_count_as_differences():
    a = torch.tensor([[0.0, float("nan")]], dtype=torch.float64)
    b = torch.tensor([[-0.0, float("nan")]], dtype=torch.float64)
    assert reproducibility.differing_entries(a, b) == (1, (0, 0))
    payload = a.clone().view(torch.int64)
    payload[0, 1] = 0x7FF8000000000001
    assert reproducibility.differing_entries(payload.view(torch.float64), a)[0] == 1
    assert reproducibility.differing_entries(a, a.clone()) == (0, None)


@pytest.mark.parametrize("argv,message", [
    (["accuracy", "--k", "0"], "argument --k: must be a positive integer, got '0'"),
    (["accuracy", "--k", "4194305"], "argument --k: k must be at most 2^22"),
    (["accuracy", "--phi", "-1"], "argument --phi: must be a finite number >= 0, got '-1'"),
    (["accuracy", "--slices", "41"], "argument --slices: slice counts must be integers in 1..40"),
    (["accuracy", "--modes", "fastest"], "argument --modes: invalid choice: 'fastest'"),
    (["accuracy", "--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    (["accuracy", "--device", "tpu"], "argument --device: expected cpu, cuda or cuda:I, got 'tpu'"),
    (["accuracy", "--csv", "/no/such/folder/x.csv"], "argument --csv: folder '/no/such/folder'"),
    (["reproducibility", "--threads", "0"], "argument --threads: must be a positive integer"),
    (["reproducibility", "--shape", "2", "4194305", "2"], "argument --shape: k = 4194305 exceeds"),
    (["reproducibility", "--devices", "gpu"], "argument --devices: expected cpu, cuda or cuda:I"),
    (["reproducibility", "--repeats", "0"], "argument --repeats: must be a positive integer"),
    ([], "the following arguments are required: COMMAND"),
])
def test_bad_arguments_name_the_argument_and_value(argv, message, capsys):
    assert_usage_error(cli.parse_args, argv, message, capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_cuda_device_without_cuda(capsys):
    with pytest.raises(SystemExit):
        cli.parse_args(["reproducibility", "--devices", "cpu", "cuda"])
    assert "'cuda' requested but torch.cuda.is_available() is False" in capsys.readouterr().err


def test_magnitudes_argument_gives_the_same_componentwise_errors():
    generator = torch.Generator().manual_seed(3)
    A = accuracy.phi_matrix(5, 40, 2.0, generator)
    B = accuracy.phi_matrix(40, 4, 2.0, generator)
    C = ozaki.dgemm(A, B, slices=2)
    exact = accuracy.exact_matmul(A, B)
    magnitudes = accuracy.exact_matmul(A.abs(), B.abs())
    given = accuracy.componentwise_errors(C, exact, A, B, magnitudes=magnitudes)
    assert (given == accuracy.componentwise_errors(C, exact, A, B)).all()
    assert given.max() > 0
    with pytest.raises(ValueError, match="magnitudes must have the shape of E"):
        accuracy.componentwise_errors(C, exact, A, B, magnitudes=magnitudes[:2])
    with pytest.raises(TypeError, match="magnitudes must hold exact rationals"):
        accuracy.componentwise_errors(C, exact, A, B, magnitudes=[[0.5] * 4] * 5)
    assert Fraction(magnitudes[0, 0]) > 0


BACKENDS_SMALL = ["accuracy", "--device", "cpu", "--phi", "1", "--k", "16", "--size", "4",
                  "--slices", "1", "2", "--moduli", "6", "14", "--backends", "crt", "int8",
                  "--quiet"]


@pytest.fixture(scope="module")
def backends_run(tmp_path_factory):
    """(CSV path, stdout) of a study of backends crt and int8."""
    path = tmp_path_factory.mktemp("backends") / "errors.csv"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(BACKENDS_SMALL + ["--csv", str(path)]) == 0
    return path, out.getvalue()


def test_backends_give_their_own_modes(backends_run):
    path, _ = backends_run
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == errors.CSV_COLUMNS
    assert errors.CSV_COLUMNS.index("backend") == errors.CSV_COLUMNS.index("mode") + 1
    # per case: native; crt: 2 moduli counts, auto, nearest; int8: 2 fast, 2 all pairs, auto,
    # nearest
    assert len(rows) == 2 * 11
    case = [r for r in rows if r["dtype"] == "float64"]
    assert [(r["mode"], r["backend"], r["slices"], r["moduli"]) for r in case] == (
        [("native", "", "", "")]
        + [("moduli", "crt", "", "6"), ("moduli", "crt", "", "14")]
        + [("auto", "crt", "", case[3]["moduli"]), ("nearest", "crt", "", case[4]["moduli"])]
        + [("fast", "int8", s, "") for s in "12"] + [("all-pairs", "int8", s, "") for s in "12"]
        + [("auto", "int8", case[9]["slices"], ""), ("nearest", "int8", case[10]["slices"], "")])
    assert [r["plan_backend"] for r in case] == ["", "crt", "crt", "crt", "crt"] + ["int8"] * 6
    assert [r["gemms"] for r in case[1:3]] == ["6", "14"]  # one INT8 GEMM per modulus
    assert {r["rounded_share"] for r in rows if r["mode"] == "nearest"} == {"1.0"}


def test_backend_rows_match_an_independent_computation(backends_run):
    rows = plots.load_study_csv(backends_run[0])
    generator = torch.Generator().manual_seed(0)
    A = accuracy.phi_matrix(4, 16, 1.0, generator, torch.float32)
    B = accuracy.phi_matrix(16, 4, 1.0, generator, torch.float32)
    exact = accuracy.exact_matmul(A, B)
    for mode, backend, options in [("moduli", "crt", {"moduli": 14}), ("auto", "crt", {}),
                                   ("fast", "int8", {"slices": 2, "fast": True})]:
        row = next(r for r in rows if (r["dtype"], r["mode"], r["backend"]) == ("float32", mode,
                                                                                  backend)
                   and all(r[name] == value for name, value in options.items()))
        C = ozaki.sgemm(A, B, backend=backend, **options)
        assert row["max_comp_err"] == accuracy.componentwise_error(C, exact, A, B), (mode, backend)
        plan = ozaki.plan(A, B, backend=backend, **options)
        assert (row["moduli"], row["slices"], row["gemms"]) == (plan.moduli, plan.slices,
                                                                plan.gemms)


def test_summary_has_a_line_per_case_and_backend(backends_run):
    path, out = backends_run
    rows = plots.load_study_csv(path)
    summary = errors.summarize(rows)
    assert [(s["case"], s["backend"]) for s in summary] == [
        ("float64 phi=1 k=16", "crt"), ("float64 phi=1 k=16", "int8"),
        ("float32 phi=1 k=16", "crt"), ("float32 phi=1 k=16", "int8")]
    crt = summary[0]
    auto = next(r for r in rows if (r["dtype"], r["mode"], r["backend"])
                == ("float64", "auto", "crt"))
    assert crt["auto plan"] == f"{auto['moduli']} moduli"
    assert crt["fast s at native level"] == "" and "moduli at native level" in crt
    assert summary[1]["auto plan"].endswith(("fast", "all pairs"))
    assert "backends crt int8" in out.splitlines()[0]
    assert "moduli at native level" in out
    assert [line.split()[:4] for line in out.splitlines() if line.startswith("float32")] == [
        ["float32", "phi=1", "k=16", "crt"], ["float32", "phi=1", "k=16", "int8"]]


def test_backend_auto_runs_the_automatic_plan_and_nearest(tmp_path):
    path = tmp_path / "auto.csv"
    assert cli.main(["accuracy", "--device", "cpu", "--phi", "0.5", "--k", "16", "--size", "4",
                     "--dtype", "float64", "--backends", "auto", "--quiet", "--csv",
                     str(path)]) == 0
    rows = plots.load_study_csv(path)
    assert [(r["mode"], r["backend"]) for r in rows] == [("native", None), ("auto", "auto"),
                                                        ("nearest", "auto")]
    generator = torch.Generator().manual_seed(0)
    A = accuracy.phi_matrix(4, 16, 0.5, generator)
    B = accuracy.phi_matrix(16, 4, 0.5, generator)
    plan = ozaki.plan(A, B, backend="auto")
    assert rows[1]["plan_backend"] == plan.backend
    summary = errors.summarize(rows)
    assert "backend" not in summary[0]
    assert summary[0]["auto plan"].startswith(f"{plan.backend} ")


def test_every_study_call_names_its_backend(monkeypatch):
    seen = []
    for name in ("dgemm", "sgemm", "plan"):
        real = getattr(ozaki, name)

        def spy(A, B, real=real, **options):
            seen.append(options.get("backend"))
            return real(A, B, **options)

        monkeypatch.setattr(ozaki, name, spy)
    cases = errors.cases_for([torch.float64, torch.float32], [1.0], [8], 3)
    errors.error_study(cases, errors.MODES, [1], 0, torch.device("cpu"),
                       backends=errors.BACKENDS, moduli=[6])
    assert seen and set(seen) == set(errors.BACKENDS)
    seen.clear()
    reproducibility.check([(3, 8, 2)], [torch.device("cpu")], [1], repeats=2,
                          backends=reproducibility.BACKENDS)
    assert set(seen) == set(reproducibility.BACKENDS)
    assert len(seen) == 2 * len(reproducibility.products(reproducibility.BACKENDS))


def test_committed_study_without_the_backend_column_loads_as_fp16():
    path = Path(__file__).resolve().parents[1] / "docs" / "results" / "h100" / "study-fp16-2026-11-22.csv"
    with open(path, newline="") as handle:
        assert "backend" not in next(csv.reader(handle))
    rows = plots.load_study_csv(path)
    assert {r["backend"] for r in rows if r["mode"] != "native"} == {"fp16"}
    assert {r["backend"] for r in rows if r["mode"] == "native"} == {None}
    assert {r["moduli"] for r in rows} == {None}
    summary = errors.summarize(rows)
    assert "backend" not in summary[0] and "moduli at native level" not in summary[0]
    assert summary[0]["auto plan"].endswith(("fast", "all pairs"))


def test_error_study_sweeps_short_counts_without_warnings():
    """The study runs counts short of the error bound on purpose and measures them: the
    AccuracyWarning each of those calls would raise (dozens per run, burying the progress lines)
    stays out of its output."""
    cases = errors.cases_for([torch.float64], [1.0], [64], 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ozaki.fixed_counts.AccuracyWarning)
        rows = errors.error_study(cases, ["fast"], [1, 2], 0, torch.device("cpu"))
    assert [row["slices"] for row in rows if row["mode"] == "fast"] == [1, 2]
    with pytest.warns(ozaki.fixed_counts.AccuracyWarning):
        ozaki.dgemm(*cases[0].inputs(0, torch.device("cpu")), slices=1)


def test_error_study_rejects_an_unknown_backend_and_short_moduli():
    cases = errors.cases_for([torch.float64], [1.0], [4096], 2)
    with pytest.raises(ValueError, match="backends must be among fp16, int8, crt, auto, got "
                                         "'fp32'"):
        errors.error_study(cases, errors.MODES, [1], 0, torch.device("cpu"), backends=["fp32"])
    with pytest.raises(ValueError, match=r"1 moduli leave no scale for k = 4096 \(backend crt "
                                         r"needs at least 2\)"):
        errors.error_study(cases, ["moduli"], None, 0, torch.device("cpu"), backends=["crt"],
                           moduli=[1])


@pytest.mark.parametrize("kwargs, message", [
    ({"modes": ["fastt"]}, "error_study: modes must be among fast, all-pairs, moduli, auto, "
                           "nearest, got 'fastt'"),
    ({"modes": ["moduli"], "backends": ["fp16"]},
     r"error_study: backends \('fp16',\) run none of the modes \('moduli',\): only native"),
    ({"modes": ["moduli"], "backends": ["crt"], "moduli": [0]},
     "error_study: moduli must hold counts between 1 and 16, got 0"),
    ({"modes": ["fast"], "slices": [41]}, "error_study: slices must hold counts between 1 and 40, "
                                          "got 41"),
], ids=["unknown-mode", "no-mode-runs", "moduli-0", "slices-41"])
def test_error_study_refuses_what_would_measure_native_alone(kwargs, message):
    """Modes and counts the command line refuses are refused by the Python call too: a study of
    the native rows alone, or of a count no option takes, is not what was asked for."""
    cases = errors.cases_for([torch.float64], [1.0], [8], 2)
    arguments = {"modes": errors.MODES, "slices": None, "backends": ["fp16"], **kwargs}
    with pytest.raises(ValueError, match=message):
        errors.error_study(cases, arguments.pop("modes"), arguments.pop("slices"), 0,
                           torch.device("cpu"), **arguments)


def test_error_study_arguments_of_another_form():
    """A device given as a str is taken as torch.device(str); modes given as one str (which would
    be read letter by letter) and a device of another type are refused by name."""
    cases = errors.cases_for([torch.float64], [1.0], [8], 2)
    by_name = errors.error_study(cases, ["fast"], [2], 0, "cpu")
    by_device = errors.error_study(cases, ["fast"], [2], 0, torch.device("cpu"))
    assert [row["max_comp_err"] for row in by_name] == [row["max_comp_err"] for row in by_device]
    with pytest.raises(TypeError, match="error_study: modes must be a list of mode names .* got "
                                        "the str 'fast'"):
        errors.error_study(cases, "fast", [2], 0, "cpu")
    with pytest.raises(TypeError, match="error_study: device must be a torch.device or a str, "
                                        "got int 0"):
        errors.error_study(cases, ["fast"], [2], 0, 0)


@pytest.mark.parametrize("count", [0, -1, 1.5, True])
def test_reproducibility_check_refuses_thread_counts_below_one(count):
    """A thread count of 0 would run with the current count and be reported as 0."""
    with pytest.raises(ValueError, match=f"check: threads must hold CPU thread counts of at least "
                                         f"1, got {count!r}"):
        reproducibility.check([(3, 8, 2)], [torch.device("cpu")], [1, count])


def test_csv_and_figure_on_one_path_are_refused(tmp_path, capsys):
    """--plot on the --csv file would write the figure over the rows just written (refused before
    matplotlib is looked for)."""
    path = str(tmp_path / "study.svg")
    assert_usage_error(cli.parse_args, ["accuracy", "--device", "cpu", "--dtype", "float64",
                                        "--csv", path, "--plot", path],
                       f"argument --plot: {path!r} would write a figure over the --csv file",
                       capsys)
    # two dtypes: one figure each, named apart from the CSV
    stem = str(tmp_path / "study")
    assert_usage_error(cli.parse_args, ["accuracy", "--device", "cpu", "--csv",
                                        f"{stem}-float32.svg", "--plot", f"{stem}.svg"],
                       "would write a figure over the --csv file", capsys)


@pytest.mark.parametrize("shapes, threads, repeats", [([(3, 8, 2)], [1], 1), ([(3, 8, 2)], [1, 2], 0),
                                                      ([], [1, 2], 2)],
                         ids=["one-run-one-setting", "no-runs", "no-shapes"])
def test_reproducibility_check_refuses_to_compare_nothing(shapes, threads, repeats):
    """A check that would compare no two results is refused, not reported reproducible."""
    with pytest.raises(ValueError, match="compare nothing"):
        reproducibility.check(shapes, [torch.device("cpu")], threads, repeats=repeats)


@pytest.mark.parametrize("argv,message", [
    (["accuracy", "--backends", "fp32"], "argument --backends: invalid choice: 'fp32'"),
    (["accuracy", "--moduli", "17"],
     "argument --moduli: moduli counts must be integers in 1..16, got '17'"),
    (["accuracy", "--moduli", "x"], "argument --moduli: moduli counts must be integers in 1..16"),
    (["accuracy", "--moduli", "12"],
     "argument --moduli: the moduli mode runs with backend crt; add crt to --backends"),
    (["accuracy", "--backends", "crt", "--modes", "auto", "--moduli", "12"],
     "argument --moduli: add moduli to --modes"),
    (["accuracy", "--backends", "crt", "--modes", "auto", "--slices", "5"],
     "argument --slices: the fast and all-pairs modes take it (backend fp16 or int8); add one "
     "of them to --modes and --backends"),
    (["accuracy", "--modes", "nearest", "--slices", "5"],
     "argument --slices: the fast and all-pairs modes take it (backend fp16 or int8); add one "
     "of them to --modes and --backends"),
    (["accuracy", "--backends", "crt", "--slices", "8"],
     "argument --slices: the fast and all-pairs modes take it (backend fp16 or int8); add one "
     "of them to --modes and --backends"),
    (["accuracy", "--modes", "moduli"],
     "argument --modes: moduli runs with backend crt, not with --backends fp16"),
    (["accuracy", "--backends", "crt", "auto", "--modes", "fast"],
     "argument --modes: fast runs with backend fp16 or int8, not with --backends crt auto"),
    (["accuracy", "--backends", "fp16", "crt", "--modes", "fast"],
     "argument --modes: backend crt runs none of fast (it runs moduli auto nearest)"),
    (["accuracy", "--backends", "crt", "--k", "64", "200000"],
     "argument --k: k = 200000 exceeds 131071 = 2^17 - 1, the limit of backend crt"),
    (["accuracy", "--backends", "crt", "--k", "4096", "--moduli", "1", "12"],
     "argument --moduli: 1 moduli leave no scale for k = 4096 (backend crt needs at least 2)"),
    (["accuracy", "--backends", "crt", "--plot", "figure.png"],
     "argument --plot: the figure shows fast mode, which runs with backend fp16 or int8; add one "
     "to --backends"),
    (["reproducibility", "--backends", "int16"], "argument --backends: invalid choice: 'int16'"),
    (["reproducibility", "--shape", "2", "200000", "2"],
     "argument --shape: k = 200000 exceeds 131071 = 2^17 - 1, the limit of backend crt (exact "
     "INT8 residue products); leave crt out of --backends"),
])
def test_bad_backend_arguments_name_the_argument_and_value(argv, message, capsys):
    assert_usage_error(cli.parse_args, ["accuracy", "--device", "cpu", *argv[1:]]
                       if argv[0] == "accuracy" else argv, message, capsys)


def test_backend_options_accepted_where_they_apply():
    args = cli.parse_args(["accuracy", "--device", "cpu", "--backends", "crt", "crt", "--k",
                           "200000", "--modes", "nearest"])
    assert args.backends == ["crt"] and args.modes == ["nearest"]  # nearest runs scheme I
    args = cli.parse_args(["accuracy", "--device", "cpu"])
    assert args.backends == ["fp16"] and args.modes == list(errors.MODES) and args.moduli is None
    args = cli.parse_args(["reproducibility", "--shape", "2", "200000", "2", "--backends", "fp16",
                           "int8", "--devices", "cpu"])
    assert args.backends == ["fp16", "int8"]
    assert cli.parse_args(["reproducibility", "--devices", "cpu"]).backends == ["fp16", "int8",
                                                                                "crt"]


def test_reproducibility_covers_the_chosen_backends(capsys):
    code = cli.main(["reproducibility", "--shape", "5", "40", "3", "--threads", "1", "2",
                     "--devices", "cpu", "--backends", "crt", "auto", "--quiet"])
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    chosen = reproducibility.products(["crt", "auto"])
    assert code == 0 and len(chosen) == 10
    assert verdict == (f"REPRODUCIBLE: 10 products x 1 shapes, {10 * 3} results bitwise identical "
                       "across cpu threads=1, cpu threads=2 (2 runs each)")
    assert [label for label, _, _ in chosen] == [
        "dgemm crt", "dgemm crt nearest", "dgemm crt moduli=8", "sgemm crt", "sgemm crt nearest",
        "sgemm crt moduli=4", "dgemm auto", "dgemm auto nearest", "sgemm auto",
        "sgemm auto nearest"]
    assert all(options["backend"] == label.split()[1] for label, _, options in
               reproducibility.products(reproducibility.BACKENDS))


def test_values_given_twice_are_one_case(capsys):
    """--phi 1 1 --k 8 8 is one case (as the summary shows it), not four identical ones."""
    args = cli.parse_args(["accuracy", "--device", "cpu", "--phi", "1", "0.5", "1", "--k", "8",
                           "4", "8", "--dtype", "float32", "float32"])
    assert args.phi == [1.0, 0.5] and args.k == [8, 4] and args.dtype == ["float32"]
    assert cli.main(["accuracy", "--device", "cpu", "--phi", "1", "1", "--k", "8", "8", "--size",
                     "2", "--dtype", "float64", "--slices", "1", "--quiet"]) == 0
    assert ": 1 cases of 2 x k x 2" in capsys.readouterr().out


def test_reproducibility_settings_compute_from_scratch(monkeypatch):
    """Each setting of each product starts with nothing kept: A's kept parts (ozaki.repeated)
    made under threads=1 must not serve threads=2, whose own computation of them would go
    unchecked. Within a setting, the third run uses the parts its second run kept."""
    monkeypatch.setattr(ozaki.repeated, "MIN_ENTRIES", 1)  # keep this small A as a large one
    ozaki.repeated.clear()
    real = reproducibility.compute
    kept_before = []

    def recorded(setting, dtype, options, A, B):
        kept_before.append(len(ozaki.repeated.info()))
        return real(setting, dtype, options, A, B)

    monkeypatch.setattr(reproducibility, "compute", recorded)
    report = reproducibility.check([(6, 40, 5)], [torch.device("cpu")], [1, 2], repeats=3,
                                   backends=("fp16",))
    assert report.reproducible
    # per product: threads=1 runs 1-3, then threads=2 runs 1-3
    assert kept_before == [0, 0, 1, 0, 0, 1] * len(reproducibility.products(["fp16"]))


def test_reproducibility_check_raises_no_accuracy_warning():
    """The check's short fixed counts are chosen on purpose (as the accuracy study's are): their
    AccuracyWarning stays out of its output."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ozaki.fixed_counts.AccuracyWarning)
        report = reproducibility.check([(4, 64, 3)], [torch.device("cpu")], [1], repeats=2,
                                       phi=1.0, backends=("fp16", "crt"))
    assert report.reproducible


def test_plots_label_the_backends(backends_run, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    rows = plots.load_study_csv(backends_run[0])
    figure = plots.plot_error_vs_slices(rows, "float64")
    labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert labels == ["phi = 1"]  # one scheme-I backend (int8): no tag; crt has no slice axis
    plots.save(figure, tmp_path / "slices.png")
    fp16 = [dict(r, backend="fp16", plan_backend="fp16") for r in rows
            if r["backend"] == "int8" and r["mode"] == "fast"]
    figure = plots.plot_error_vs_slices(rows + fp16, "float64")
    labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert labels == ["phi = 1 [int8]", "phi = 1 [fp16]"]
    plots.save(figure, tmp_path / "two.png")
    figure = plots.plot_rounded_share(rows, "float32")
    labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert labels == ["native SGEMM", "ozaki automatic [crt]", "ozaki rounding='nearest' [crt]",
                      "ozaki automatic [int8]", "ozaki rounding='nearest' [int8]"]
    plots.save(figure, tmp_path / "share.png")
    with pytest.raises(ValueError, match="no fast-mode rows with dtype 'float64'"):
        plots.plot_error_vs_slices([r for r in rows if r["backend"] != "int8"], "float64")


def test_plot_writes_one_figure_per_dtype(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "errors.png"
    assert cli.main(["accuracy", "--device", "cpu", "--phi", "1", "--k", "16", "--size", "4",
                     "--slices", "1", "2", "--quiet", "--plot", str(path)]) == 0
    out = capsys.readouterr().out
    for dtype in ("float64", "float32"):
        written = tmp_path / f"errors-{dtype}.png"
        assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"figure written to {written}" in out
    one = tmp_path / "one.svg"
    cli.main(["accuracy", "--device", "cpu", "--phi", "1", "--k", "16", "--size", "4", "--slices",
              "1", "--dtype", "float32", "--quiet", "--plot", str(one)])
    assert b"<svg" in one.read_bytes()[:400]


@pytest.mark.parametrize("argv,message", [
    (["--plot", "figure.txt"], "argument --plot: expected a file ending in .png, .pdf, .svg, got "
                               "'figure.txt'"),
    (["--modes", "auto", "--plot", "figure.png"], "argument --plot: the figure shows fast mode"),
])
def test_bad_plot_arguments(argv, message, capsys):
    assert_usage_error(cli.parse_args, ["accuracy", "--device", "cpu", *argv], message, capsys)


@pytest.mark.parametrize("argv,message", [
    (["accuracy", "--seed", "18446744073709551616"],
     "argument --seed: must be an integer in 0..2^64 - 1 (a seed of "
     "torch.Generator.manual_seed), got '18446744073709551616'"),
    (["reproducibility", "--seed", "-1"], "argument --seed: must be an integer in 0..2^64 - 1"),
    (["accuracy", "--device", "cpu", "--phi", "1", "40", "--dtype", "float32", "--k", "8",
      "--size", "4"],
     "argument --phi: 40 is too large: the 4 x 8 x 4 inputs (rand - 0.5) * exp(phi * randn) of "
     "--seed 0 hold entries past the range of float32"),
    (["reproducibility", "--devices", "cpu", "--phi", "1000", "--shape", "4", "8", "4"],
     "argument --phi: 1000 is too large: the 4 x 8 x 4 inputs"),
])
def test_seed_and_phi_the_inputs_cannot_take_stop_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv + ["--quiet"])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err


@pytest.mark.parametrize("argv, message", [
    (["reproducibility", "--devices", "cpu", "--backends", "fp16", "--shape", "10000000",
      "4194304", "2"], "argument --shape: 10000000 x 4194304 x 2 float64 A, B and C = A @ B need "),
    (["accuracy", "--device", "cpu", "--size", str(10 ** 12), "--k", "64"],
     f"argument --size: {10 ** 12} x 64 x {10 ** 12} float64 A, B and C = A @ B need "),
])
def test_a_shape_whose_operands_cannot_fit_is_refused(argv, message, capsys):
    """Refused by name before any allocation, as the demo does (not the allocator's traceback).
    A alone is past any host's memory: were the check gone, its allocation fails at once."""
    assert_usage_error(cli.main, argv + ["--quiet"], message, capsys)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
@pytest.mark.parametrize("option, path", [("--csv", "/proc/a.csv"), ("--plot", "/proc/a.png")])
def test_outputs_that_cannot_be_written_are_refused_before_the_study(option, path, capsys):
    """/proc exists but takes no new file, whoever runs the tests (root included)."""
    assert_usage_error(cli.main, ["accuracy", "--device", "cpu", option, path],
                       f"argument {option}: {path!r} cannot be written (", capsys)


def test_phi_checked_against_the_dtypes_studied():
    args = cli.parse_args(["accuracy", "--device", "cpu", "--phi", "40", "--dtype", "float64",
                           "--k", "8", "--size", "4", "--seed", str(2 ** 64 - 1)])
    assert args.phi == [40.0] and args.seed == 2 ** 64 - 1


@pytest.mark.parametrize("argv,option", [
    (["accuracy", "--modes", "moduli"], "--modes"),
    (["accuracy", "--moduli", "12"], "--moduli"),
    (["accuracy", "--modes", "auto", "--plot", "figure.png"], "--plot"),
    (["accuracy", "--csv", "/no/such/folder/x.csv"], "--csv"),
    (["accuracy", "--device", "tpu"], "--device"),
    (["reproducibility", "--devices", "gpu"], "--devices"),
    (["reproducibility", "--shape", "2", "4194305", "2"], "--shape"),
])
def test_option_errors_show_the_usage_of_the_command(argv, option, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: python -m ozaki.study {argv[0]} [-h]")
    assert f"\npython -m ozaki.study {argv[0]}: error: argument {option}: " in err


def test_reproducibility_that_would_compare_nothing_is_refused(capsys):
    """One run of one setting compares no result with another: refused before any work, where it
    would have reported REPRODUCIBLE over 0 results."""
    assert_usage_error(cli.parse_args, ["reproducibility", "--devices", "cpu", "--threads", "1",
                                        "--repeats", "1"],
                       "argument --repeats: 1 run of one setting (cpu threads=1) compares "
                       "nothing; give --repeats 2 or more, or more --threads or --devices", capsys)
    args = cli.parse_args(["reproducibility", "--devices", "cpu", "--threads", "1", "2",
                           "--repeats", "1"])
    assert args.repeats == 1
