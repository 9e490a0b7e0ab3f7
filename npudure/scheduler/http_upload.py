"""A detection request's form read as it arrives, its API key checked before the image is held.

DeepStack has one place for the key: the form field ``api_key``. The clients put it before the image
(requests, which Frigate and Home Assistant's library use, writes ``data=`` fields before ``files=``), so
the body is read part by part and the key checked as soon as its part is in: a wrong key is answered
before the image arrives, and what follows is read and dropped as it streams (aiohttp discards an
unread body), never buffered. A client that sends the image first is still served, but what requests
hold before their key is checked counts against one ``UnverifiedBytes`` budget for the whole API:
beyond it, 503. Only ``api_key``, ``min_confidence`` and ``image`` are kept; other parts are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from aiohttp import StreamReader, web

from npudure.scheduler.http_form import FormReader

MAX_FIELD_BYTES = 1024  # a DeepStack key or threshold is a few dozen bytes


class Form(NamedTuple):
    fields: dict[str, bytes]  # api_key, min_confidence and image, as far as they were sent
    names: list[str]  # every named part, in order: what the client sent (for its error)


class BudgetExhausted(Exception):
    """The bytes held by requests whose key is not checked yet would pass the budget."""


class UnverifiedBytes:
    """The bytes all requests hold before their API key is checked, at most ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise BudgetExhausted
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size


async def read_form(
    content: StreamReader,
    boundary: bytes,
    max_body_bytes: int,
    check_key: Callable[[bytes | None], None] | None,
    budget: UnverifiedBytes,
) -> Form:
    """The fields ``api_key``, ``min_confidence`` (each at most MAX_FIELD_BYTES: FieldTooLarge) and
    ``image``; a body over ``max_body_bytes`` is HTTPRequestEntityTooLarge. ``check_key`` (None: no
    key is needed) raises to refuse; it is called once the key's part is in, or at the end of a body
    that has none."""
    limits = {"api_key": MAX_FIELD_BYTES, "min_confidence": MAX_FIELD_BYTES, "image": max_body_bytes}
    reader = FormReader(boundary, limits)
    checked = check_key is None
    charged = 0  # taken from the budget by this request
    received = 0
    try:
        while not reader.done:
            chunk = await content.readany()
            if not chunk:
                reader.close()
                break
            received += len(chunk)
            if received > max_body_bytes:
                raise web.HTTPRequestEntityTooLarge(max_size=max_body_bytes, actual_size=received)
            reader.feed(chunk)
            if checked:
                continue
            if "api_key" in reader and check_key is not None:
                check_key(reader.value("api_key"))
                checked = True
                budget.give(charged)
                charged = 0
            elif reader.held > charged:
                budget.take(reader.held - charged)
                charged = reader.held
        if not checked and check_key is not None:
            check_key(reader.value("api_key"))
    except BaseException:
        # A refusal's traceback keeps this frame (and its reader) alive until the cyclic collector runs.
        reader.discard()
        chunk = b""
        raise
    finally:
        budget.give(charged)
    return Form(reader.fields, reader.names)
