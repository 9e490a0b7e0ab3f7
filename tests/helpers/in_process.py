"""The unit tests' guard (tests/unit/conftest.py installs it for every unit test): see there."""

from __future__ import annotations

import _posixsubprocess  # type: ignore[import-not-found]
import ctypes.util
import os
import socket
import subprocess
import threading
from collections.abc import Callable
from typing import Any, NoReturn

import grpc
import grpc._channel
import grpc._server
import grpc.aio
import grpc.aio._channel
import grpc.aio._server
import pytest
import zmq

ALLOWED_FAMILIES = {socket.AF_UNIX, socket.AF_NETLINK}
IN_PROCESS_PREFIXES = ("unix:", "unix-abstract:")  # gRPC addresses that are no network
ZMQ_IN_PROCESS = ("inproc://", "ipc://")


class NotInProcess(BaseException):
    """A unit test reached for a real network socket or a child process (not an error of the code under
    test: a misplaced test)."""


def _family_name(family: int) -> str:
    try:
        return socket.AddressFamily(family).name
    except ValueError:
        return str(family)


class Guard:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.refused: list[str] = []

    def refuse(self, what: str) -> NoReturn:
        self.refused.append(what)
        raise NotInProcess(self.message(what))

    def message(self, what: str) -> str:
        return (
            f"{self.nodeid} {what}: a unit test stays in-process (no network socket, no child process). "
            "Move it to tests/integration (flat: tests/integration/test_<name>.py, same test name), "
            "or fake the socket or process"
        )


def _wrap(guard: Guard, original: Callable[..., Any], check: Callable[..., str | None]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        what = check(*args, **kwargs)
        if what is not None:
            guard.refuse(what)
        return original(*args, **kwargs)

    return guarded


def install(guard: Guard, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse, through ``monkeypatch`` (undone after the test), what takes a test out of its process."""
    patch = monkeypatch.setattr

    # Python sockets: one check at construction covers socket.create_connection, asyncio and aiohttp.
    def socket_check(
        _self: socket.socket, family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None
    ) -> str | None:
        if fileno is not None:  # wraps a descriptor that exists already (socketpair, fromfd)
            return None
        family = socket.AF_INET if family == -1 else family
        if family in ALLOWED_FAMILIES:
            return None
        return f"opened a network socket ({_family_name(family)})"

    patch(socket.socket, "__init__", _wrap(guard, socket.socket.__init__, socket_check))

    # gRPC's C core: server ports and channels on network addresses.
    def grpc_port(_server: object, address: str, *_: object) -> str | None:
        return None if address.startswith(IN_PROCESS_PREFIXES) else f"opened a gRPC port on {address}"

    for server_class in (grpc.aio._server.Server, grpc._server._Server):
        for name in ("add_insecure_port", "add_secure_port"):
            patch(server_class, name, _wrap(guard, getattr(server_class, name), grpc_port))

    # Channels connect lazily: one to a network address may be made (a client's configuration under
    # test), not used. Its calls and its connection attempts are refused.
    targets: dict[int, tuple[object, str]] = {}  # id(the C channel) -> (it, kept alive; its target)

    def remember(original: Callable[..., None]) -> Callable[..., None]:
        def init(self: Any, target: str, *args: Any, **kwargs: Any) -> None:
            original(self, target, *args, **kwargs)
            targets[id(self._channel)] = (self._channel, target)

        return init

    for channel_class in (grpc.aio._channel.Channel, grpc._channel.Channel):
        patch(channel_class, "__init__", remember(channel_class.__init__))

    def dialled(channel: object) -> str | None:
        target = targets.get(id(channel), (None, ""))[1]
        if not target or target.startswith(IN_PROCESS_PREFIXES):
            return None
        return f"called over a gRPC channel to {target}"

    def grpc_call(callable_: Any, *_: Any, **__: Any) -> str | None:
        return dialled(callable_._channel)

    def grpc_connect(channel: Any, *args: Any, **kwargs: Any) -> str | None:
        try_to_connect = kwargs.get("try_to_connect", args[-1] if args else False)
        return dialled(channel._channel) if try_to_connect is True else None

    calls = {
        getattr(grpc.aio._channel, name): ("__call__",)
        for name in (
            "UnaryUnaryMultiCallable",
            "UnaryStreamMultiCallable",
            "StreamUnaryMultiCallable",
            "StreamStreamMultiCallable",
        )
    }
    calls |= {
        grpc._channel._UnaryUnaryMultiCallable: ("__call__", "with_call", "future"),
        grpc._channel._SingleThreadedUnaryStreamMultiCallable: ("__call__",),
        grpc._channel._UnaryStreamMultiCallable: ("__call__",),
        grpc._channel._StreamUnaryMultiCallable: ("__call__", "with_call", "future"),
        grpc._channel._StreamStreamMultiCallable: ("__call__",),
    }
    for callable_class, names in calls.items():
        for name in names:
            patch(callable_class, name, _wrap(guard, getattr(callable_class, name), grpc_call))
    patch(
        grpc.aio._channel.Channel,
        "get_state",
        _wrap(guard, grpc.aio._channel.Channel.get_state, grpc_connect),  # channel_ready() asks it
    )
    patch(grpc._channel.Channel, "subscribe", _wrap(guard, grpc._channel.Channel.subscribe, grpc_connect))

    # libzmq: network transports only.
    def zmq_address(_socket: object, address: str, *_: object, **__: object) -> str | None:
        return None if address.startswith(ZMQ_IN_PROCESS) else f"opened a zmq socket on {address}"

    for name in ("bind", "connect"):
        patch(zmq.Socket, name, _wrap(guard, getattr(zmq.Socket, name), zmq_address))

    # Child processes: subprocess (and asyncio's, which uses it), multiprocessing, os. Except a
    # library lookup: ctypes.util.find_library runs ldconfig (ansible's display imports it lazily).
    looking_up = threading.local()

    def find_library(name: str) -> str | None:
        looking_up.active = True
        try:
            return original_find_library(name)
        finally:
            looking_up.active = False

    original_find_library = ctypes.util.find_library
    patch(ctypes.util, "find_library", find_library)

    def started(*args: Any, **_: Any) -> str | None:
        return None if getattr(looking_up, "active", False) else "started a child process"

    def subprocess_check(_popen: subprocess.Popen[Any], args: Any, *_: Any) -> str | None:
        if getattr(looking_up, "active", False):
            return None
        command = args if isinstance(args, str) else " ".join(map(str, args))
        return f"started a child process ({command[:120]})"

    patch(subprocess.Popen, "_execute_child", _wrap(guard, subprocess.Popen._execute_child, subprocess_check))  # type: ignore[attr-defined]
    patch(_posixsubprocess, "fork_exec", _wrap(guard, _posixsubprocess.fork_exec, started))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            patch(os, name, _wrap(guard, getattr(os, name), started))
