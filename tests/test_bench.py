"""Tests for ozaki.bench: a tiny CPU run end to end, the row arithmetic, the row selection
(--dtype, --modes, --backends, --moduli), the floor units, the progress bar, OOM and n/a rows and
argument errors. Timings are measured but never asserted on."""

import dataclasses
import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import ozaki
from helpers import assert_usage_error
from ozaki import bench, repeated, replay, speculation
from ozaki.progress import BAR_WIDTH
from ozaki.study import errors

SLICES = (3, 4)
ALL_PAIRS = (3,)
MODULI = (2, 9)  # the tiny run's --moduli; --sgemm-moduli keeps its default (7 8)
SHAPES = [(32, 32, 32), (48, 48, 48), (24, 40, 16)]
ERROR_FIELDS = ("median_rel_err", "max_rel_err", "max_comp_err")
FP16_UNIT, INT8_UNIT = "fp16 gemm (floor unit)", "int8 gemm (floor unit)"


def key(method, backend=None, default=False, slices=None, fast=None, moduli=None):
    """A row's identity (row_keys): method, backend, default, slices, fast and moduli requested."""
    return (method, backend, default, slices, fast, moduli)


def ozaki_keys(routine, backend, auto=False, fixed=(), all_pairs=(), moduli=()):
    """The ozaki rows of one dtype and backend in their order: default, plan, nearest, then auto,
    fixed and all-pairs (scheme I) or the fixed moduli counts (crt)."""
    method = f"ozaki {routine}"
    return ([key(method, backend, True), key(f"{method} plan", backend, True),
             key(f"{method} nearest", backend, True)]
            + ([key(method, backend, False, None, True)] if auto else [])
            + [key(method, backend, False, s, True) for s in fixed]
            + [key(method, backend, False, s, False) for s in all_pairs]
            + [key(method, backend, moduli=count) for count in moduli])


NATIVES_AND_FLOOR = [key("native dgemm"), key("native sgemm"), key(FP16_UNIT)]
NATIVES_AND_FLOORS = NATIVES_AND_FLOOR + [key(INT8_UNIT)]
SCHEME_ONE = dict(auto=True, fixed=SLICES, all_pairs=ALL_PAIRS)
EXPECTED_ROWS = (NATIVES_AND_FLOORS
                 + ozaki_keys("dgemm", "auto") + ozaki_keys("dgemm", "crt", moduli=MODULI)
                 + ozaki_keys("dgemm", "int8", **SCHEME_ONE)
                 + ozaki_keys("dgemm", "fp16", **SCHEME_ONE)
                 + ozaki_keys("sgemm", "auto") + ozaki_keys("sgemm", "crt", moduli=(7, 8))
                 + ozaki_keys("sgemm", "int8") + ozaki_keys("sgemm", "fp16"))
#: The shapes of the in-process runs of run_tiny (--sizes 16 24).
TINY_SHAPES = [(16, 16, 16), (24, 24, 24)]
TINY = ["--device", "cpu", "--sizes", "16", "24", "--repeats", "1", "--warmup", "0",
        "--samples", "4"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """`python -m ozaki.bench` on the CPU at tiny sizes: (completed process, JSON, markdown)."""
    folder = tmp_path_factory.mktemp("bench")
    json_path, markdown_path = folder / "bench.json", folder / "bench.md"
    command = [sys.executable, "-m", "ozaki.bench", "--sizes", "32", "48", "--shape", "24", "40",
               "16", "--repeats", "1", "--warmup", "1", "--samples", "8", "--slices",
               *map(str, SLICES), "--all-pairs-slices", *map(str, ALL_PAIRS), "--moduli",
               *map(str, MODULI), "--device", "cpu",
               "--json", str(json_path), "--markdown", str(markdown_path)]
    process = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr
    return process, json.loads(json_path.read_text()), markdown_path.read_text()


def rows_of(report, shape, method=None):
    label = bench.shape_label(shape)
    return [row for row in report["rows"]
            if row["shape"] == label and (method is None or row["method"] == method)]


def default_row(report, shape, method, backend="auto"):
    return next(row for row in rows_of(report, shape, method)
                if row["default"] and row["backend"] == backend)


def unit_time(report, shape, unit):
    """The floor unit's time ("fp16" or "int8") of the shape."""
    return rows_of(report, shape, f"{unit} gemm (floor unit)")[0]["time_ms"]


def row_keys(report, shape):
    """key(...) of the shape's rows, in order."""
    return [key(r["method"], r["backend"], r["default"], r["slices_requested"],
                r["fast_requested"], r["moduli_requested"]) for r in rows_of(report, shape)]


def run_tiny(capsys, tmp_path, *options):
    """bench.main in this process at sizes 16 and 24 with `options`: (JSON report, stdout,
    stderr)."""
    json_path = tmp_path / "bench.json"
    assert bench.main([*TINY, "--json", str(json_path), *options]) == 0
    captured = capsys.readouterr()
    return json.loads(json_path.read_text()), captured.out, captured.err


def table_lines(stdout):
    """The body of the final table: the lines between its rule and the blank line after it."""
    lines = stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line) == {"-", " "})
    return lines[rule + 1:lines.index("", rule)]


def test_metadata(tiny_run):
    _, report, _ = tiny_run
    meta = report["meta"]
    assert meta["complete"] is True
    assert meta["device"] == "cpu"
    assert meta["shapes"] == [list(s) for s in SHAPES]
    assert meta["phi"] == 0.5 and meta["seed"] == 0 and meta["samples"] == 8
    assert meta["torch_version"] == torch.__version__
    assert meta["floor_gemm"] in (bench.FLOOR_FP32_OUT, bench.FLOOR_FP16_OUT)
    for key in ("device_name", "cuda_version", "date", "argv", "ozaki_version"):
        assert key in meta
    assert "--sizes" in meta["argv"]
    assert meta["dtypes"] == ["float64", "float32"]
    assert meta["modes"] == list(bench.MODES)
    assert meta["backends"] == list(bench.BACKENDS) == ["auto", "crt", "int8", "fp16"]
    assert meta["int8_floor_gemm"] == bench.FLOOR_INT8


def test_rows_in_order_for_every_shape(tiny_run):
    _, report, _ = tiny_run
    assert len(report["rows"]) == len(SHAPES) * len(EXPECTED_ROWS)
    for shape in SHAPES:
        assert row_keys(report, shape) == EXPECTED_ROWS
        for row in rows_of(report, shape):
            assert row["status"] == "ok"
            assert (row["m"], row["k"], row["n"]) == shape
            assert len(row["times_ms"]) == 1 and row["time_ms"] == row["times_ms"][0]


def test_swept_counts_warn_in_their_rows_not_on_stderr(tiny_run):
    """A fixed count the run sweeps that is predicted far less accurate than native has
    accuracy_warning true in its row (as its plan's warning says); the timed calls print no
    AccuracyWarning, a line per call and per count otherwise."""
    process, report, _ = tiny_run
    assert "AccuracyWarning" not in process.stderr
    rows = [row for row in report["rows"] if row["kind"] == "ozaki"]
    assert all(isinstance(row["accuracy_warning"], bool) for row in rows)
    warned = [row for row in rows if row["accuracy_warning"]]
    assert warned and all(row["slices"] is not None or row["moduli"] is not None for row in warned)
    assert not any(row["accuracy_warning"] for row in rows if row["plan_reason"] != "requested")


def test_errors_finite_and_ozaki_no_worse_than_native(tiny_run):
    _, report, _ = tiny_run
    for shape in SHAPES:
        for row in rows_of(report, shape):
            if row["kind"] in ("native", "ozaki"):
                for key in ERROR_FIELDS:
                    assert math.isfinite(row[key]) and row[key] >= 0, (shape, row)
            else:
                assert not any(key in row for key in ERROR_FIELDS)
        for ours, native in (("ozaki dgemm", "native dgemm"), ("ozaki sgemm", "native sgemm")):
            theirs = rows_of(report, shape, native)[0]
            for backend in bench.BACKENDS:
                mine = default_row(report, shape, ours, backend)
                assert mine["max_rel_err"] <= theirs["max_rel_err"], (shape, backend)
                assert mine["max_comp_err"] <= theirs["max_comp_err"], (shape, backend)


def test_gemm_counts_floor_and_speedups(tiny_run):
    _, report, _ = tiny_run
    for shape in SHAPES:
        m, k, n = shape
        native = {row["dtype"]: row["time_ms"] for row in rows_of(report, shape)
                  if row["kind"] == "native"}
        units = {unit: unit_time(report, shape, unit) for unit in ("fp16", "int8")}
        for row in rows_of(report, shape):
            assert row["tflops" if row["kind"] != "plan" else "time_ms"] > 0
            if row["kind"] != "plan":
                assert row["tflops"] == pytest.approx(2 * m * k * n / row["time_ms"] / 1e9)
            if row["kind"] != "ozaki":
                continue
            if row["plan_backend"] == "crt":  # scheme II: one INT8 GEMM per modulus
                assert row["slices"] is row["fast"] is row["beta"] is None
                assert row["gemms"] == row["moduli"] >= 1
            else:
                s = row["slices"]
                if row["slices_requested"] is not None:
                    assert s == row["slices_requested"]
                if row["fast_requested"] is not None:
                    assert row["fast"] == row["fast_requested"]
                assert row["moduli"] is None
                assert row["gemms"] == (s * (s + 1) // 2 if row["fast"] else s * s)
            # the floor unit of the plan's own backend: INT8 for int8 and crt, FP16 for fp16
            unit = "fp16" if row["plan_backend"] == "fp16" else "int8"
            assert row["floor_unit"] == unit
            assert row["floor_ms"] == pytest.approx(row["gemms"] * units[unit])
            assert row["of_floor"] == pytest.approx(row["floor_ms"] / row["time_ms"])
            assert row["speedup"] == pytest.approx(native[row["dtype"]] / row["time_ms"])
        plans = rows_of(report, shape, "ozaki dgemm plan") + rows_of(report, shape,
                                                                     "ozaki sgemm plan")
        assert [(plan["dtype"], plan["backend"]) for plan in plans] == [
            (dtype, backend) for dtype in ("float64", "float32") for backend in bench.BACKENDS]
        for plan in plans:
            method = "ozaki dgemm" if plan["dtype"] == "float64" else "ozaki sgemm"
            assert plan["method"] == f"{method} plan"  # a plan row says whose plan it is
            default = default_row(report, shape, method, plan["backend"])
            for field in ("plan_backend", "slices", "fast", "moduli", "gemms"):
                assert plan[field] == default[field], (plan, field)
            assert plan["share_of_default"] == pytest.approx(plan["time_ms"] / default["time_ms"])


def test_stdout_stderr_and_markdown(tiny_run):
    process, report, markdown = tiny_run
    total = len(report["rows"])
    progress = [line for line in process.stderr.splitlines() if line.startswith("bench [")]
    assert len(progress) == total
    first = report["rows"][0]
    assert f"] 1/{total} " in progress[0] and progress[0].endswith(
        f"  n=32 native dgemm ... {bench._time(first['time_ms'])} ms "
        f"(max rel err {bench._error(first['max_rel_err'])})")
    assert f"] {total}/{total} " in progress[-1]
    assert "  m x k x n = 24x40x16 ozaki sgemm nearest default (fp16) ... " in progress[-1]
    assert [line.split(":")[0] for line in process.stderr.splitlines()
            if ": inputs " in line] == ["32", "48", "24x40x16"]
    assert "bench [" not in process.stdout and ": inputs " not in process.stdout
    table_header = [line for line in process.stdout.splitlines()
                    if line.split()[:3] == ["n", "method", "backend"]]
    assert len(table_header) == 1 and "of floor" in table_header[0]
    assert len(table_lines(process.stdout)) == total
    assert "OOM" not in process.stdout
    lines = markdown.splitlines()
    assert lines[0].startswith("**") and "torch" in lines[0] and "CUDA" in lines[0]
    table = [line for line in lines if line.startswith("|")]
    assert table[0] == "| " + " | ".join(h for h, _, _ in bench.COLUMNS) + " |"
    assert len(table) == 2 + total
    assert all(line.count("|") == len(bench.COLUMNS) + 1 for line in table)


def test_inputs_depend_only_on_seed_and_shape():
    cpu = torch.device("cpu")
    A1, B1, rows1, cols1 = bench.make_inputs((8, 12, 6), 0.5, 3, 4, cpu)
    bench.make_inputs((16, 16, 16), 0.5, 3, 4, cpu)
    A2, B2, rows2, cols2 = bench.make_inputs((8, 12, 6), 0.5, 3, 4, cpu)
    assert torch.equal(A1, A2) and torch.equal(B1, B2) and (rows1, cols1) == (rows2, cols2)
    assert A1.dtype == torch.float64 and A1.shape == (8, 12) and B1.shape == (12, 6)
    assert len(rows1) == 4 and len(cols1) == 4


def test_time_call_returns_last_result_and_all_times():
    calls = []
    times, result = bench.time_call(lambda: calls.append(1) or len(calls), torch.device("cpu"),
                                    warmup=2, repeats=3)
    assert len(times) == 3 and len(calls) == 5 and result == 5


@pytest.mark.parametrize("setting", ["tf32", "ieee", "none"])
def test_native_matmul_is_ieee_fp32_and_restores_the_setting(setting):
    """TF32 is off inside, and the caller's setting comes back after: set through torch's
    fp32_precision, whose legacy flag allow_tf32 raises once a program used it ('tf32')."""
    matmul = torch.backends.cuda.matmul
    saved = matmul.fp32_precision
    try:
        matmul.fp32_precision = setting
        with bench.native_matmul():
            assert matmul.fp32_precision == "ieee"
        assert matmul.fp32_precision == setting
    finally:
        matmul.fp32_precision = saved


@pytest.mark.parametrize("setting", ["bf16", "tf32", "ieee"])
def test_native_matmul_is_ieee_fp32_on_the_cpu_too(setting):
    """The CPU's oneDNN float32 matmul runs in bf16 or TF32 where a program asked for it
    (torch.set_float32_matmul_precision("medium") does): inside native_matmul it is real FP32
    (within float32's rounding of the float64 product), and the setting comes back after."""
    onednn = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    if onednn is None or not hasattr(onednn, "fp32_precision"):
        pytest.skip("this torch has no oneDNN fp32_precision setting")
    g = torch.Generator().manual_seed(3)
    A, B = torch.randn(64, 512, generator=g), torch.randn(512, 48, generator=g)
    exact = A.double() @ B.double()
    saved = onednn.fp32_precision
    try:
        onednn.fp32_precision = setting
        with bench.native_matmul():
            assert onednn.fp32_precision == "ieee"
            C = A @ B
        assert onednn.fp32_precision == setting
    finally:
        onednn.fp32_precision = saved
    bound = 512 * 2.0 ** -24 * (A.double().abs() @ B.double().abs())
    assert ((C.double() - exact).abs() <= bound).all()


def test_native_products_are_torchs_inside_an_enable_block():
    """The native baseline is torch's product even where the caller runs the bench or the study
    inside ozaki.enable (it was ozaki's there: the row named native showed ozaki's errors)."""
    A, B = torch.randn(6, 7, dtype=torch.float64), torch.randn(7, 5, dtype=torch.float64)
    native = torch.matmul(A, B)
    with ozaki.enable(rounding="nearest"):
        assert not torch.equal(torch.matmul(A, B), native)
        with bench.native_matmul():
            assert torch.equal(torch.matmul(A, B), native)
        assert torch.equal(errors.product(errors.NATIVE, A, B)[0], native)


def test_out_of_memory_becomes_an_oom_row(monkeypatch):
    def out_of_memory(spec, run):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setitem(bench.MEASURE, "ozaki", out_of_memory)
    args = bench.parse_args(["--sizes", "16", "--device", "cpu", "--repeats", "1",
                             "--warmup", "0", "--samples", "4"])
    run = bench.prepare_shape((16, 16, 16), args, bench.FLOOR_FP16_OUT)
    native = bench.measure_row(bench.RowSpec("native dgemm", "native", torch.float64), run)
    row = bench.measure_row(bench.RowSpec("ozaki dgemm", "ozaki", torch.float64, 8, True), run)
    assert native["status"] == "ok" and row["status"] == "OOM" and "time_ms" not in row
    table = bench.format_table([native, row]).splitlines()
    assert "OOM" in table[-1] and "OOM" not in table[-2]


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "0"], "argument --sizes: must be a positive integer, got '0'"),
    (["--sizes", "abc"], "argument --sizes: must be a positive integer, got 'abc'"),
    (["--shape", "4", "4"], "argument --shape: expected 3 arguments"),
    (["--slices", "0"], "argument --slices: slice counts must be integers in 1..40, got '0'"),
    (["--all-pairs-slices", "41"], "argument --all-pairs-slices: slice counts must be integers "
                                   "in 1..40, got '41'"),
    (["--sgemm-slices", "3", "x"], "argument --sgemm-slices: slice counts must be integers in "
                                   "1..40, got 'x'"),
    (["--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    (["--modes", "default", "fast"], "argument --modes: invalid choice: 'fast'"),
    (["--backends", "fp32"], "argument --backends: invalid choice: 'fp32'"),
    (["--moduli", "0"], "argument --moduli: moduli counts must be integers in 1..16, got '0'"),
    (["--moduli", "14", "17"], "argument --moduli: moduli counts must be integers in 1..16, "
                               "got '17'"),
    (["--sgemm-moduli", "x"], "argument --sgemm-moduli: moduli counts must be integers in "
                              "1..16, got 'x'"),
    (["--sgemm-moduli", "-3"], "argument --sgemm-moduli: moduli counts must be integers in "
                               "1..16, got '-3'"),
    (["--phi", "-1"], "argument --phi: must be a finite number >= 0, got '-1'"),
    (["--phi", "nan"], "argument --phi: must be a finite number >= 0, got 'nan'"),
    (["--repeats", "0"], "argument --repeats: must be a positive integer, got '0'"),
    (["--warmup", "-1"], "argument --warmup: must be an integer >= 0, got '-1'"),
    (["--samples", "x"], "argument --samples: must be a positive integer, got 'x'"),
    (["--device", "tpu"], "argument --device: expected cpu, cuda or cuda:I, got 'tpu'"),
    (["--device", "cpu", "--shape", "2", str(2 ** 22 + 1), "2"],
     "inner dimension k = 4194305 exceeds 2^22"),
    (["--device", "cpu", "--backends", "auto", "--modes", "fixed", "--moduli", "3", "--slices",
      "4"], "argument --modes: fixed measures no row with --dtype float64 float32 and --backends "
            "auto (it runs with backend fp16 or int8"),
    (["--device", "cpu", "--dtype", "float32", "--modes", "auto"],
     "argument --modes: auto measures no row with --dtype float32"),
    (["--device", "cpu", "--json", "/nonexistent-folder/bench.json"],
     "argument --json: folder '/nonexistent-folder' of '/nonexistent-folder/bench.json' "
     "does not exist"),
])
def test_bad_arguments_name_the_argument_and_value(argv, message, capsys):
    assert_usage_error(bench.main, argv, message, capsys)


@pytest.mark.parametrize("argv, shape", [(["--sizes", "4194304"], "4194304 x 4194304"),
                                         (["--shape", "10000000", "2", "10000000"],
                                          "10000000 x 2 x 10000000")])
def test_a_shape_whose_operands_cannot_fit_is_refused(argv, shape, capsys):
    """Refused by name before any allocation, as the demo does (not the allocator's traceback).
    A or C alone is past any host's memory: were the check gone, its allocation fails at once."""
    assert_usage_error(bench.main, ["--device", "cpu", *argv],
                       f"argument --sizes/--shape: {shape} float64 A, B and C = A @ B need ",
                       capsys)


#: A folder that exists but takes no new file, whoever runs the tests (root included).
UNWRITABLE_FOLDER = "/proc"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
@pytest.mark.parametrize("option, name", [("--json", "x.json"), ("--markdown", "x.md"),
                                          ("--plot", "x.png")])
def test_outputs_that_cannot_be_written_are_refused_before_the_run(option, name, capsys):
    path = f"{UNWRITABLE_FOLDER}/{name}"
    assert_usage_error(bench.main, ["--device", "cpu", "--sizes", "8", option, path],
                       f"argument {option}: {path!r} cannot be written (", capsys)


@pytest.mark.parametrize("argv, message", [
    (["--json", "{out}.md", "--markdown", "{out}.md"],
     "argument --markdown: '{out}.md' would write the table over the --json file '{out}.md'"),
    (["--json", "{out}.png", "--plot", "{out}.png", "--dtype", "float64"],
     "argument --plot: '{out}.png' would write a figure over the --json file '{out}.png'"),
    (["--markdown", "{out}-float32.png", "--plot", "{out}.png", "--dtype", "float64", "float32"],
     "argument --plot: '{out}.png' would write a figure over the --markdown file "
     "'{out}-float32.png'"),
], ids=["json-markdown", "json-plot", "markdown-a-dtypes-figure"])
def test_two_outputs_on_one_file_are_refused(argv, message, tmp_path, capsys):
    """--json, --markdown and --plot (one figure per dtype) each write their own file: two on one
    path would leave the later one's contents alone (the JSON record lost), so it is refused
    before the run."""
    out = str(tmp_path / "bench")
    assert_usage_error(bench.parse_args, ["--device", "cpu", "--sizes", "8",
                                          *[a.format(out=out) for a in argv]],
                       message.format(out=out), capsys)


def test_outputs_are_told_apart_as_files(tmp_path, capsys):
    """A hard link to the --json file is that file (refused, naming the --json path as given);
    a device such as /dev/null takes both outputs."""
    json_path = tmp_path / "x.json"
    json_path.write_text("")
    os.link(json_path, tmp_path / "same.md")
    assert_usage_error(bench.parse_args, ["--device", "cpu", "--json", str(json_path),
                                          "--markdown", str(tmp_path / "same.md")],
                       f"would write the table over the --json file {str(json_path)!r}", capsys)
    if os.path.exists("/dev/null"):
        args = bench.parse_args(["--device", "cpu", "--json", "/dev/null", "--markdown",
                                 "/dev/null"])
        assert args.json == args.markdown == "/dev/null"


def test_plan_fields_flag_a_fixed_counts_warning_only():
    """accuracy_warning is a fixed count's AccuracyWarning, not a BackendWarning's text (a plan
    that backend='crt' could not serve carries that in plan.warning too)."""
    A, B = torch.randn(6, 8, dtype=torch.float64), torch.randn(8, 5, dtype=torch.float64)
    plan = ozaki.plan(A, B)
    for reason, flagged in (("requested", True), ("error bound (INT8 scheme I: ...)", False)):
        marked = dataclasses.replace(plan, reason=reason, warning="ozaki: ...")
        assert bench._plan_fields(marked)["accuracy_warning"] is flagged
    assert bench._plan_fields(plan)["accuracy_warning"] is False


def test_output_under_a_file_is_refused(tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.write_text("")
    assert_usage_error(bench.parse_args, ["--device", "cpu", "--json", str(plain / "x.json")],
                       f"argument --json: folder {str(plain)!r} of {str(plain / 'x.json')!r} is "
                       "not a folder", capsys)


def test_output_check_leaves_existing_files_and_creates_none(tmp_path):
    existing, new = tmp_path / "existing.json", tmp_path / "new.md"
    existing.write_text("kept")
    bench.parse_args(["--device", "cpu", "--json", str(existing), "--markdown", str(new)])
    assert existing.read_text() == "kept" and not new.exists()


@pytest.mark.parametrize("argv, message", [
    (["--dtype", "float64", "--backends", "fp16", "--modes", "fixed", "--slices", "8",
      "--sgemm-slices", "4", "5"],
     "argument --sgemm-slices: its counts measure no row with --dtype float64, --backends fp16 "
     "and --modes fixed (they run with mode fixed, backend fp16 or int8 and --dtype float32)"),
    (["--backends", "fp16", "--moduli", "3"],
     "argument --moduli: its counts measure no row with --dtype float64 float32, --backends fp16"),
    (["--backends", "crt", "--sgemm-moduli", "7", "--dtype", "float64"],
     "argument --sgemm-moduli: its counts measure no row with --dtype float64"),
    (["--modes", "default", "fixed", "--all-pairs-slices", "8"],
     "argument --all-pairs-slices: its counts measure no row with"),
    (["--backends", "auto", "--slices", "8"], "argument --slices: its counts measure no row"),
])
def test_counts_that_measure_no_row_are_refused(argv, message, capsys):
    """As the study refuses them: a count list given is not dropped in silence."""
    assert_usage_error(bench.parse_args, ["--device", "cpu", *argv], message, capsys)


def test_counts_left_at_their_defaults_or_given_empty_are_accepted():
    args = bench.parse_args(["--device", "cpu", "--backends", "fp16", "--sgemm-slices",
                             "--moduli"])
    assert args.sgemm_slices == [] and args.moduli == [] and args.slices == [8, 10, 12]
    assert bench.parse_args(["--device", "cpu", "--backends", "crt"]).slices == [8, 10, 12]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message when CUDA is absent")
def test_cuda_requested_without_cuda(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--device", "cuda"])
    assert "argument --device: 'cuda' requested but torch.cuda.is_available() is False" in \
        capsys.readouterr().err


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--sizes", "--shape", "--slices", "--all-pairs-slices", "--repeats",
                   "--samples", "--json", "--markdown", "--device", "--phi", "--seed", "--dtype",
                   "--modes", "--backends", "--sgemm-slices", "--moduli", "--sgemm-moduli",
                   "--quiet", *bench.MODES, *bench.BACKENDS):
        assert option in out


@pytest.mark.parametrize("option, available", [("--dtype", bench.DTYPES),
                                                ("--modes", bench.MODES),
                                                ("--backends", bench.BACKENDS)])
def test_unknown_choice_lists_the_available_ones(option, available, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([option, "unknown"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: invalid choice: 'unknown' (choose from " in err
    listed = err.split("choose from", 1)[1]
    assert all(name in listed for name in available)


def test_nearest_rows_are_correctly_rounded(tiny_run):
    _, report, _ = tiny_run
    nearest = [row for row in report["rows"] if row["method"].endswith("nearest")]
    assert len(nearest) == 2 * len(bench.BACKENDS) * len(SHAPES)
    for row in nearest:
        assert row["rounded_share"] == 1.0 and row["vs_default"] > 0, row


def test_dtype_float32_measures_only_the_sgemm_rows(capsys, tmp_path):
    report, stdout, _ = run_tiny(capsys, tmp_path, "--dtype", "float32", "--backends", "fp16")
    assert report["meta"]["dtypes"] == ["float32"]
    for shape in TINY_SHAPES:
        assert row_keys(report, shape) == [key("native sgemm"), key(FP16_UNIT),
                                           *ozaki_keys("sgemm", "fp16")]
        rows = rows_of(report, shape)
        assert {row["dtype"] for row in rows if row["kind"] != "floor_unit"} == {"float32"}
        assert rows[3]["share_of_default"] == pytest.approx(rows[3]["time_ms"] / rows[2]["time_ms"])
        assert rows[4]["vs_default"] == pytest.approx(rows[4]["time_ms"] / rows[2]["time_ms"])
        assert rows[4]["rounded_share"] == 1.0
    assert "(float32 copies for sgemm)" in stdout


def test_references_only_for_the_selected_dtypes():
    args = bench.parse_args([*TINY, "--dtype", "float64"])
    run = bench.prepare_shape((16, 16, 16), args, bench.FLOOR_FP16_OUT)
    assert set(run.operands) == set(run.references) == {torch.float64}
    meta = bench.run_metadata(args, [], bench.FLOOR_FP16_OUT)
    assert "float32 copies" not in bench.describe_run(meta)


@pytest.mark.parametrize("sizes, mentioned", [(["16"], False), (["16", "16384"], True)])
def test_the_run_line_names_the_large_products_repeats_only_where_it_measured_them(sizes,
                                                                                  mentioned):
    args = bench.parse_args(["--sizes", *sizes, "--device", "cpu", "--repeats", "5",
                             "--large-repeats", "2"])
    line = bench.describe_run(bench.run_metadata(args, [], bench.FLOOR_FP16_OUT))
    assert "median of 5 runs" in line and ("(2 from 16384^3)" in line) == mentioned


@pytest.mark.parametrize("modes, ozaki_rows, no_ratio", [
    (["nearest"], [key("ozaki dgemm nearest", "fp16", True),
                   key("ozaki sgemm nearest", "fp16", True)], "vs_default"),
    (["plan"], [key("ozaki dgemm plan", "fp16", True), key("ozaki sgemm plan", "fp16", True)],
     "share_of_default"),
    # given in any order, the default row still comes before the rows compared with it
    (["all-pairs", "auto", "nearest", "default"],
     [key("ozaki dgemm", "fp16", True), key("ozaki dgemm nearest", "fp16", True),
      key("ozaki dgemm", "fp16", False, None, True), key("ozaki dgemm", "fp16", False, 3, False),
      key("ozaki sgemm", "fp16", True), key("ozaki sgemm nearest", "fp16", True)], None),
])
def test_modes_select_the_ozaki_rows(modes, ozaki_rows, no_ratio, capsys, tmp_path):
    counts = ["--all-pairs-slices", "3"] if "all-pairs" in modes else []  # else refused
    report, stdout, _ = run_tiny(capsys, tmp_path, "--modes", *modes, *counts, "--backends",
                                 "fp16")
    assert report["meta"]["modes"] == [mode for mode in bench.MODES if mode in modes]
    for shape in TINY_SHAPES:
        assert row_keys(report, shape) == NATIVES_AND_FLOOR + ozaki_rows
    ozaki = [row for row in report["rows"] if row["kind"] in ("ozaki", "plan")]
    assert all(row["status"] == "ok" and row["time_ms"] > 0 for row in ozaki)
    if no_ratio:  # without the default row there is nothing to compare with
        assert not any(no_ratio in row for row in ozaki)
        x_default = [header for header, _, _ in bench.COLUMNS].index("x default")
        assert all(bench.COLUMNS[x_default][1](row) == "" for row in report["rows"])
    else:
        assert all(row["vs_default"] > 0 for row in ozaki if not row["default"]
                   or row["method"].endswith("nearest"))
    assert len(table_lines(stdout)) == len(report["rows"])


@pytest.mark.parametrize("fresh", [False, True], ids=["repeated", "fresh"])
def test_reuse_between_timed_calls_is_stated_and_fresh_turns_it_off(fresh, capsys, tmp_path,
                                                                    monkeypatch):
    """By default the timed calls repeat on the same operands and a left operand large enough is
    served by its kept parts from the second call on, which the notes and the JSON say; --fresh
    times first calls only (nothing served by kept parts) and says so."""
    monkeypatch.setattr(repeated, "MIN_ENTRIES", 1)  # the tiny operands count as large
    served = []
    find = repeated.find
    monkeypatch.setattr(repeated, "find", lambda A: served.append(find(A)) or served[-1])
    report, stdout, _ = run_tiny(capsys, tmp_path, "--modes", "default", "--backends", "auto",
                                 "--dtype", "float64", "--warmup", "1", "--repeats", "2",
                                 *(["--fresh"] if fresh else []))
    assert report["meta"]["fresh"] is fresh
    assert served and any(part is not None for part in served) is not fresh
    note = ("Every ozaki call ran as a first call" if fresh
            else "The timed calls repeat on the same operands")
    assert note in stdout
    assert repeated.ENABLED and replay.ENABLED and speculation.DEVICES  # restored after the run


def test_sgemm_slices_in_fixed_mode(capsys, tmp_path):
    report, _, _ = run_tiny(capsys, tmp_path, "--sgemm-slices", "3", "--modes", "fixed",
                            "--dtype", "float32", "--backends", "int8", "fp16")
    for shape in TINY_SHAPES:
        native, fp16_unit, int8_unit, *rows = rows_of(report, shape)
        assert native["method"] == "native sgemm"
        assert (fp16_unit["method"], int8_unit["method"]) == (FP16_UNIT, INT8_UNIT)
        assert [row["backend"] for row in rows] == ["int8", "fp16"]
        for row, unit in zip(rows, (int8_unit, fp16_unit)):
            assert (row["method"], row["dtype"]) == ("ozaki sgemm", "float32")
            assert row["default"] is False
            assert (row["slices_requested"], row["slices"], row["fast"]) == (3, 3, True)
            assert row["plan_backend"] == row["backend"]
            assert row["gemms"] == 6  # 3 * 4 / 2 slice pairs in fast mode
            assert row["floor_ms"] == pytest.approx(6 * unit["time_ms"])
            assert "vs_default" not in row and row["max_rel_err"] >= 0


def test_progress_bar_one_line_per_row_on_stderr(capsys, tmp_path):
    report, stdout, stderr = run_tiny(capsys, tmp_path, "--modes", "default", "fixed",
                                      "--slices", "3", "--backends", "fp16")
    total = len(report["rows"])
    assert total == 2 * 6  # per shape: 2 natives, the floor unit, dgemm default and s=3, sgemm
    lines = stderr.splitlines()
    bars = [line for line in lines if line.startswith("bench [")]
    assert len(bars) == total
    for index, (line, row) in enumerate(zip(bars, report["rows"]), 1):
        filled = len(line[len("bench ["):line.index("]")].rstrip("."))
        assert line.startswith(f"bench [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                               f"{index}/{total} ")
        assert abs(filled - BAR_WIDTH * index / total) < 1
        assert f"  n={row['shape']} {row['method']}" in line
        assert ("(fp16) ... " in line) == (row["kind"] == "ozaki")
        assert ("left" in line) == (index < total)
    assert lines[0].startswith("16: inputs ") and lines[1 + total // 2].startswith("24: inputs ")
    assert len(lines) == total + 2
    assert "bench [" not in stdout and len(table_lines(stdout)) == total


def test_quiet_leaves_stderr_empty_and_the_table_on_stdout(capsys, tmp_path):
    report, stdout, stderr = run_tiny(capsys, tmp_path, "--quiet", "--modes", "default")
    assert stderr == ""
    assert len(report["rows"]) == 2 * (2 + 2 + 2 * len(bench.BACKENDS))
    assert len(table_lines(stdout)) == len(report["rows"])
    assert "Floor units: FP16 " in stdout and f"; INT8 {bench.FLOOR_INT8}" in stdout


def test_rows_name_their_backend(tiny_run):
    _, report, markdown = tiny_run
    assert [header for header, _, _ in bench.COLUMNS][1:3] == ["method", "backend"]
    table = [line for line in markdown.splitlines() if line.startswith("|")][2:]
    expected = [backend for _, backend, *_ in EXPECTED_ROWS] * len(SHAPES)
    for line, row, backend in zip(table, report["rows"], expected, strict=True):
        assert row["backend"] == backend, row
        cell = line.split("|")[3].strip()
        if backend is None:
            assert cell == "-" and "plan_backend" not in row
        elif row["plan_backend"] == backend:
            assert cell == backend
        else:  # auto shows its choice; crt's nearest rows where exact scheme II cannot run
            assert (backend, row["plan_backend"]) in [("auto", "crt"), ("auto", "int8"),
                                                      ("auto", "fp16"), ("crt", "int8")]
            assert cell == f"{backend}>{row['plan_backend']}"


def test_plot_writes_the_throughput_figure(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "throughput.png"
    assert bench.main([*TINY, "--dtype", "float64", "--modes", "default", "--quiet", "--plot",
                       str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _figure_lines(tiny_run, rows=None, draw="plot_throughput"):
    """The labelled lines of a plots figure of the tiny run's float64 rows (all, or `rows`)."""
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    from ozaki import plots
    report = tiny_run[1]
    figure = getattr(plots, draw)(report["meta"], report["rows"] if rows is None else rows,
                                  "float64")
    lines = list(figure.axes[0].get_lines())
    plots.save(figure, os.devnull)
    return lines


@pytest.mark.parametrize("draw", ["plot_throughput", "plot_error_vs_n"])
def test_figure_series_do_not_share_colour_and_marker(tiny_run, draw):
    """The tiny run has 18 float64 ozaki series: past matplotlib's ten colours, each must still
    differ from the others in colour or marker, or the legend cannot tell them apart."""
    series = [line for line in _figure_lines(tiny_run, draw=draw)
              if not line.get_label().startswith(("_", "native"))]
    assert len(series) > 10
    from matplotlib.colors import to_hex
    styles = [(to_hex(line.get_color()), line.get_marker()) for line in series]
    assert len(set(styles)) == len(styles)


def test_error_vs_n_draws_square_shapes_only(tiny_run):
    """The 24 x 40 x 16 product has no single n: it is not drawn at n = 16 beside the squares."""
    for line in _figure_lines(tiny_run, draw="plot_error_vs_n"):
        assert set(line.get_xdata()) <= {32, 48}, line.get_label()
    from ozaki import plots
    non_square = [row for row in tiny_run[1]["rows"] if row["m"] != row["n"]]
    with pytest.raises(ValueError, match="plot_error_vs_n: no measured square shapes"):
        plots.plot_error_vs_n(tiny_run[1]["meta"], non_square, "float64")


def test_one_size_draws_the_natives_and_floors(tiny_run):
    """A line through one point draws nothing: with one size, the natives and the dotted floors
    get a marker, so that every line of the legend shows."""
    one_size = [row for row in tiny_run[1]["rows"] if row["shape"] == "32"]
    lines = _figure_lines(tiny_run, one_size)
    natives = [line for line in lines if line.get_label().startswith("native")]
    floors = [line for line in lines if line.get_linestyle() == ":"]
    assert len(natives) == 2 and floors
    assert all(line.get_marker() not in ("None", "", None) for line in natives + floors)


@pytest.mark.parametrize("argv,message", [
    (["--plot", "figure.txt"], "argument --plot: expected a file ending in .png, .pdf, .svg"),
    (["--shape", "4", "5", "6", "--plot", "figure.png"],
     "argument --plot: the throughput figure needs square shapes (--sizes)"),
])
def test_bad_plot_arguments(argv, message, capsys):
    assert_usage_error(bench.parse_args, ["--device", "cpu", *argv], message, capsys)



def test_crt_fixed_rows_use_the_requested_moduli(capsys, tmp_path):
    report, stdout, stderr = run_tiny(capsys, tmp_path, "--backends", "crt", "--modes", "fixed",
                                      "--moduli", "16", "2", "9", "--sgemm-moduli", "5")
    cells = [line.split() for line in table_lines(stdout)]
    for shape in TINY_SHAPES:
        assert row_keys(report, shape) == NATIVES_AND_FLOORS + [
            key("ozaki dgemm", "crt", moduli=count) for count in (16, 2, 9)] + [
            key("ozaki sgemm", "crt", moduli=5)]
        for row in rows_of(report, shape)[4:]:
            assert row["plan_backend"] == "crt" and row["plan_reason"] == "requested"
            assert row["moduli"] == row["moduli_requested"] == row["gemms"]
            assert row["slices_requested"] is row["fast_requested"] is row["slices"] is None
            assert row["floor_ms"] == pytest.approx(row["gemms"] * unit_time(report, shape, "int8"))
            assert row["max_rel_err"] >= 0 and "vs_default" not in row
    assert [line[3:6] for line in cells if line[1:3] == ["ozaki", "dgemm"]] == [
        ["crt", f"m={count}", "-"] for count in (16, 2, 9)] * len(TINY_SHAPES)
    assert "n=16 ozaki dgemm m=9 (crt) ... " in stderr
    assert "n=24 ozaki sgemm m=5 (crt) ... " in stderr


def test_crt_fixed_rows_of_the_tiny_run(tiny_run):
    _, report, _ = tiny_run
    for shape in SHAPES:
        fixed = [row for row in rows_of(report, shape) if row["moduli_requested"] is not None]
        assert [(row["dtype"], row["moduli_requested"], row["moduli"], row["gemms"])
                for row in fixed] == [("float64", m, m, m) for m in MODULI] + [
            ("float32", m, m, m) for m in (7, 8)]
        for row in fixed:
            default = default_row(report, shape, row["method"], "crt")
            assert row["vs_default"] == pytest.approx(row["time_ms"] / default["time_ms"])


@pytest.mark.parametrize("backends, int8_floor", [
    (["fp16"], False), (["auto"], True), (["crt"], True), (["int8"], True),
    (["fp16", "int8"], True), (list(bench.BACKENDS), True)])
def test_int8_floor_row_iff_an_int8_backend(backends, int8_floor):
    args = bench.parse_args([*TINY, "--backends", *backends])
    specs = bench.row_specs(dtypes=args.dtypes, modes=args.modes, backends=args.backends,
                            slices=args.slices, sgemm_slices=args.sgemm_slices,
                            all_pairs_slices=args.all_pairs_slices, moduli=args.moduli,
                            sgemm_moduli=args.sgemm_moduli)
    floors = [(spec.method, spec.dtype) for spec in specs if spec.kind == "floor_unit"]
    assert floors == [(FP16_UNIT, torch.float16)] + ([(INT8_UNIT, torch.int8)] if int8_floor
                                                     else [])
    assert [spec.kind for spec in specs[:2 + len(floors)]] == ["native"] * 2 + ["floor_unit"] * len(
        floors)  # natives and floors before every ozaki row
    meta = bench.run_metadata(args, [], bench.FLOOR_FP16_OUT)
    assert meta["int8_floor_gemm"] == (bench.FLOOR_INT8 if int8_floor else None)
    assert ("INT8" in bench.notes(meta)[1]) is int8_floor


def test_int8_floor_row_measures_int8_matmul(capsys, tmp_path):
    report, _, _ = run_tiny(capsys, tmp_path, "--backends", "int8", "--modes", "default",
                            "--dtype", "float64")
    for m, k, n in TINY_SHAPES:
        unit = rows_of(report, (m, k, n), INT8_UNIT)[0]
        assert (unit["kind"], unit["dtype"], unit["backend"], unit["gemms"]) == (
            "floor_unit", "int8", None, 1)
        assert unit["status"] == "ok" and "k_chunks" not in unit
        assert unit["tflops"] == pytest.approx(2 * m * k * n / unit["time_ms"] / 1e9)
    bt = torch.randint(-128, 128, (5, 7), dtype=torch.int8)
    a = torch.randint(-128, 128, (3, 7), dtype=torch.int8)
    assert torch.equal(torch.ops.ozaki.int8_matmul(a, bt), (a.long() @ bt.long().T).int())


def test_int8_floor_chunks_k_beyond_the_int8_matmul_limit():
    limit = (1 << 17) - 1
    assert bench.int8_chunks(16) == (1, 16)
    assert bench.int8_chunks(limit) == (1, limit)
    assert bench.int8_chunks(limit + 1) == (2, 1 << 16)
    assert bench.int8_chunks(1 << 22) == (33, -(-(1 << 22) // 33))


def test_floors_use_the_unit_of_the_plan_backend():
    run = SimpleNamespace(shape=(8, 8, 8), native_ms={}, floor_units={"fp16": 2.0, "int8": 0.5})
    spec = bench.RowSpec("ozaki dgemm", "ozaki", torch.float64, default=True, backend="auto")
    for plan_backend, gemms, unit, floor in [("fp16", 10, "fp16", 20.0), ("int8", 10, "int8", 5.0),
                                             ("crt", 15, "int8", 7.5)]:
        fields = {"plan_backend": plan_backend, "gemms": gemms, "time_ms": 10.0}
        derived = bench.derived_fields(spec, run, fields)
        assert (derived["floor_unit"], derived["floor_ms"]) == (unit, floor)
        assert derived["of_floor"] == pytest.approx(floor / 10.0)
    run.floor_units = {"fp16": 2.0}  # no INT8 unit measured: no floor rather than a wrong one
    derived = bench.derived_fields(spec, run, {"plan_backend": "crt", "gemms": 15, "time_ms": 1.0})
    assert "floor_ms" not in derived and "of_floor" not in derived


def test_auto_rows_report_what_they_chose(tiny_run):
    process, report, _ = tiny_run
    for shape in SHAPES:
        A, B, _, _ = bench.make_inputs(shape, 0.5, 0, 8, torch.device("cpu"))
        for dtype, method in (("float64", "ozaki dgemm"), ("float32", "ozaki sgemm")):
            A_, B_ = A.to(getattr(torch, dtype)), B.to(getattr(torch, dtype))
            chosen = ozaki.plan(A_, B_)
            auto = [row for row in rows_of(report, shape) if row["backend"] == "auto"
                    and row["dtype"] == dtype]
            assert [row["method"] for row in auto] == [method, f"{method} plan", f"{method} nearest"]
            default, plan, nearest = auto
            for row in (default, plan):
                assert (row["plan_backend"], row["gemms"], row["moduli"], row["slices"]) == (
                    chosen.backend, chosen.gemms, chosen.moduli, chosen.slices)
            assert nearest["plan_backend"] == ozaki.plan(A_, B_, rounding="nearest").backend
            # the default row of the other backend the plan chose gives the same product plan
            same = default_row(report, shape, method, chosen.backend)
            assert (same["gemms"], same["moduli"], same["slices"]) == (
                default["gemms"], default["moduli"], default["slices"])
            assert default["floor_unit"] == ("fp16" if chosen.backend == "fp16" else "int8")
    assert "n=32 ozaki dgemm default (auto) ... " in process.stderr
    line = next(line for line in process.stderr.splitlines()
                if "n=32 ozaki dgemm default (auto) ... " in line)
    row = default_row(report, SHAPES[0], "ozaki dgemm")
    assert f" [{row['plan_backend']}: " in line and f"{row['gemms']} " in line


def test_each_backend_passes_itself_and_has_its_modes():
    specs = bench.row_specs(dtypes=["float64", "float32"], modes=bench.MODES,
                            backends=bench.BACKENDS, slices=[8], sgemm_slices=[4],
                            all_pairs_slices=[6], moduli=[15], sgemm_moduli=[7])
    options = {}
    for spec in specs:
        if spec.kind in ("ozaki", "plan"):
            options.setdefault((spec.dtype, spec.backend), []).append(
                (spec.label(), spec.options()))
    nearest = {"rounding": "nearest"}
    for dtype, routine in ((torch.float64, "dgemm"), (torch.float32, "sgemm")):
        m = f"ozaki {routine}"
        # the auto default product is exactly ozaki.dgemm(A, B); every other row names its backend
        assert options[dtype, "auto"] == [
            (f"{m} default", {}), (f"{m} plan default", {"backend": "auto"}),
            (f"{m} nearest default", {"backend": "auto", **nearest})]
        moduli = 15 if dtype == torch.float64 else 7
        assert options[dtype, "crt"] == [
            (f"{m} default", {"backend": "crt"}), (f"{m} plan default", {"backend": "crt"}),
            (f"{m} nearest default", {"backend": "crt", **nearest}),
            (f"{m} m={moduli}", {"backend": "crt", "moduli": moduli})]
        for backend in ("int8", "fp16"):
            scheme_one = options[dtype, backend]
            assert scheme_one[:3] == [
                (f"{m} default", {"backend": backend}),
                (f"{m} plan default", {"backend": backend}),
                (f"{m} nearest default", {"backend": backend, **nearest})]
            if dtype == torch.float64:
                assert scheme_one[3:] == [
                    (f"{m} auto fast", {"backend": backend, "slices": None, "fast": True}),
                    (f"{m} s=8 fast", {"backend": backend, "slices": 8, "fast": True}),
                    (f"{m} s=6 all pairs", {"backend": backend, "slices": 6, "fast": False})]
            else:
                assert scheme_one[3:] == [
                    (f"{m} s=4 fast", {"backend": backend, "slices": 4, "fast": True})]


def test_crt_rows_beyond_its_inner_limit_are_not_applicable():
    k = 1 << 17  # one more than scheme II takes
    run = SimpleNamespace(shape=(2, k, 2), repeats=1)
    crt = bench.RowSpec("ozaki dgemm", "ozaki", torch.float64, default=True, backend="crt")
    row = bench.measure_row(crt, run)
    assert row["status"] == "n/a" and "time_ms" not in row
    assert row["note"] == f"backend crt needs k <= {k - 1}, got k = {k}"
    plan = bench.RowSpec("ozaki dgemm plan", "plan", torch.float64, default=True, backend="crt")
    assert bench.unsupported(plan, run) == row["note"]
    for spec in [bench.RowSpec("ozaki dgemm nearest", "ozaki", torch.float64, default=True,
                               rounding="nearest", backend="crt"),  # scheme I past 2^17 - 1
                 bench.RowSpec("ozaki dgemm", "ozaki", torch.float64, default=True,
                               backend="auto")]:
        assert bench.unsupported(spec, run) is None
    assert bench.unsupported(crt, SimpleNamespace(shape=(2, k - 1, 2))) is None
    # too few moduli to leave any scale for this k (ozaki.crt.smallest_moduli(4096) == 2)
    few = bench.RowSpec("ozaki dgemm", "ozaki", torch.float64, backend="crt", moduli=1)
    assert bench.unsupported(few, SimpleNamespace(shape=(2, 4096, 2))) == (
        "k = 4096 needs at least 2 moduli, got 1")
    assert bench.unsupported(few, SimpleNamespace(shape=(2, 16, 2))) is None
    line = bench.format_table([row]).splitlines()[-1]
    assert " n/a " in line and line.split()[4] == "crt"
    assert bench.progress_message(crt, row).endswith(f"ozaki dgemm default (crt) ... n/a "
                                                     f"({row['note']})")


@pytest.mark.parametrize("argv,message", [
    (["--seed", "18446744073709551616"], "argument --seed: must be an integer in 0..2^64 - 1 (a "
                                         "seed of torch.Generator.manual_seed), got "
                                         "'18446744073709551616'"),
    (["--seed", "-1"], "argument --seed: must be an integer in 0..2^64 - 1"),
    (["--phi", "40", "--sizes", "8"], "argument --phi: 40 is too large: the 8 x 8 x 8 inputs "
                                      "(rand - 0.5) * exp(phi * randn) of --seed 0 hold entries "
                                      "past the range of float32"),
    (["--phi", "1000", "--sizes", "8", "--dtype", "float64"],
     "argument --phi: 1000 is too large: the 8 x 8 x 8 inputs (rand - 0.5) * exp(phi * randn) "
     "of --seed 0 hold entries past the range of float64"),
])
def test_seed_and_phi_the_inputs_cannot_take_stop_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--device", "cpu", "--quiet", *argv])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err


def test_phi_checked_against_the_dtypes_run():
    # float64 holds the inputs that float32 cannot
    args = bench.parse_args(["--device", "cpu", "--phi", "40", "--sizes", "8", "--dtype",
                             "float64", "--seed", str(2 ** 64 - 1)])
    assert args.phi == 40 and args.seed == 2 ** 64 - 1
