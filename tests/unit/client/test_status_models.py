"""`npudure status` shows each board's models: one line per model for a board, a placement column
(in flight / contexts, the default starred) in the cluster table."""

from __future__ import annotations

import pytest

from npudure.client.status import _print_node, models_placed
from npudure.proto import inference_pb2 as pb

TWO = pb.NodeStatus(
    node="b1",
    backend="sim",
    models=[
        pb.ModelStatus(name="general", default=True, contexts=8, in_flight=3, contexts_source="agent config"),
        pb.ModelStatus(name="plates", contexts=2, in_flight=1, served_total=7, input_size=320, classes=3),
    ],
)


def test_placement_names_each_model_with_its_load() -> None:
    assert models_placed(TWO) == "general* 3/8, plates 1/2"
    assert models_placed(pb.NodeStatus()) == "-"  # an agent older than model sets


def test_a_board_prints_a_line_per_model(capsys: pytest.CaptureFixture[str]) -> None:
    _print_node(TWO)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  model ")]
    assert lines[0].startswith("  model general (default): 8 context(s) (agent config), in flight 3")
    assert lines[1].startswith("  model plates: 2 context(s) (-), in flight 1  queued 0  served 7  input 320")
