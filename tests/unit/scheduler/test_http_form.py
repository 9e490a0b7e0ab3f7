"""The HTTP API's multipart parser: the bodies real clients build come apart into their fields."""

from __future__ import annotations

import aiohttp
import pytest
from urllib3 import encode_multipart_formdata

from npudure.scheduler.http_form import (
    MAX_HEAD_BYTES,
    MAX_PARTS,
    FieldTooLarge,
    FormError,
    FormReader,
    boundary_of,
    parse_form,
)
from npudure_workshop.bench.http_load import multipart

IMAGE = b"\xff\xd8" + bytes(range(256)) * 40 + b"\r\n--not-the-boundary\r\n" + b"\xff\xd9"


def test_requests_body_as_frigate_sends_it() -> None:
    """requests builds its files= / data= body with urllib3's encoder (Frigate, deepstack-python)."""
    body, content_type = encode_multipart_formdata(
        {"api_key": "k", "min_confidence": "0.5", "image": ("image.jpg", IMAGE, "image/jpeg")}
    )
    form = parse_form(body, boundary_of(content_type))
    assert form == {"api_key": b"k", "min_confidence": b"0.5", "image": IMAGE}


async def test_aiohttp_formdata_body() -> None:
    form_data = aiohttp.FormData({"api_key": "x"})
    form_data.add_field("image", IMAGE, filename="frame.jpg", content_type="image/jpeg")
    writer = form_data()
    chunks: list[bytes] = []

    class Sink:
        async def write(self, data: bytes) -> None:
            chunks.append(bytes(data))

    await writer.write(Sink())
    body, content_type = b"".join(chunks), writer.content_type
    assert parse_form(body, boundary_of(content_type)) == {"api_key": b"x", "image": IMAGE}


def test_the_benchs_body_a_part_without_filename_or_headers_and_a_repeated_name() -> None:
    body, content_type = multipart(IMAGE, api_key="")
    assert parse_form(body, boundary_of(content_type)) == {"api_key": b"", "image": IMAGE}
    raw = (
        b"preamble\r\n--b\r\nContent-Disposition: form-data; name=image\r\n\r\nfirst\r\n"
        b"--b\r\n\r\nnameless\r\n"
        b'--b\r\ncontent-disposition: form-data; name="image"\r\n\r\nsecond\r\n--b--\r\n'
    )
    assert parse_form(raw, boundary_of('multipart/form-data; boundary="b"')) == {"image": b"first"}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"no boundary here", "does not contain its boundary"),
        (b"--bXX", "not followed by CRLF"),
        (b'--b\r\nContent-Disposition: form-data; name="image"', "headers do not end"),
        (b'--b\r\nContent-Disposition: form-data; name="image"\r\n\r\ncut off', "no closing boundary"),
        (
            b'--b\r\nContent-Disposition: form-data; name="image"\r\nContent-Transfer-Encoding: base64'
            b"\r\n\r\n/9j/\r\n--b--",
            "base64",
        ),
        (b"--b\r\n\r\nx\r\n" * (MAX_PARTS + 1) + b"--b--", "more than"),
    ],
)
def test_malformed_bodies_say_what_is_wrong(body: bytes, fragment: str) -> None:
    with pytest.raises(FormError, match=fragment):
        parse_form(body, b"b")


def test_a_content_type_without_boundary() -> None:
    with pytest.raises(FormError, match="no multipart boundary"):
        boundary_of("multipart/form-data")


BODY, BODY_TYPE = encode_multipart_formdata(
    {"api_key": "k", "min_confidence": "0.5", "image": ("image.jpg", IMAGE, "image/jpeg"), "extra": "x" * 300}
)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 4096])
def test_a_body_fed_in_chunks_of_any_size_comes_apart_as_the_whole(size: int) -> None:
    body = b"a preamble\r\n" + BODY + b"an epilogue"
    reader = FormReader(boundary_of(BODY_TYPE))
    for at in range(0, len(body), size):
        reader.feed(body[at : at + size])
    reader.close()
    assert reader.fields == parse_form(BODY, boundary_of(BODY_TYPE))
    assert reader.names == ["api_key", "min_confidence", "image", "extra"] and reader.done


def test_with_limits_only_the_named_fields_are_kept_and_the_rest_dropped_as_it_arrives() -> None:
    reader = FormReader(boundary_of(BODY_TYPE), {"api_key": 16, "image": len(IMAGE)})
    held = []
    for at in range(0, len(BODY), 512):
        reader.feed(BODY[at : at + 512])
        held.append(reader.held)
    reader.close()
    assert reader.fields == {"api_key": b"k", "image": IMAGE}
    assert max(held) <= len(IMAGE) + 1024  # the extra part and min_confidence were never held whole


def test_a_field_over_its_limit_is_refused_before_it_is_all_in() -> None:
    body, content_type = encode_multipart_formdata({"min_confidence": "9" * 100_000})
    reader = FormReader(boundary_of(content_type), {"min_confidence": 64})
    with pytest.raises(FieldTooLarge, match="'min_confidence' is longer than 64 bytes"):
        for at in range(0, len(body), 1000):
            reader.feed(body[at : at + 1000])
    assert at < 2000


def test_a_part_head_that_never_ends_is_bounded() -> None:
    reader = FormReader(b"b")
    with pytest.raises(FormError, match="headers are longer than"):
        reader.feed(b"--b\r\nX-Long: " + b"x" * (MAX_HEAD_BYTES + 10))
