"""Server-sent events (WHATWG-style, incremental): bytes in, :class:`SSEEvent` out."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.bench.config import MAX_SSE_EVENT


class SSEError(Exception):
    """The byte stream is not valid server-sent events (bad UTF-8, a line or event over
    MAX_SSE_EVENT bytes)."""


@dataclass
class SSEEvent:
    data: str
    event: str = ""
    id: str | None = None


class SSEParser:
    """Incremental event-stream parser following the WHATWG rules.

    Handles ``data:`` with or without the space, comments, ``event:``/``id:``/``retry:``
    lines, LF / CRLF / lone-CR line ends (also a CRLF split between two reads), a UTF-8 BOM,
    multi-line ``data:``, and events split anywhere across reads. One deliberate leniency:
    at end of stream a pending event without its blank-line terminator is still dispatched
    (servers that forget the last blank line still said ``[DONE]``).
    """

    __slots__ = ("_buf", "_data", "_size", "_event", "_id", "_bom_checked", "_skip_lf")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._size = 0  # characters in _data: an event that never ends is cut at MAX_SSE_EVENT
        self._event = ""
        self._id: str | None = None
        self._bom_checked = False
        self._skip_lf = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        events = self._feed(chunk)
        if len(self._buf) > MAX_SSE_EVENT:
            self._buf = b""
            raise SSEError(f"an event-stream line over {MAX_SSE_EVENT >> 20} MiB without its end")
        return events

    def _feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._buf + chunk if self._buf else chunk
        if not self._bom_checked:
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                self._buf = buf
                return []
            if buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]
            self._bom_checked = True
        if self._skip_lf and buf:
            if buf[:1] == b"\n":
                buf = buf[1:]
            self._skip_lf = False
        events: list[SSEEvent] = []
        if b"\r" not in buf:  # the common case: LF only
            *lines, rest = buf.split(b"\n")
            for line in lines:
                self._line(line, events)
            self._buf = rest
            return events
        start, n = 0, len(buf)
        while start < n:
            i_n = buf.find(b"\n", start)
            i_r = buf.find(b"\r", start)
            if i_n == -1 and i_r == -1:
                break
            if i_r == -1 or (i_n != -1 and i_n < i_r):
                self._line(buf[start:i_n], events)
                start = i_n + 1
            else:
                self._line(buf[start:i_r], events)
                if i_r + 1 < n:
                    start = i_r + 2 if buf[i_r + 1] == 0x0A else i_r + 1
                else:
                    start = n
                    self._skip_lf = True
        self._buf = buf[start:]
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: the last line and the last event, even without terminators."""
        events: list[SSEEvent] = []
        if self._buf:
            buf, self._buf = self._buf, b""
            if not self._bom_checked and buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]
            self._line(buf, events)
        if self._data:
            self._line(b"", events)
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            if self._data:
                events.append(SSEEvent("\n".join(self._data), self._event, self._id))
            self._data = []
            self._size = 0
            self._event = ""
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SSEError(f"invalid UTF-8 in the event stream ({exc.reason})") from None
        if line[0] == ":":
            return  # comment / keep-alive
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._size += len(value) + 1
            if self._size > MAX_SSE_EVENT:
                raise SSEError(f"an event over {MAX_SSE_EVENT >> 20} MiB without its blank line")
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        # "retry" and unknown fields are ignored, as the standard says
