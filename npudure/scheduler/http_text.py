"""What a client sent, as an HTTP API error or log line may show it: a short prefix and the size, never
the whole input (a 15 MiB form field once came back as a 75 MiB error body)."""

from __future__ import annotations

SHOWN_CHARS = 40  # of an input quoted in an error
MAX_MESSAGE_CHARS = 300  # of any error message (a net under every message's own bound)


def shown(value: str | bytes, limit: int = SHOWN_CHARS, quote: bool = True) -> str:
    """``value``'s first ``limit`` characters (bytes decoded as UTF-8, undecodable ones replaced), with
    its size when it is longer."""
    size = len(value)
    head = value[: limit * 4].decode("utf-8", "replace") if isinstance(value, bytes) else value
    head = head[:limit]
    text = repr(head) if quote else head
    if size <= limit:
        return text
    return f"{text}... ({size} {'bytes' if isinstance(value, bytes) else 'characters'})"


def bounded(message: str) -> str:
    """``message`` cut to MAX_MESSAGE_CHARS."""
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 3] + "..."
