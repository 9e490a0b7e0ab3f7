"""``npudure faults``: a bad setting is refused before any lab boots, with argparse's usage exit."""

from __future__ import annotations

import pytest

from npudure.cli import main

BAD = [("--time-scale", "0"), ("--time-scale", "x"), ("--hang-timeout", "-1")]


@pytest.mark.parametrize("action", ["run", "soak"])
@pytest.mark.parametrize(("option", "value"), BAD)
def test_a_setting_that_is_not_a_positive_number_is_a_usage_error(action, option, value, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["faults", action, option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}:" in err and ("must be above 0" in err or "is not a number" in err)


def test_the_time_scale_reads_as_in_the_lab() -> None:
    import argparse

    from npudure_workshop.faults import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["run", "--time-scale", "2.5", "--hang-timeout", "0.5"])
    assert (args.time_scale, args.hang_timeout) == (2.5, 0.5)
    assert parser.parse_args(["soak"]).time_scale == 10.0
