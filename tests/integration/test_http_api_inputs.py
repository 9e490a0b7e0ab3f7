"""What the HTTP API makes of inputs nobody should send: bytes that are not UTF-8, fields of megabytes,
long names and headers. Each gets a 4xx with a short one-line error, never a traceback, and nothing of
the input comes back beyond a short prefix. A bug a client can trigger is logged at most once an
interval (a fake dispatcher, an API served in-process: helpers.http_api_server)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import aiohttp
import pytest
from helpers.deepstack_requests import jpeg
from helpers.http_api_server import CONTENT_TYPE, multipart, serving

from npudure.scheduler import http_api
from npudure.service import handlers
from npudure.vision.frames import synthetic_frame

KEY = "k3y-for-the-unit-tests"
IMAGE = jpeg(synthetic_frame(1, 64))
MAX_ERROR_BYTES = 600  # the JSON of a one-line error: DeepStack's shape around a bounded message


async def _post(url: str, body: bytes, content_type: str = CONTENT_TYPE) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers={"Content-Type": content_type}) as reply,
    ):
        return reply.status, await reply.read()


def _one_line_error(raw: bytes) -> str:
    assert len(raw) <= MAX_ERROR_BYTES, f"{len(raw)} bytes: {raw[:200]!r}"
    error = json.loads(raw)["error"]
    assert "\n" not in error and "Traceback" not in error
    return error


async def test_a_key_or_threshold_that_is_not_utf8_is_a_4xx_and_logs_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with serving(tmp_path, api_key=KEY) as api:
        with caplog.at_level(logging.WARNING, logger=http_api.log.name):
            status, raw = await _post(api.url, multipart(("api_key", b"\xff\xfe\x80"), ("image", IMAGE)))
            assert status == 403 and _one_line_error(raw) == "wrong API key"
            status, raw = await _post(
                api.url,
                multipart(("api_key", KEY.encode()), ("min_confidence", b"0.\xff"), ("image", IMAGE)),
            )
            assert status == 400 and "min_confidence must be a number from 0 to 1" in _one_line_error(raw)
            status, raw = await _post(
                api.url, multipart(("api_key", KEY.encode()), (b"\xff\xfename", b"x"), ("image", IMAGE))
            )
            assert status == 200, raw
        assert api.scheduler.dispatch.forwarded == 1
    assert not caplog.records, [r.getMessage() for r in caplog.records]


async def test_an_unexpected_error_answers_one_line_and_logs_once_an_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [500.0]
    monkeypatch.setattr(handlers.time, "monotonic", lambda: now[0])
    async with serving(tmp_path) as api:
        api.scheduler.dispatch.fail = RuntimeError("a bug in the dispatcher")
        with caplog.at_level(logging.ERROR, logger=http_api.log.name):
            for _ in range(40):
                status, raw = await _post(api.url, multipart(("image", IMAGE)))
                assert status == 500 and "internal error" in _one_line_error(raw)
            now[0] += handlers.LOG_EVERY_S
            await _post(api.url, multipart(("image", IMAGE)))
    assert [r.getMessage() for r in caplog.records] == [
        "HTTP API: POST /v1/vision/detection failed",
        "HTTP API: POST /v1/vision/detection failed (39 more since the last line)",
    ]
    assert all(r.exc_info for r in caplog.records)  # the traceback, once an interval


async def test_nothing_of_a_large_input_is_echoed(tmp_path: Path) -> None:
    async with serving(tmp_path) as api:
        base = api.url.removesuffix("/v1/vision/detection")
        # A 2 MiB threshold came back as a 10 MiB error body: now refused by its size, not quoted.
        status, raw = await _post(api.url, multipart(("min_confidence", b"9" * (2 << 20)), ("image", IMAGE)))
        error = _one_line_error(raw)
        assert status == 413 and error == "the form field 'min_confidence' is longer than 1024 bytes"
        # Under the cap: a prefix and the size.
        status, raw = await _post(api.url, multipart(("min_confidence", b"x" * 1000), ("image", IMAGE)))
        error = _one_line_error(raw)
        assert status == 400 and error.endswith(f"(got {'x' * 40!r}... (1000 characters))")
        status, raw = await _post(api.url, multipart(*((f"field{i}-" + "n" * 3000, b"v") for i in range(8))))
        error = _one_line_error(raw)
        assert status == 400 and "no image" in error and "and 5 more" in error
        status, raw = await _post(api.url, b"x", content_type="text/" + "p" * 6000)
        assert status == 400 and "characters)" in _one_line_error(raw)
        status, raw = await _post(f"{base}/v1/vision/custom/{'m' * 6000}", multipart(("image", IMAGE)))
        assert status == 404 and "characters)" in _one_line_error(raw)
