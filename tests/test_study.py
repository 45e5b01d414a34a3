"""Tests for ozaki.study: the error sweep (rows, CSV, summary, exact references), the
reproducibility check (verdict on identical and on differing bits) and argument errors."""

import csv
import math
from fractions import Fraction

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
    assert verdict.startswith("NOT REPRODUCIBLE: 4 of ")
    assert "first: dgemm nearest 4x30x5 on cpu threads=2 run 1, 1 entries differ (first at " \
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
