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
