"""Class names as models carry them: ultralytics' metadata dict, JSON, and the defaults."""

from __future__ import annotations

import pytest

from npudure.vision.labels import COCO80, NamesError, label, parse_names, resolve_names, ultralytics_names


def test_ultralytics_metadata_dict_round_trips() -> None:
    text = "{0: 'forklift', 1: 'person in hi-vis'}"
    assert parse_names(text) == ("forklift", "person in hi-vis")
    assert parse_names(ultralytics_names(("a", "b", "c"))) == ("a", "b", "c")


def test_json_list_and_dict_are_read() -> None:
    assert parse_names('["cat", "dog"]') == ("cat", "dog")
    assert parse_names('{"1": "dog", "0": "cat"}') == ("cat", "dog")


@pytest.mark.parametrize(
    "text",
    ["{0: 'a', 2: 'b'}", "__import__('os').system('true')", "42", "[]", "{'x': 'a'}", "not names"],
)
def test_bad_names_are_refused_without_evaluating_code(text: str) -> None:
    with pytest.raises(NamesError):
        parse_names(text)


def test_defaults_and_counts() -> None:
    assert len(COCO80) == 80 and COCO80[0] == "person" and COCO80[79] == "toothbrush"
    assert resolve_names(80, None, "m") == COCO80
    assert resolve_names(2, None, "m") == ("", "")
    assert resolve_names(2, ("a", "b"), "m") == ("a", "b")
    with pytest.raises(NamesError, match="names 3 classes but the model has 2"):
        resolve_names(2, ("a", "b", "c"), "m")
    assert label(("a", "b"), 1) == "b" and label(("a", "b"), 5) == ""
