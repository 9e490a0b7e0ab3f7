"""The API key is checked before the image is held: a wrong key is answered while the body is still
arriving, and what keyless requests hold at once is bounded (an API served in-process on loopback over
raw sockets, so a body can stop half-way: helpers.http_api_server)."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from pathlib import Path

from helpers.deepstack_requests import jpeg
from helpers.http_api_server import BOUNDARY, CONTENT_TYPE, multipart, serving

from npudure.vision.frames import synthetic_frame

KEY = "the-right-key-for-these-tests"
IMAGE = jpeg(synthetic_frame(2, 64))
IMAGE_HEAD = (
    b'--%s\r\nContent-Disposition: form-data; name="image"; filename="a.jpg"\r\n\r\n' % BOUNDARY.encode()
)
UNVERIFIED_BODIES = 2  # the budget of bytes held before a key is checked, in max_body_bytes (documented)
ANSWER_S = 30.0  # an answer that is due now; generous for a loaded machine (no test waits it out)


async def _open(url: str, content_length: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.split("//")[1].split("/")[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /v1/vision/detection HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
        % (CONTENT_TYPE.encode(), content_length)
    )
    await writer.drain()
    return reader, writer


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_S)
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return int(head.split()[1]), await asyncio.wait_for(reader.readexactly(length), ANSWER_S)


async def _ping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    writer.write(b"GET /v1/server/status/ping HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    return (await _answer(reader))[0]


async def test_a_wrong_key_is_answered_before_the_image_arrives(tmp_path: Path) -> None:
    async with serving(tmp_path, api_key=KEY, read_timeout_s=ANSWER_S / 2) as api:
        key_part = multipart(("api_key", b"a-wrong-guess")).removesuffix(b"--%s--\r\n" % BOUNDARY.encode())
        image = b"\xff\xd8" + bytes(8 << 20)
        rest = b"\r\n--%s--\r\n" % BOUNDARY.encode()
        reader, writer = await _open(api.url, len(key_part) + len(IMAGE_HEAD) + len(image) + len(rest))
        writer.write(key_part + IMAGE_HEAD + image[: 64 << 10])  # the key and the image's first 64 KiB
        await writer.drain()
        status, body = await _answer(reader)  # before the other 8 MiB were sent
        assert status == 403 and b'"wrong API key"' in body
        writer.write(image[64 << 10 :] + rest)  # read and dropped as it arrives, not held
        assert await _ping(reader, writer) == 200  # the same connection serves the next request
        writer.close()
        assert api.scheduler.dispatch.forwarded == 0


async def test_keyless_uploads_hold_at_most_the_budget_and_image_first_clients_are_still_served(
    tmp_path: Path,
) -> None:
    max_body = 1 << 20
    async with serving(tmp_path, api_key=KEY, max_body_bytes=max_body, read_timeout_s=ANSWER_S) as api:
        # A right key after the image: still served.
        body = multipart(("image", IMAGE), ("api_key", KEY.encode()))
        reader, writer = await _open(api.url, len(body))
        writer.write(body)
        assert (await _answer(reader))[0] == 200
        writer.close()
        # Six keyless uploads each stop after 900 KiB of image: at most UNVERIFIED_BODIES of them are
        # held (2 x max_body_bytes); the others are answered 503 while their bodies are unfinished.
        part = b"\xff\xd8" + bytes(900 << 10)
        rest = b"\r\n--%s--\r\n" % BOUNDARY.encode()
        uploads = [await _open(api.url, len(IMAGE_HEAD) + len(part) + len(rest)) for _ in range(6)]
        for _, writer in uploads:
            writer.write(IMAGE_HEAD + part)
            await writer.drain()
        answers = [asyncio.ensure_future(_answer(reader)) for reader, _ in uploads]
        pending = set(answers)
        deadline = asyncio.get_running_loop().time() + ANSWER_S
        while len(pending) > UNVERIFIED_BODIES and asyncio.get_running_loop().time() < deadline:
            _, pending = await asyncio.wait(pending, timeout=ANSWER_S, return_when=asyncio.FIRST_COMPLETED)
        refused = [task.result() for task in answers if task not in pending]
        assert len(refused) == len(uploads) - UNVERIFIED_BODIES
        assert all(status == 503 and b"before their API key is checked" in raw for status, raw in refused)
        for task, (reader, writer) in zip(answers, uploads, strict=True):
            writer.write(rest)  # a held body ends without a key: 401, and the budget is free again
            status, raw = await task
            assert (status, b"api_key" in raw) == (401, True) if task in pending else status == 503
            assert await _ping(reader, writer) == 200
            writer.close()
        assert api.scheduler.dispatch.forwarded == 1


async def test_what_a_refused_upload_held_is_let_go_at_once(tmp_path: Path) -> None:
    """A refusal's traceback forms a cycle with the task that read the body: what the reader held must
    not wait for the cyclic collector (off here, so the test does not depend on when it runs)."""
    part = b"\xff\xd8" + bytes(900 << 10)
    body = IMAGE_HEAD + part + b"\r\n--%s--\r\n" % BOUNDARY.encode()
    async with serving(tmp_path, api_key=KEY, max_body_bytes=1 << 20) as api:
        gc.disable()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(6):  # keyless: each held until its end, then 401
                reader, writer = await _open(api.url, len(body))
                writer.write(body)
                assert (await _answer(reader))[0] == 401
                writer.close()
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
            gc.enable()
    bound = 2 * len(part)
    assert kept < bound, f"{kept / 2**20:.1f} MiB still held after 6 refused uploads of 0.9 MiB"
