"""Admin errors in the operator's words, with the exit codes the playbooks branch on."""

from __future__ import annotations

import grpc
import pytest
from helpers.rpc_error import FakeRpcError

from npudure.client import admin


@pytest.mark.parametrize(
    ("code", "exit_code", "words"),
    [
        (grpc.StatusCode.NOT_FOUND, admin.EXIT_UNKNOWN_NODE, "no board"),
        (grpc.StatusCode.UNAVAILABLE, admin.EXIT_UNREACHABLE, "not answering"),
        (grpc.StatusCode.PERMISSION_DENIED, 1, "PERMISSION_DENIED"),
    ],
)
def test_each_failure_has_its_exit_code(code: grpc.StatusCode, exit_code: int, words: str) -> None:
    error = admin._rpc_error("sched:50050", "DrainNode", FakeRpcError(code, "no board named b9"))
    assert error.code == exit_code
    assert words in str(error) and "\n" not in str(error)


def test_the_exit_codes_differ() -> None:
    assert len({1, admin.EXIT_UNKNOWN_NODE, admin.EXIT_UNREACHABLE}) == 3
