"""`python -m ozaki`: the demo runs on the CPU and rejects bad arguments by name."""

import pytest

from helpers import assert_usage_error
from ozaki import __main__ as demo


def test_demo_prints_plans_times_and_errors(capsys):
    demo.main(["--size", "40", "--samples", "4", "--device", "cpu", "--phi", "2"])
    out = capsys.readouterr().out
    assert "ozaki demo: 40 x 40 x 40, phi = 2.0, on CPU" in out
    for routine in ("ozaki.dgemm", "ozaki.sgemm"):
        assert f"\n{routine}: " in out
    assert out.count("max |C - exact| / (|A||B|):  ozaki") == 2
    assert out.count("correctly rounded entries:") == 2


@pytest.mark.parametrize("argv,message", [
    (["--phi", "-1"], "argument --phi: must be a finite number >= 0, got '-1'"),
    (["--size", "0"], "argument --size: must be a positive integer, got '0'"),
    (["--samples", "x"], "argument --samples: must be a positive integer, got 'x'"),
    (["--device", "tpu"], "argument --device: expected cpu, cuda or cuda:I, got 'tpu'"),
])
def test_bad_arguments_name_the_argument_and_value(argv, message, capsys):
    assert_usage_error(demo.parse_args, argv, message, capsys)


@pytest.mark.parametrize("argv,message", [
    (["--seed", "18446744073709551616"], "argument --seed: must be an integer in 0..2^64 - 1 (a "
                                         "seed of torch.Generator.manual_seed), got "
                                         "'18446744073709551616'"),
    (["--seed", "-1"], "argument --seed: must be an integer in 0..2^64 - 1"),
])
def test_seed_outside_the_generator_seeds_is_refused(argv, message, capsys):
    assert_usage_error(demo.parse_args, ["--device", "cpu", *argv], message, capsys)
    assert demo.parse_args(["--device", "cpu", "--seed", str(2 ** 64 - 1)]).seed == 2 ** 64 - 1


def test_help_shows_the_defaults(capsys):
    """As the bench's and the study's help do (ozaki.cli.HelpFormatter)."""
    with pytest.raises(SystemExit) as exit_info:
        demo.parse_args(["--help"])
    assert exit_info.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    for option, default in (("--phi", "1.0"), ("--samples", "8"), ("--seed", "0")):
        described = help_text.split(f"{option} {option[2:].upper()} ", 1)[1]
        assert described.split(" --", 1)[0].endswith(f"(default: {default})"), described
    assert "(default: None)" not in help_text


def test_a_size_whose_operands_cannot_fit_is_refused(capsys):
    """--size whose float64 operands and product exceed the host's memory: an argument error
    naming it, before any allocation (which would end in the allocator's traceback)."""
    assert_usage_error(demo.parse_args, ["--device", "cpu", "--size", "99999999"],
                       "argument --size: 99999999 x 99999999 float64 A, B and C = A @ B need "
                       "2.24e+08 GiB, more than the host's", capsys)


@pytest.mark.parametrize("argv,message", [
    (["--phi", "25"], "argument --phi: 25 is too large: the 512 x 512 x 512 inputs (rand - 0.5) "
                      "* exp(phi * randn) of --seed 0 hold entries past the range of float32"),
    (["--phi", "1000", "--size", "8"], "argument --phi: 1000 is too large: the 8 x 8 x 8 inputs"),
])
def test_phi_past_the_range_of_the_inputs_stops_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--device", "cpu", *argv])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err
    assert "phi <= 10.35 fits every seed" in captured.err


def test_phi_whose_inputs_fit_is_accepted():
    # past the bound that fits every seed, but these inputs fit float32
    assert demo.parse_args(["--device", "cpu", "--size", "8", "--phi", "16"]).phi == 16
