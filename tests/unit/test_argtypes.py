"""The commands' counts and durations: out of range is a usage error (exit 2) before anything starts."""

from __future__ import annotations

import argparse

import pytest

from npudure.argtypes import contexts, non_negative, positive, whole
from npudure.cli import main


def test_whole_takes_its_minimum_and_more() -> None:
    assert whole(1)("1") == 1 and whole(1)("16") == 16 and whole(0)("0") == 0


@pytest.mark.parametrize(
    ("parse", "text", "says"),
    [
        (whole(1), "0", "must be 1 or more (got 0)"),
        (whole(0), "-1", "must be 0 or more (got -1)"),
        (whole(1), "2.5", "'2.5' is not a whole number (e.g. 3)"),
        (whole(1), "three", "'three' is not a whole number"),
        (positive, "0", "must be above 0 (got 0)"),
        (positive, "-3", "must be above 0"),
        (positive, "nan", "'nan' is not a finite number"),
        (positive, "inf", "'inf' is not a finite number"),
        (positive, "ten", "'ten' is not a number (e.g. 2.5)"),
        (non_negative, "-0.5", "must be 0 or more (got -0.5)"),
    ],
)
def test_a_value_out_of_range_is_refused_in_words(parse, text, says) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        parse(text)
    assert says in str(exc.value)


def test_the_numbers_in_range_are_read_as_numbers() -> None:
    assert positive("2.5") == 2.5 and non_negative("0") == 0.0 and non_negative("1e3") == 1000.0
    assert (contexts("1"), contexts("64"), contexts("auto")) == (1, 64, "auto")


# Each of these once went on: `bench --repetitions 0` ended in a traceback, `bench local --concurrency 0`
# wrote an empty result folder, `infer --count 0` sent nothing and said rc 0, `lab up --boards 0` chose a
# time scale before the lab refused it. Parsing stops them all, before any connection or boot.
TARGET = ["--target", "127.0.0.1:9"]
REFUSED = [
    (["bench", "run", *TARGET, "--repetitions", "0"], "--repetitions", "must be 1 or more"),
    (["bench", "run", *TARGET, "--frames", "0"], "--frames", "must be 1 or more"),
    (["bench", "run", *TARGET, "--boards-max", "0"], "--boards-max", "must be 1 or more"),
    (["bench", "run", *TARGET, "--connections", "0"], "--connections", "must be 1 or more"),
    (["bench", "run", *TARGET, "--duration", "0"], "--duration", "must be above 0"),
    (["bench", "run", *TARGET, "--warmup", "-1"], "--warmup", "must be 0 or more"),
    (["bench", "run", *TARGET, "--timeout", "nan"], "--timeout", "not a finite number"),
    (["bench", "local", *TARGET, "--concurrency", "0"], "--concurrency", "must be 1 or more"),
    (["bench", "sweep", *TARGET, "--sweep", "1,0,4"], "--sweep", "expected integers of 1 or more"),
    (
        ["bench", "hetero", *TARGET, "--concurrency", "1", "--hetero-ladder", "-5"],
        "--hetero-ladder",
        "non-negative",
    ),
    (["bench", "scaling", *TARGET, "--concurrency", "-2"], "--concurrency", "must be 1 or more"),
    (["infer", *TARGET, "--count", "0"], "--count", "must be 1 or more"),
    (["infer", *TARGET, "--timeout", "0"], "--timeout", "must be above 0"),
    (["status", *TARGET, "--timeout", "-1"], "--timeout", "must be above 0"),
    (["admin", "wait-idle", *TARGET, "--interval", "0"], "--interval", "must be above 0"),
    (["local", "--boards", "0"], "--boards", "must be 1 or more"),
    (["local", "--connections-per-board", "0"], "--connections-per-board", "must be 1 or more"),
    (["local", "--contexts", "0"], "--contexts", "from 1 to 64, or auto (got 0)"),
    (["local", "--contexts", "65"], "--contexts", "from 1 to 64, or auto (got 65)"),
    (["local", "--contexts", "many"], "--contexts", "from 1 to 64, or auto (got many)"),
    (["lab", "up", "--boards", "0"], "--boards", "must be 1 or more"),
    (["lab", "up", "--arm64-boards", "-1"], "--arm64-boards", "must be 0 or more"),
    (["lab", "add", "--timeout", "0"], "--timeout", "must be above 0"),
    (["faults", "run", "--boards", "0"], "--boards", "must be 1 or more"),
    (["faults", "run", "--concurrency", "0"], "--concurrency", "must be 1 or more"),
    (["faults", "run", "--frames", "0"], "--frames", "must be 1 or more"),
    (["faults", "run", "--hold", "0"], "--hold", "must be above 0"),
    (["faults", "soak", "--interval", "0"], "--interval", "must be above 0"),
    (["faults", "soak", "--fd-growth", "-1"], "--fd-growth", "must be 0 or more"),
    (["model", "frames", "--out", "/nonexistent", "--count", "0"], "--count", "must be 1 or more"),
    (["model", "build", "--classes", "0"], "--classes", "must be 1 or more"),
    (["pki", "init-ca", "--dir", "/nonexistent", "--days", "0"], "--days", "must be 1 or more"),
]


@pytest.mark.parametrize(
    ("argv", "option", "says"), REFUSED, ids=[" ".join(a[:2]) + " " + o for a, o, _ in REFUSED]
)
def test_every_command_refuses_a_count_or_duration_out_of_range(argv, option, says, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}:" in err and says in err and "Traceback" not in err
