"""A gRPC error as a stub raises it: a status code and details, no channel behind it."""

from __future__ import annotations

import grpc


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details
