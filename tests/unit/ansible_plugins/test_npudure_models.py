"""The inventory's model repository: placement per board, the default per board, every typo named."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_plugins.filter.npudure_models import (
    board_models,
    model_holders,
    models_cell,
    models_of,
    problems,
)

BOARDS = ["board1", "board2", "board3"]
REPO = [
    {"name": "general", "src": "models/general.onnx"},
    {"name": "plates", "src": "models/plates.onnx", "boards": ["board2", "board3"], "default": False},
    {"name": "faces", "boards": 1},
]


def test_each_board_holds_what_its_placement_says_the_default_first() -> None:
    assert [(e["name"], e["default"]) for e in models_of(REPO, "board1", BOARDS)] == [
        ("general", True),
        ("faces", False),
    ]
    assert [e["name"] for e in models_of(REPO, "board3", BOARDS)] == ["general", "plates"]
    assert models_of(REPO, "board9", BOARDS) == []  # a host outside the group holds nothing


def test_a_board_without_the_default_serves_its_first_model_as_its_own() -> None:
    repo = [{"name": "general", "boards": ["board1"], "default": True}, {"name": "plates", "boards": 2}]
    assert [(e["name"], e["default"]) for e in models_of(repo, "board2", BOARDS)] == [("plates", True)]
    assert [(e["name"], e["default"]) for e in models_of(repo, "board1", BOARDS)] == [
        ("general", True),
        ("plates", False),
    ]


def test_the_marked_default_goes_first_wherever_it_is_listed() -> None:
    repo = [{"name": "general"}, {"name": "plates", "default": True}]
    assert [e["name"] for e in models_of(repo, "board2", BOARDS)] == ["plates", "general"]


@pytest.mark.parametrize(
    ("repo", "said"),
    [
        ({"name": "general"}, "must be a list"),
        ([{"name": "general"}, {"name": "general"}], "named twice"),
        ([{"name": "bad name"}], "letters, digits"),
        ([{"name": "a", "default": True}, {"name": "b", "default": True}], "more than one model"),
        ([{"name": "a", "boards": ["board7"]}], "board7 are not in the boards group"),
        ([{"name": "a", "boards": 4}], "not a count from 1 to the 3 boards"),
        ([{"name": "a", "boards": []}], "empty list"),
        ([{"name": "a", "boards": "some"}], "all, a list of board names, or a count"),
        ([{"name": "a", "sorce": "x.onnx"}], "unknown key(s) sorce"),
    ],
)
def test_every_mistake_is_named_with_its_fix(repo: object, said: str) -> None:
    found = problems(repo, BOARDS)
    assert any(said in p for p in found), found
    with pytest.raises(AnsibleFilterError, match="npudure_models: "):
        models_of(repo, "board1", BOARDS)


def test_a_good_repository_has_no_problems() -> None:
    assert problems(REPO, BOARDS) == [] and problems([], BOARDS) == []


def test_the_scheduler_gets_each_boards_models_by_its_node_name() -> None:
    hostvars = {"board2": {"npudure_agent_node_name": "garage"}}
    assert board_models(REPO, BOARDS, hostvars) == {
        "board1": ["general", "faces"],
        "garage": ["general", "plates"],
        "board3": ["general", "plates"],
    }
    assert board_models([], BOARDS, hostvars) == {}


def test_verify_sends_each_models_frames_to_its_holders() -> None:
    hostvars = {"board1": {"ansible_host": "10.0.0.11"}, "board3": {"npudure_agent_listen_port": 50061}}
    assert model_holders(REPO, BOARDS, hostvars, "npudure_agent_listen_port", 50051) == {
        "general": ["10.0.0.11:50051", "board2:50051", "board3:50061"],
        "faces": ["10.0.0.11:50051"],
        "plates": ["board2:50051", "board3:50061"],
    }


def test_verify_shows_each_boards_models_with_hash_and_names() -> None:
    served = [
        {"name": "fall", "model_sha256": "0123456789abcdef" * 4, "class_names": ["Normal", "Fall"]},
        {"name": "general", "model_sha256": "", "class_names": ["person", "bicycle", "car", "motorcycle"]},
    ]
    assert models_cell(served) == (
        "fall 0123456789ab (2 classes: Normal, Fall); general - (4 classes: person, bicycle, car +1)"
    )
    assert models_cell([]) == models_cell(None) == "-"
