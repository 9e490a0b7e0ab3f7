"""The central clients' channel config against a real gRPC server that answers like a stopping
scheduler: the first attempt of a call CANCELLED (what C-core gives a call it had received but not
yet handed to a handler when the server stops, grpc/grpc#41785), the replay served. The project's
clients replay it; the benchmark's channel replays it too but still counts UNAVAILABLE."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest

from npudure.client import central
from npudure.proto import contract

METHOD = contract.INFER_METHOD


class FlakyServer:
    """Answers each call's first attempt with ``first_code``, later attempts with b"ok"."""

    def __init__(self, first_code: grpc.StatusCode) -> None:
        self.first_code = first_code
        self.attempts = 0
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.unary_unary_rpc_method_handler(self._infer)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(contract.INFERENCE, {"Infer": handler}),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def _infer(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            self.attempts += 1
            first = self.attempts == 1
        if first:
            context.abort(self.first_code, "stopping")
        return b"ok"

    def __enter__(self) -> FlakyServer:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(grace=0)


def _call(server: FlakyServer, retry: bool) -> bytes:
    options = [*central.central_options(retry=retry), ("grpc.max_send_message_length", 1 << 20)]
    with grpc.insecure_channel(f"127.0.0.1:{server.port}", options) as channel:
        return channel.unary_unary(METHOD)(b"frame", timeout=10)


@pytest.mark.parametrize("retry", [True, False])
def test_a_call_the_stopping_scheduler_cancels_is_replayed(retry: bool) -> None:
    with FlakyServer(grpc.StatusCode.CANCELLED) as server:
        assert _call(server, retry) == b"ok"
        assert server.attempts == 2


def test_the_project_clients_replay_unavailable_and_the_benchmark_counts_it() -> None:
    with FlakyServer(grpc.StatusCode.UNAVAILABLE) as server:
        assert _call(server, retry=True) == b"ok"
    with FlakyServer(grpc.StatusCode.UNAVAILABLE) as server:
        with pytest.raises(grpc.RpcError) as err:
            _call(server, retry=False)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert server.attempts == 1
