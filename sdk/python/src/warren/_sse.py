"""An incremental Server-Sent Events parser (the WHATWG event-stream format).

Bytes arrive in chunks that may split lines, UTF-8 characters or `\\r\\n` pairs anywhere;
`SSEDecoder.feed` returns the events that are complete so far. Comment lines (`: keepalive`)
are dropped, multi-line `data:` fields are joined with `\\n`, and `event`/`id`/`retry` are kept.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

__all__ = ["SSEEvent", "SSEDecoder", "parse_sse", "decode_output", "parse_event_json"]


@dataclass
class SSEEvent:
    """One dispatched event: its `data` (lines joined by `\\n`), `event` name, `id`."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class SSEDecoder:
    _buf: bytearray = field(default_factory=bytearray)
    _data: list[str] = field(default_factory=list)
    _event: str = ""
    _id: str | None = None
    _retry: int | None = None
    _has_data: bool = False
    _pending_cr: bool = False
    _started: bool = False
    #: Comments seen (e.g. `keepalive`), for tests and diagnostics.
    comments: int = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        if not chunk:
            return out
        data = bytes(chunk)
        if self._pending_cr:
            # A `\r` ended the previous chunk: a `\n` right after belongs to it.
            self._pending_cr = False
            if data.startswith(b"\n"):
                data = data[1:]
        self._buf += data
        while True:
            line, ok = self._next_line()
            if not ok:
                break
            ev = self._line(line)
            if ev is not None:
                out.append(ev)
        return out

    def _next_line(self) -> tuple[bytes, bool]:
        buf = self._buf
        n_i = buf.find(b"\n")
        r_i = buf.find(b"\r")
        if n_i < 0 and r_i < 0:
            return b"", False
        if r_i >= 0 and (n_i < 0 or r_i < n_i):
            line = bytes(buf[:r_i])
            if r_i + 1 < len(buf):
                skip = 2 if buf[r_i + 1] == 0x0A else 1
            else:
                # `\r` at the end of what we have: maybe `\r\n` split over two chunks.
                skip = 1
                self._pending_cr = True
            del buf[: r_i + skip]
            return line, True
        line = bytes(buf[:n_i])
        del buf[: n_i + 1]
        return line, True

    def _line(self, raw: bytes) -> SSEEvent | None:
        if not self._started:
            self._started = True
            if raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
        line = raw.decode("utf-8", errors="replace")
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._has_data:
            self._event = ""
            return None
        ev = SSEEvent(
            data="\n".join(self._data),
            event=self._event or "message",
            id=self._id,
            retry=self._retry,
        )
        self._data = []
        self._has_data = False
        self._event = ""
        return ev

    def flush(self) -> list[SSEEvent]:
        """At the end of the stream: an unterminated last line is processed; an event
        without its blank line is discarded, as the format says."""
        out: list[SSEEvent] = []
        if self._buf:
            line = bytes(self._buf)
            self._buf.clear()
            ev = self._line(line)
            if ev is not None:
                out.append(ev)
        self._data = []
        self._has_data = False
        return out


def parse_sse(chunks: Iterable[bytes]) -> Iterator[SSEEvent]:
    """Every complete event of a stream of byte chunks."""
    dec = SSEDecoder()
    for chunk in chunks:
        yield from dec.feed(chunk)
    yield from dec.flush()


def parse_event_json(ev: SSEEvent) -> dict[str, Any]:
    """The JSON object of an event of the warren API (each has a `type`)."""
    try:
        obj = json.loads(ev.data)
    except ValueError as e:
        from ._errors import WarrenStreamError

        raise WarrenStreamError(f"an event is not JSON ({e}): {ev.data[:200]!r}") from None
    if not isinstance(obj, dict):
        from ._errors import WarrenStreamError

        raise WarrenStreamError(f"an event is not a JSON object: {ev.data[:200]!r}")
    if "type" not in obj and ev.event and ev.event != "message":
        obj["type"] = ev.event
    return obj


def decode_output(obj: dict[str, Any]) -> bytes:
    """The bytes of an output chunk: `data` (UTF-8 text) or `data_base64`."""
    if obj.get("data") is not None:
        return str(obj["data"]).encode("utf-8")
    b64 = obj.get("data_base64")
    if b64:
        return base64.b64decode(b64)
    return b""
