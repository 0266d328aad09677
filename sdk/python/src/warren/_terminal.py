"""Terminals over WebSocket (api.md, "Terminals"), with the `websockets` package.

Client → server: binary frames are keystrokes, text frames JSON control (`resize`).
Server → client: binary frames are output; text frames `ready {cursor}`, `exit {code}`,
`error {message}`. The sync class uses `websockets.sync`, the async one `websockets.asyncio`
(asyncio only).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlencode

from ._errors import WarrenConnectionError, WarrenError, WarrenStreamError, error_from_response

__all__ = ["Terminal", "AsyncTerminal", "TerminalMessage", "terminal_url"]


@dataclass
class TerminalMessage:
    """`type` ∈ output|ready|exit|error; `data` for output, `cursor` for ready, `code` for exit."""

    type: str
    data: bytes = b""
    cursor: Optional[int] = None
    code: Optional[int] = None
    message: Optional[str] = None

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def terminal_url(
    base_url: str,
    sandbox: str,
    name: str,
    cols: Optional[int] = None,
    rows: Optional[int] = None,
    shell: Optional[str] = None,
    since: Optional[int] = None,
    ticket: Optional[str] = None,
) -> str:
    ws = "wss://" + base_url[len("https://") :] if base_url.startswith("https://") else "ws://" + base_url[len("http://") :]
    q = {k: v for k, v in (("cols", cols), ("rows", rows), ("shell", shell), ("since", since), ("ticket", ticket)) if v is not None}
    url = f"{ws}/v1/sandboxes/{sandbox}/terminals/{name}"
    return f"{url}?{urlencode(q)}" if q else url


def _parse(msg: Any) -> TerminalMessage:
    if isinstance(msg, (bytes, bytearray, memoryview)):
        return TerminalMessage(type="output", data=bytes(msg))
    try:
        obj = json.loads(msg)
    except ValueError:
        raise WarrenStreamError(f"the terminal sent a text frame that is not JSON: {str(msg)[:200]!r}") from None
    t = str(obj.get("type", ""))
    return TerminalMessage(type=t, cursor=obj.get("cursor"), code=obj.get("code"), message=obj.get("message"))


def _refusal(exc: Exception) -> WarrenError:
    resp = getattr(exc, "response", None)
    if resp is not None and getattr(resp, "status_code", None):
        headers = {k.lower(): v for k, v in resp.headers.raw_items()} if hasattr(resp.headers, "raw_items") else {}
        return error_from_response(int(resp.status_code), bytes(resp.body or b""), headers)
    return WarrenConnectionError(f"terminal connection failed: {type(exc).__name__}: {exc}", sent=True)


class Terminal:
    """One WebSocket attached to a terminal (sync)."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        #: The cursor of the last `ready` (reconnect with `since=` to resume from it).
        self.cursor: Optional[int] = None
        self.exit_code: Optional[int] = None
        self.closed = False

    def send(self, data: str | bytes) -> None:
        """Keystrokes (a str is sent as UTF-8)."""
        self._ws.send(data.encode("utf-8") if isinstance(data, str) else bytes(data))

    def resize(self, cols: int, rows: int) -> None:
        self._ws.send(json.dumps({"type": "resize", "cols": int(cols), "rows": int(rows)}))

    def send_control(self, obj: dict[str, Any]) -> None:
        self._ws.send(json.dumps(obj))

    def recv(self, timeout: Optional[float] = None) -> Optional[TerminalMessage]:
        """The next message, `None` once the socket closed; `TimeoutError` after `timeout` s."""
        from websockets.exceptions import ConnectionClosed

        if self.closed:
            return None
        try:
            msg = self._ws.recv(timeout=timeout)
        except ConnectionClosed:
            self.closed = True
            return None
        m = _parse(msg)
        if m.type == "ready":
            self.cursor = m.cursor
        elif m.type == "exit":
            self.exit_code = m.code
        return m

    def read_until(self, needle: str = "", timeout: float = 20.0) -> str:
        """Output until `needle` appears (or, with no needle, until `ready`), the shell exits,
        the socket closes or `timeout` passes; returns what was read (errors inline)."""
        out = ""
        deadline = time.monotonic() + timeout
        while not needle or needle not in out:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                m = self.recv(timeout=left)
            except TimeoutError:
                break
            if m is None or m.type == "exit":
                break
            if m.type == "output":
                out += m.text
            elif m.type == "ready" and not needle:
                break
            elif m.type == "error":
                out += f"[error: {m.message}]"
        return out

    def __iter__(self) -> "Terminal":
        return self

    def __next__(self) -> TerminalMessage:
        m = self.recv()
        if m is None:
            raise StopIteration
        return m

    def close(self) -> None:
        self.closed = True
        self._ws.close()

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect_terminal(
    base_url: str,
    api_key: str,
    sandbox: str,
    name: str,
    cols: Optional[int] = None,
    rows: Optional[int] = None,
    shell: Optional[str] = None,
    since: Optional[int] = None,
    *,
    open_timeout: float = 30.0,
) -> Terminal:
    from websockets.exceptions import InvalidHandshake
    from websockets.sync.client import connect

    url = terminal_url(base_url, sandbox, name, cols, rows, shell, since)
    try:
        ws = connect(
            url,
            additional_headers={"authorization": f"Bearer {api_key}"},
            open_timeout=open_timeout,
            max_size=None,
            compression=None,
        )
    except InvalidHandshake as e:
        raise _refusal(e) from None
    except OSError as e:
        raise WarrenConnectionError(f"cannot connect to {url}: {e}", sent=False) from None
    # websockets >= 17.1 warns when a sync connection is not used as a context manager;
    # Terminal is that context manager (it closes the socket).
    if hasattr(ws, "pending_legacy_warning"):
        ws.pending_legacy_warning = False
    return Terminal(ws)


class AsyncTerminal:
    """One WebSocket attached to a terminal (asyncio)."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self.cursor: Optional[int] = None
        self.exit_code: Optional[int] = None
        self.closed = False

    async def send(self, data: str | bytes) -> None:
        await self._ws.send(data.encode("utf-8") if isinstance(data, str) else bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        await self._ws.send(json.dumps({"type": "resize", "cols": int(cols), "rows": int(rows)}))

    async def send_control(self, obj: dict[str, Any]) -> None:
        await self._ws.send(json.dumps(obj))

    async def recv(self, timeout: Optional[float] = None) -> Optional[TerminalMessage]:
        from websockets.exceptions import ConnectionClosed

        if self.closed:
            return None
        try:
            msg = await asyncio.wait_for(self._ws.recv(), timeout)
        except ConnectionClosed:
            self.closed = True
            return None
        m = _parse(msg)
        if m.type == "ready":
            self.cursor = m.cursor
        elif m.type == "exit":
            self.exit_code = m.code
        return m

    async def read_until(self, needle: str = "", timeout: float = 20.0) -> str:
        out = ""
        deadline = time.monotonic() + timeout
        while not needle or needle not in out:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                m = await self.recv(timeout=left)
            except (TimeoutError, asyncio.TimeoutError):
                break
            if m is None or m.type == "exit":
                break
            if m.type == "output":
                out += m.text
            elif m.type == "ready" and not needle:
                break
            elif m.type == "error":
                out += f"[error: {m.message}]"
        return out

    def __aiter__(self) -> "AsyncTerminal":
        return self

    async def __anext__(self) -> TerminalMessage:
        m = await self.recv()
        if m is None:
            raise StopAsyncIteration
        return m

    async def close(self) -> None:
        self.closed = True
        await self._ws.close()

    async def __aenter__(self) -> "AsyncTerminal":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def connect_terminal_async(
    base_url: str,
    api_key: str,
    sandbox: str,
    name: str,
    cols: Optional[int] = None,
    rows: Optional[int] = None,
    shell: Optional[str] = None,
    since: Optional[int] = None,
    *,
    open_timeout: float = 30.0,
) -> AsyncTerminal:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidHandshake

    url = terminal_url(base_url, sandbox, name, cols, rows, shell, since)
    try:
        ws = await connect(
            url,
            additional_headers={"authorization": f"Bearer {api_key}"},
            open_timeout=open_timeout,
            max_size=None,
            compression=None,
        )
    except InvalidHandshake as e:
        raise _refusal(e) from None
    except OSError as e:
        raise WarrenConnectionError(f"cannot connect to {url}: {e}", sent=False) from None
    return AsyncTerminal(ws)
