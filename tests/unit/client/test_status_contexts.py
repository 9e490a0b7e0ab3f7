"""`npudure status` on one board: its contexts, NPU cores and where the count came from."""

from __future__ import annotations

import pytest

from npudure.client.status import _print_node
from npudure.proto import inference_pb2 as pb


def _first_line(capsys: pytest.CaptureFixture[str], status: pb.NodeStatus) -> str:
    _print_node(status)
    return capsys.readouterr().out.splitlines()[0]


def test_contexts_cores_and_source_are_printed(capsys: pytest.CaptureFixture[str]) -> None:
    measured = pb.NodeStatus(
        node="b1", backend="rknn", npu_cores=2, contexts=8, contexts_source="RK3576 default, measured"
    )
    assert _first_line(capsys, measured) == (
        "node b1: backend rknn, 8 context(s) on 2 NPU core(s) (RK3576 default, measured)"
    )
    guess = pb.NodeStatus(
        node="b2",
        backend="rknn",
        npu_cores=3,
        contexts=9,
        contexts_source="RK3588 default, provisional: not measured",
    )
    assert "9 context(s) on 3 NPU core(s) (RK3588 default, PROVISIONAL: not measured)" in _first_line(
        capsys, guess
    )


def test_an_older_agent_reports_its_contexts_as_npu_cores(capsys: pytest.CaptureFixture[str]) -> None:
    assert _first_line(capsys, pb.NodeStatus(node="b1", backend="sim", npu_cores=2)).endswith(
        ", 2 context(s)"
    )
