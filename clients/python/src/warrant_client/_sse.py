"""A server-sent events decoder (the WHATWG HTML "event stream interpretation"), fed lines.

Only what a client of warrant's streamed answer needs: ``event`` and ``data`` fields (several
``data`` lines join with a newline), comments (``: keep-alive``) ignored, an event dispatched at a
blank line, ``id`` and ``retry`` accepted and ignored (warrant sends neither, and a streamed
answer is never resumed: its work ends with the connection).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event: its type (``message`` when unnamed) and data."""

    event: str
    data: str


class SseDecoder:
    """Turns lines (without their line ending) into events."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> ServerSentEvent | None:
        """Takes one line; returns the event a blank line completes, if any."""
        if line == "":
            data = self._data
            event_type = self._event or "message"
            self._event = ""
            self._data = []
            # An event without a data line is not dispatched (the specification's rule).
            return ServerSentEvent(event_type, "\n".join(data)) if data else None
        if line.startswith(":"):
            return None
        name, separator, value = line.partition(":")
        if separator and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None
