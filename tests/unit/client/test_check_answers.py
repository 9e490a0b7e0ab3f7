"""``npudure check-answers`` with fake boards: who is named, the exit codes, the usage errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from npudure.cli import main
from npudure.client import check_answers
from npudure.client.answers import BoardAnswers, frame_hash
from npudure.proto import inference_pb2 as pb


@dataclass
class Det:
    class_id: int
    score: float
    x1: float = 0.0
    y1: float = 0.0
    x2: float = 10.0
    y2: float = 10.0


def answers_of(detections: Callable[[int], list[Det]], emulated: bool = False) -> Callable[..., BoardAnswers]:
    """A fake board: ``detections(frame index)`` for every repeat of that frame."""

    def ask(address: str, sent: list[bytes], repeats: int, timeout_s: float, model: str = "") -> BoardAnswers:
        per_frame = [detections(i) for i in range(len(sent))]
        return BoardAnswers(
            address,
            node=f"node-{address.rsplit(':', 1)[1]}",
            backend="sim" if emulated else "rknn",
            emulated=emulated,
            detections=sum(map(len, per_frame)),
            repeats=[[frame_hash(d)] * repeats for d in per_frame],
        )

    return ask


RIGHT = answers_of(lambda i: [Det(i, 0.9)])
WRONG = answers_of(lambda i: [Det((i + 1) % 6, 0.9)])  # each frame gets the next frame's answer


def fleet(monkeypatch: pytest.MonkeyPatch, boards: dict[str, Callable[..., BoardAnswers]]) -> None:
    def ask(address: str, *rest: object) -> BoardAnswers:
        return boards[address](address, *rest)

    monkeypatch.setattr(check_answers, "ask_board", ask)
    monkeypatch.setattr(
        check_answers,
        "board_status",
        lambda address, timeout_s: pb.NodeStatus(
            model_sha256="ab" * 32, runtime_version="2.3.2", npu_cores=3
        ),
    )


def test_the_board_that_disagrees_is_named_and_the_run_fails(monkeypatch, capsys) -> None:
    fleet(monkeypatch, {"10.0.0.1:1": RIGHT, "10.0.0.2:2": WRONG, "10.0.0.3:3": RIGHT})
    assert main(["check-answers", "10.0.0.1:1", "10.0.0.2:2", "10.0.0.3:3"]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert "class ids, scores to 0.01, box corners to 1 px" in lines[0]
    assert lines[1].startswith("node-1 (10.0.0.1:1)") and lines[1].endswith("agrees")
    assert (
        lines[2].startswith("node-2 (10.0.0.2:2)")
        and "DIFFERS from the majority on 6 of 6 frames" in lines[2]
    )
    assert lines[1].split("answers ")[1][:16] == lines[3].split("answers ")[1][:16]
    [problem] = err.splitlines()
    assert problem.startswith("npudure check-answers: node-2 (10.0.0.2:2): differs from the majority (2 of 3")
    assert "model sha256" in problem and "runtime version" in problem and "contexts 3" in problem


def test_every_board_agrees(monkeypatch, capsys) -> None:
    fleet(monkeypatch, {"a:1": RIGHT, "b:2": RIGHT})
    assert main(["check-answers", "a:1", "b:2"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "2 of 2 boards give the majority's answers" in out


def test_an_unreachable_board_is_one_clear_error(monkeypatch, capsys) -> None:
    def away(address: str, *_: object) -> BoardAnswers:
        raise check_answers.BoardError(f"{address}: cannot connect within 10 s: is the agent running there?")

    fleet(monkeypatch, {"a:1": RIGHT, "b:2": away, "c:3": RIGHT})
    assert main(["check-answers", "a:1", "b:2", "c:3"]) == 1
    out, err = capsys.readouterr()
    assert "b:2" in out and "did not answer" in out
    assert err == "npudure check-answers: b:2: cannot connect within 10 s: is the agent running there?\n"


def test_boards_without_detections_are_said_to_show_nothing(monkeypatch, capsys) -> None:
    empty = answers_of(lambda i: [], emulated=True)
    fleet(monkeypatch, {"a:1": empty, "b:2": empty})
    assert main(["check-answers", "a:1", "b:2"]) == 0
    assert "no board returned a detection" in capsys.readouterr().out


def test_emulated_detections_are_said_to_be_synthetic(monkeypatch, capsys) -> None:
    fleet(monkeypatch, {"a:1": answers_of(lambda i: [Det(1, 0.5)], emulated=True)})
    assert main(["check-answers", "a:1"]) == 0
    out = capsys.readouterr().out
    assert "EMULATED" in out and "SYNTHETIC" in out and "one board answered" in out


def test_a_board_mixing_answers_between_requests_is_named(monkeypatch, capsys) -> None:
    def shaky(
        address: str, sent: list[bytes], repeats: int, timeout_s: float, model: str = ""
    ) -> BoardAnswers:
        board = RIGHT(address, sent, repeats, timeout_s)
        board.repeats[3][1] = frame_hash([Det(9, 0.1)])
        return board

    fleet(monkeypatch, {"a:1": RIGHT, "b:2": shaky, "c:3": RIGHT})
    assert main(["check-answers", "a:1", "b:2", "c:3"]) == 1
    out, err = capsys.readouterr()
    assert "UNSTABLE: repeats of frame(s) 3" in out
    assert err.startswith("npudure check-answers: node-2 (b:2): the same frame got different answers")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["board1"], "expected a board agent's host:port"),
        (["a:1", "--frames", "1"], "--frames"),
        (["a:99999"], "expected a board agent's host:port"),
    ],
)
def test_bad_arguments_exit_2(argv: list[str], says: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check-answers", *argv])
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_a_board_given_twice_exits_2(capsys) -> None:
    assert main(["check-answers", "a:1", "a:1"]) == 2
    assert capsys.readouterr().err == "npudure check-answers: a:1 given more than once\n"


def test_the_model_named_reaches_every_board(monkeypatch, capsys) -> None:
    asked: list[str] = []

    def recording(
        address: str, sent: list[bytes], repeats: int, timeout_s: float, model: str = ""
    ) -> BoardAnswers:
        asked.append(model)
        return RIGHT(address, sent, repeats, timeout_s, model)

    fleet(monkeypatch, {"10.0.0.1:1": recording, "10.0.0.2:2": recording})
    assert main(["check-answers", "10.0.0.1:1", "10.0.0.2:2", "--model", "plates"]) == 0
    assert asked == ["plates", "plates"] and "model plates" in capsys.readouterr().out.splitlines()[0]
