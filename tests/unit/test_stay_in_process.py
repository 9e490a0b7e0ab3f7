"""The unit tests' guard (tests/unit/conftest.py) refuses network sockets, network gRPC and zmq, and
child processes, naming the test and where it belongs; it lets through what stays in the process."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import grpc
import pytest
import zmq
from helpers.in_process import Guard, NotInProcess


@pytest.fixture
def guard(_stay_in_process: Guard) -> Guard:
    return _stay_in_process


def _refused(guard: Guard, call: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(NotInProcess) as refused:
        call(*args, **kwargs)  # type: ignore[operator]
    assert guard.refused  # recorded, so a swallowed refusal still fails the test at teardown
    guard.refused.clear()
    return str(refused.value)


def test_a_network_socket_is_refused_with_the_test_named_and_the_way_out(guard: Guard) -> None:
    message = _refused(guard, socket.socket)
    assert "test_stay_in_process.py::test_a_network_socket_is_refused" in message
    assert "opened a network socket (AF_INET)" in message and "tests/integration" in message
    _refused(guard, socket.socket, socket.AF_INET6, socket.SOCK_DGRAM)
    _refused(guard, socket.create_connection, ("127.0.0.1", 9))


def test_child_processes_are_refused(guard: Guard) -> None:
    assert "(" + sys.executable in _refused(guard, subprocess.run, [sys.executable, "-c", "pass"])
    _refused(guard, os.system, "true")
    _refused(guard, os.posix_spawn, "/bin/true", ["/bin/true"], {})


async def test_asyncio_servers_and_subprocesses_are_refused(guard: Guard) -> None:
    _refused(guard, socket.create_server, ("127.0.0.1", 0))
    with pytest.raises(NotInProcess):
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    guard.refused.clear()


def test_grpc_ports_and_calls_on_the_network_are_refused(guard: Guard) -> None:
    server = grpc.server(None)  # type: ignore[arg-type]
    assert "gRPC port on 127.0.0.1:0" in _refused(guard, server.add_insecure_port, "127.0.0.1:0")
    channel = grpc.insecure_channel("127.0.0.1:9")  # made, not used: allowed (channels connect lazily)
    call = channel.unary_unary("/a.B/C")
    assert "gRPC channel to 127.0.0.1:9" in _refused(guard, call, b"")
    channel.close()


def test_zmq_on_tcp_is_refused_and_inproc_allowed(guard: Guard) -> None:
    context = zmq.Context()
    try:
        with context.socket(zmq.PAIR) as a, context.socket(zmq.PAIR) as b:
            _refused(guard, a.bind, "tcp://127.0.0.1:0")
            a.bind("inproc://guard-test")
            b.connect("inproc://guard-test")
            b.send(b"x")
            assert a.recv() == b"x"
    finally:
        context.term()


async def test_what_stays_in_the_process_is_allowed(guard: Guard) -> None:
    a, b = socket.socketpair()  # AF_UNIX: asyncio's self-pipe is one
    with a, b:
        a.sendall(b"x")
        assert b.recv(1) == b"x"
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0):  # the zmq endpoint's netlink probe
        pass
    await asyncio.sleep(0)  # this test's event loop runs
    server = grpc.server(None)  # type: ignore[arg-type]
    server.add_insecure_port(f"unix:{os.environ.get('TMPDIR', '/tmp')}/npudure-guard-{os.getpid()}.sock")
    assert not guard.refused
