"""Unit tests stay in-process (issue #48): no real network socket, no child process.

An autouse fixture refuses, for the length of each unit test, what would make it an integration test
by accident (as Ray Serve's test utilities and pytest-socket do):

- a network socket from Python (``socket.socket`` of any family but the allowed ones below, and so
  asyncio's and aiohttp's servers and connections),
- a gRPC server port on a network address, and a call or connection attempt over a channel to one
  (grpc opens its sockets in C, below ``socket``; making a channel is allowed: it connects lazily),
- a zmq ``bind``/``connect`` on ``tcp://`` (libzmq, also in C),
- a child process (``subprocess``, ``os.fork``/``posix_spawn``/``system``, ``multiprocessing``),
  except the ``ldconfig`` that ``ctypes.util.find_library`` runs to find a library.

Allowed, because nothing leaves the process: AF_UNIX sockets (``socket.socketpair``, asyncio's
self-pipe, in-process AF_UNIX pairs), sockets wrapping a descriptor that already exists, gRPC and zmq
on ``unix:``/``ipc://``/``inproc://``, and AF_NETLINK (a question to the local kernel: the zmq
endpoint's netlink probe, ``npudure.scheduler.zmq_api.netlink_allowed``, which libzmq's bind needs; it
sends nothing to any network).

The refusal raises :class:`NotInProcess` (a ``BaseException``, so an ``except Exception`` in the code
under test cannot hide it) and the test fails at teardown even if something swallowed it. The
message names the test and says where it belongs: ``tests/integration`` (flat, ``test_<name>.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.in_process import Guard, install


@pytest.fixture(autouse=True)
def _stay_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Guard]:
    guard = Guard(request.node.nodeid)
    install(guard, monkeypatch)
    yield guard  # tests/unit/test_stay_in_process.py asks for it to check the guard itself
    if guard.refused:  # refused even if the code under test swallowed the exception
        pytest.fail(guard.message("; ".join(dict.fromkeys(guard.refused))), pytrace=False)
