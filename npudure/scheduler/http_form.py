"""A DeepStack request's multipart/form-data body, already read whole, split into its named fields.

Why not aiohttp's ``MultipartReader``: on this path it was the scheduler's largest cost per request
(profiled at 640x640: about half the server's CPU), most of it ``parse_content_disposition``
rebuilding its regular expressions for every part. The body is already bounded and in memory
(``max_body_bytes``), so the parts are found with ``bytes.find`` (C speed) and each part's name with
one precompiled expression. What camera software sends is plain: fields ``image``, ``min_confidence``,
``api_key``, no transfer encodings (a ``Content-Transfer-Encoding`` other than binary/8bit/7bit is
refused, not guessed at).
"""

from __future__ import annotations

import re

from npudure.scheduler.http_text import shown

MAX_PARTS = 64  # DeepStack's form has 3 fields; anything far beyond is not a detection request

_NAME = re.compile(rb'(?im)^content-disposition:[^\r\n]*?;[ \t]*name[ \t]*=[ \t]*(?:"([^"\r\n]*)"|([^;\s]+))')
_ENCODING = re.compile(rb"(?im)^content-transfer-encoding:[ \t]*([^\s;]+)")
_PLAIN = {b"binary", b"8bit", b"7bit"}
_BOUNDARY = re.compile(r'boundary=(?:"([^"]{1,70})"|([^;\s]{1,70}))', re.IGNORECASE)


class FormError(ValueError):
    """A body that is not a well-formed multipart/form-data body (worded for the client)."""


def boundary_of(content_type: str) -> bytes:
    """The boundary parameter of a ``multipart/form-data; boundary=...`` Content-Type header."""
    match = _BOUNDARY.search(content_type)
    if not match:
        raise FormError("the Content-Type header names no multipart boundary")
    boundary = match.group(1) or match.group(2)
    if not boundary.isascii():
        raise FormError("the multipart boundary is not ASCII")
    return boundary.encode("ascii")


def parse_form(body: bytes, boundary: bytes) -> dict[str, bytes]:
    """Each named part's bytes (the first of a repeated name); FormError for a malformed body."""
    delimiter = b"--" + boundary
    start = body.find(delimiter)
    if start < 0:
        raise FormError("the body does not contain its boundary")
    form: dict[str, bytes] = {}
    at = start + len(delimiter)
    for _ in range(MAX_PARTS):
        if body.startswith(b"--", at):  # the closing delimiter
            return form
        if not body.startswith(b"\r\n", at):
            raise FormError("a boundary is not followed by CRLF")
        head_end = body.find(b"\r\n\r\n", at)
        if head_end < 0:
            raise FormError("a part's headers do not end")
        end = body.find(b"\r\n" + delimiter, head_end + 4)
        if end < 0:
            raise FormError("the body ends inside a part (no closing boundary)")
        headers = body[at + 2 : head_end]
        encoding = _ENCODING.search(headers)
        if encoding and encoding.group(1).lower() not in _PLAIN:
            raise FormError(
                f"a part has Content-Transfer-Encoding {shown(encoding.group(1), quote=False)}: send the "
                "image bytes as they are"
            )
        name = _NAME.search(headers)
        if name:
            # A name that is not UTF-8 is kept with its bytes replaced: it names no field of ours.
            form.setdefault(
                (name.group(1) or name.group(2)).decode("utf-8", "replace"), body[head_end + 4 : end]
            )
        at = end + 2 + len(delimiter)
    raise FormError(f"the body has more than {MAX_PARTS} parts")
