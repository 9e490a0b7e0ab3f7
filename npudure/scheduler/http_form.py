"""A DeepStack request's multipart/form-data body split into its named fields as it arrives.

Why not aiohttp's ``MultipartReader``: on this path it was the scheduler's largest cost per request
(profiled at 640x640: about half the server's CPU), most of it ``parse_content_disposition``
rebuilding its regular expressions for every part. Here the parts are found with ``bytes.find`` (C
speed) over what has arrived, each part's name with one precompiled expression. What camera software
sends is plain: fields ``image``, ``min_confidence``, ``api_key``, no transfer encodings (a
``Content-Transfer-Encoding`` other than binary/8bit/7bit is refused, not guessed at).
"""

from __future__ import annotations

import re

from npudure.scheduler.http_text import shown

MAX_PARTS = 64  # DeepStack's form has 3 fields; anything far beyond is not a detection request
MAX_HEAD_BYTES = 8192  # a part's headers: a Content-Disposition with a file name, a Content-Type
_UNBOUNDED = 1 << 62
_PREAMBLE, _BOUNDARY_SEEN, _HEAD, _DATA, _DONE = range(5)

_NAME = re.compile(rb'(?im)^content-disposition:[^\r\n]*?;[ \t]*name[ \t]*=[ \t]*(?:"([^"\r\n]*)"|([^;\s]+))')
_ENCODING = re.compile(rb"(?im)^content-transfer-encoding:[ \t]*([^\s;]+)")
_PLAIN = {b"binary", b"8bit", b"7bit"}
_BOUNDARY = re.compile(r'boundary=(?:"([^"]{1,70})"|([^;\s]{1,70}))', re.IGNORECASE)


class FormError(ValueError):
    """A body that is not a well-formed multipart/form-data body (worded for the client)."""


class FieldTooLarge(FormError):
    def __init__(self, name: str, limit: int) -> None:
        super().__init__(f"the form field {shown(name)} is longer than {limit} bytes")
        self.name, self.limit = name, limit


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
    """Each named part's bytes (the first of a repeated name) of a whole body; FormError for a malformed
    one."""
    reader = FormReader(boundary)
    reader.feed(body)
    reader.close()
    return reader.fields


class FormReader:
    """Splits a multipart/form-data body as it arrives (``feed`` each chunk, ``close`` at its end).

    With ``limits`` it keeps only the fields named there, each up to its limit (FieldTooLarge beyond),
    and drops every other part's bytes as they arrive; without, it keeps every named part. Between
    chunks ``name in reader`` says which parts are complete (``value`` gives one), ``current`` names
    the one arriving and ``held`` counts the bytes held: the caller can check a key before the image is
    in, and bound what an unchecked request holds. A kept part is held as the pieces it arrived in and
    joined only when asked for (a request refused at its end never pays for the join). A part's
    headers are bounded too (MAX_HEAD_BYTES)."""

    def __init__(self, boundary: bytes, limits: dict[str, int] | None = None) -> None:
        self._delimiter = b"--" + boundary
        self._end = b"\r\n" + self._delimiter  # what ends a part's data
        self._limits = limits
        self._buf = bytearray()
        self._state = _PREAMBLE
        self._scan = 0  # where the next search in _buf starts (what is before was searched already)
        self._keep: int | None = None  # the limit of the part arriving; None: its bytes are dropped
        # Each kept part's bytes as the pieces they arrived in, moved out of _buf: joined once, never a
        # buffer regrown (and copied) to the image's size.
        self._complete: dict[str, list[bytes]] = {}
        self._kept = 0  # bytes in _complete
        self._pieces: list[bytes] = []  # of the part arriving
        self._piece_bytes = 0
        self.parts = 0
        self.names: list[str] = []  # every named part, in order (repeated names too)
        self.current: str | None = None

    def __contains__(self, name: str) -> bool:
        return name in self._complete

    def value(self, name: str) -> bytes | None:
        """A complete part's bytes (None when there is none of that name)."""
        pieces = self._complete.get(name)
        if pieces is None:
            return None
        if len(pieces) != 1:
            pieces[:] = [b"".join(pieces)]
        return pieces[0]

    @property
    def fields(self) -> dict[str, bytes]:
        """Every complete kept part, by name."""
        return {name: self.value(name) or b"" for name in self._complete}

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def held(self) -> int:
        return len(self._buf) + self._piece_bytes + self._kept

    def feed(self, data: bytes) -> None:
        if self._state == _DONE:
            return  # the epilogue: ignored
        self._buf += data
        while self._step():
            pass

    def discard(self) -> None:
        """Let go of every byte held (a refused request: its exception's traceback keeps this reader
        alive until the cyclic collector runs, which a few large buffers do not trigger)."""
        self._buf = bytearray()
        self._complete, self._pieces = {}, []
        self._kept = self._piece_bytes = 0

    def close(self) -> None:
        """The body has ended: FormError unless its closing delimiter was seen."""
        if self._state == _PREAMBLE:
            raise FormError("the body does not contain its boundary")
        if self._state == _HEAD:
            raise FormError("a part's headers do not end")
        if self._state != _DONE:
            raise FormError("the body ends inside a part (no closing boundary)")

    def _step(self) -> bool:
        """Parse what the buffer allows; True when the state moved on (call again)."""
        buf = self._buf
        if self._state == _PREAMBLE:
            at = buf.find(self._delimiter, self._scan)
            if at < 0:
                self._drop_all_but(len(self._delimiter) - 1)  # a preamble is not kept
                return False
            del buf[: at + len(self._delimiter)]
            self._state, self._scan = _BOUNDARY_SEEN, 0
            return True
        if self._state == _BOUNDARY_SEEN:
            if len(buf) < 2:
                return False
            if buf.startswith(b"--"):  # the closing delimiter
                self._state = _DONE
                self._buf = bytearray()
                return False
            if not buf.startswith(b"\r\n"):
                raise FormError("a boundary is not followed by CRLF")
            self.parts += 1
            if self.parts > MAX_PARTS:
                raise FormError(f"the body has more than {MAX_PARTS} parts")
            self._state = _HEAD
            return True
        if self._state == _HEAD:
            head_end = buf.find(b"\r\n\r\n", max(0, self._scan - 3))
            if head_end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    raise FormError(f"a part's headers are longer than {MAX_HEAD_BYTES} bytes")
                self._scan = len(buf)
                return False
            self._begin_part(bytes(buf[2:head_end]))
            del buf[: head_end + 4]
            self._state, self._scan = _DATA, 0
            return True
        if self._state == _DATA:
            end = buf.find(self._end, max(0, self._scan - len(self._end) + 1))
            if end < 0:
                if self._keep is None:
                    self._drop_all_but(len(self._end) - 1)
                else:
                    self._keep_all_but(len(self._end) - 1)
                return False
            if self._keep is not None and self.current is not None:
                if self._piece_bytes + end > self._keep:
                    raise FieldTooLarge(self.current, self._keep)
                with memoryview(buf) as view:
                    self._pieces.append(view[:end].tobytes())
                self._complete[self.current] = self._pieces
                self._kept += self._piece_bytes + end
                self._pieces, self._piece_bytes = [], 0
            del buf[: end + len(self._end)]
            self._state, self._scan, self.current, self._keep = _BOUNDARY_SEEN, 0, None, None
            return True
        return False

    def _begin_part(self, headers: bytes) -> None:
        encoding = _ENCODING.search(headers)
        if encoding and encoding.group(1).lower() not in _PLAIN:
            raise FormError(
                f"a part has Content-Transfer-Encoding {shown(encoding.group(1), quote=False)}: send the "
                "image bytes as they are"
            )
        found = _NAME.search(headers)
        if not found:
            return
        # A name that is not UTF-8 is kept with its bytes replaced: it names no field of ours.
        name = (found.group(1) or found.group(2)).decode("utf-8", "replace")
        self.names.append(name)
        self.current = name
        if name in self._complete:
            return  # the first of a repeated name is the one kept
        if self._limits is None:
            self._keep = _UNBOUNDED
        elif name in self._limits:
            self._keep = self._limits[name]

    def _keep_all_but(self, tail: int) -> None:
        # As _drop_all_but, the bytes before the tail moved to the part's pieces.
        cut = len(self._buf) - tail
        if cut > 0:
            with memoryview(self._buf) as view:
                self._pieces.append(view[:cut].tobytes())
            self._piece_bytes += cut
            del self._buf[:cut]
        self._scan = 0
        if self._keep is not None and self._piece_bytes > self._keep:
            raise FieldTooLarge(self.current or "", self._keep)

    def _drop_all_but(self, tail: int) -> None:
        # A delimiter may be cut between two chunks: the last bytes stay until the next one.
        if len(self._buf) > tail:
            del self._buf[: len(self._buf) - tail]
        self._scan = 0  # the tail is shorter than a delimiter: searched again, at no cost
