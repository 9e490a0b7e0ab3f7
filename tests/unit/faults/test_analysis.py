"""A fault's verdict and the faults' printed tables, on samples made up by hand."""

from __future__ import annotations

import grpc

from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.samples import from_raw
from npudure_workshop.faults.analysis import FaultResult, Tally, pass_fail, spec_table, table
from npudure_workshop.faults.operations import OperationResult

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
DEADLINE = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]


def test_a_tally_counts_every_request_and_the_failed_ones_by_code() -> None:
    ok = pb.InferResponse(node="board1").SerializeToString()
    codes = [0, UNAVAILABLE, 0, DEADLINE, UNAVAILABLE]
    samples = from_raw([0.0] * 5, [0.0] * 5, [0.1] * 5, codes, [ok if c == 0 else None for c in codes])
    for result in (FaultResult("agent-kill", "board1"), OperationResult("rolling-change", "scheduler")):
        assert isinstance(result, Tally)
        result.count(samples)
        assert (result.requests, result.failed) == (5, 3)
        assert result.error_codes == {"DEADLINE_EXCEEDED": 1, "UNAVAILABLE": 2}


def test_as_dict_puts_the_results_key_first_and_rounds_to_the_millisecond() -> None:
    r = FaultResult("link-cut", "board2", excluded_after_s=1.23456)
    d = r.as_dict()
    assert list(d)[:3] == ["fault", "board", "requests"]
    assert d["excluded_after_s"] == 1.235
    o = OperationResult("add-board", "proxyless", throughput_before=10.0, throughput_during=7.5)
    d = o.as_dict()
    assert list(d)[:2] == ["scenario", "mode"]
    assert d["throughput_ratio"] == 0.75
    assert "key" not in d


def test_the_fault_table_has_a_cell_per_column_and_the_reasons_under_it() -> None:
    r = FaultResult("npu-hang", "board1", requests=120, states_seen=["DOWN", "UP"], why=["too slow"])
    r.error_codes = {"UNAVAILABLE": 2}
    lines = table([r, FaultResult("slow", "board2", requests=80, passed=True)]).splitlines()
    header, rule, first, second = lines[:4]
    assert header.split(" | ")[0].strip() == "fault" and header.rstrip().endswith("verdict")
    assert len(first.split(" | ")) == len(header.split(" | ")) == rule.count("+") + 1
    assert "UNAVAILABLE x2" in first and "DOWN/UP" in first and first.endswith("FAIL")
    assert second.endswith("PASS")
    assert lines[-2:] == ["Failures:", "  npu-hang on board1: too slow"]


def test_a_spec_table_keeps_each_columns_minimum_width() -> None:
    lines = spec_table([("a", 6, str), ("verdict", 0, lambda x: pass_fail(x > 1))], [1, 2])
    assert lines[0] == "a      | verdict"
    assert lines[2:] == ["1      | FAIL", "2      | PASS"]
