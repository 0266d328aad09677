"""The asynchronous client: `AsyncWarren`, `AsyncSandbox`, `AsyncProcess`, streams.

`_sync_client.py` is generated from this file by `tools/unasync.py`: coroutines become
plain functions, the `Async` prefixes go, and lines that carry a sync marker comment are
swapped for their sync form or dropped. Edit this file, then run `python tools/unasync.py`.
"""

from __future__ import annotations

import base64
import inspect
import re
import time
from collections import deque
from typing import (
    Any,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Generic,
    Iterable,
    Mapping,
    Optional,
    Sequence,
    TypeVar,
    Union,
)

import anyio  # sync: import threading
import httpx

from ._errors import (
    ContextNotFoundError,
    WarrenConnectionError,
    WarrenError,
    WarrenFileNotFoundError,
    WarrenStreamError,
    WarrenTimeoutError,
    error_from_body,
    error_from_response,
)
from ._models import (
    CodeContext,
    EgressPolicy,
    ExecEvent,
    ExecResult,
    Execution,
    ExecutionError,
    ExposedPort,
    FileEntry,
    FileInfo,
    ForkResult,
    GitCheckoutResult,
    LogEvent,
    LogMatch,
    Logs,
    PortReady,
    ProcessInfo,
    ProcessLogs,
    Result,
    RunEvent,
    SandboxInfo,
    SessionInfo,
    Snapshot,
    Ticket,
    TransferProgress,
    WatchEvent,
    WriteFileResult,
)
from ._terminal import AsyncTerminal  # sync: from ._terminal import Terminal
from ._options import argv_of, build_create_body, file_path, ms, regex_for_server, resolve_config
from ._retry import RetryPolicy, should_retry
from ._sse import SSEDecoder, parse_event_json

__all__ = [
    "AsyncWarren",
    "AsyncSandbox",
    "AsyncProcess",
    "AsyncSession",
    "AsyncEventStream",
    "AsyncWatchStream",
    "AsyncFileStream",
    "AsyncPreviewTransport",
]

T = TypeVar("T")
Callback = Callable[..., Any]
_UNSET: Any = object()

#: Default timeouts (seconds): a JSON call may take this long to be answered; a stream may be
#: quiet this long (the node sends a keepalive at least every 15 s).
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=300.0, pool=60.0)
STREAM_READ_TIMEOUT = 60.0


async def _call(cb: Optional[Callback], *args: Any) -> Any:  # sync: def _call(cb: Optional[Callback], *args: Any) -> Any:
    """Calls a user callback (the async client awaits an async one)."""
    if cb is None:
        return None
    r = cb(*args)
    if inspect.isawaitable(r):  # sync-remove
        r = await r  # sync-remove
    return r


def _timeout_for(base: httpx.Timeout, op_seconds: Optional[float], margin: float = 30.0) -> httpx.Timeout:
    """A read timeout long enough for an operation the server bounds by `op_seconds`."""
    read = base.read
    if op_seconds is not None and read is not None:
        read = max(read, op_seconds + margin)
    return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)


def _stream_timeout(base: httpx.Timeout) -> httpx.Timeout:
    """Streams may be quiet for long: the read timeout only needs to outlast keepalives."""
    return httpx.Timeout(connect=base.connect, read=STREAM_READ_TIMEOUT, write=base.write, pool=base.pool)


def _map_transport_error(e: httpx.TransportError) -> WarrenConnectionError:
    if isinstance(e, httpx.ConnectTimeout):
        return WarrenTimeoutError(f"connecting timed out: {e}", sent=False)
    if isinstance(e, httpx.ConnectError):
        return WarrenConnectionError(f"cannot connect: {e}", sent=False)
    if isinstance(e, httpx.PoolTimeout):
        return WarrenTimeoutError(f"no free connection in the pool: {e}", sent=False)
    if isinstance(e, httpx.TimeoutException):
        return WarrenTimeoutError(f"timed out: {type(e).__name__}: {e}", sent=True)
    return WarrenConnectionError(f"connection failed: {type(e).__name__}: {e}", sent=True)


class AsyncTransport:
    """HTTP with auth, typed errors and retries of what is safe to repeat."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: httpx.Timeout,
        retry: RetryPolicy,
        http_client: Optional[httpx.AsyncClient] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.retry = retry
        self._own_client = http_client is None
        self.client = http_client or httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        self._headers = {
            "authorization": f"Bearer {api_key}",
            "user-agent": "warren-sandbox-python/0.1.0",
            **dict(headers or {}),
        }

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        json: Any = _UNSET,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[httpx.Timeout] = None,
    ) -> httpx.Request:
        h = dict(self._headers)
        if headers:
            h.update(headers)
        kwargs: dict[str, Any] = {}
        if json is not _UNSET:
            kwargs["json"] = json
        elif content is not None:
            kwargs["content"] = content
        return self.client.build_request(
            method, self.base_url + path, params=params, headers=h, timeout=timeout or self.timeout, **kwargs
        )

    async def send(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        json: Any = _UNSET,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        idempotent: Optional[bool] = None,
        timeout: Optional[httpx.Timeout] = None,
        stream: bool = False,
        repeatable_body: bool = True,
    ) -> httpx.Response:
        """Sends and checks: a non-2xx answer raises its `WarrenError`. With `stream`, the
        response's body is left to read (the caller closes it)."""
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            req = self._request(method, path, params=params, json=json, content=content, headers=headers, timeout=timeout)
            err: WarrenError
            try:
                resp = await self.client.send(req, stream=True)
            except httpx.TransportError as e:
                err = _map_transport_error(e)
            else:
                if resp.status_code < 400:
                    if not stream:
                        try:
                            await resp.aread()
                        except httpx.TransportError as e:
                            raise _map_transport_error(e) from e
                        finally:
                            await resp.aclose()
                    return resp
                try:
                    body = await resp.aread()
                except httpx.TransportError:
                    body = b""
                finally:
                    await resp.aclose()
                err = error_from_response(resp.status_code, body, resp.headers)
            safe = idempotent if repeatable_body else False
            wait = self.retry.backoff(attempt, err.retry_after)
            if not should_retry(
                err,
                method=method,
                idempotent=safe,
                attempt=attempt,
                policy=self.retry,
                elapsed=time.monotonic() - started,
                wait=wait,
            ):
                raise err
            await anyio.sleep(wait)  # sync: time.sleep(wait)

    async def json(self, method: str, path: str, **kw: Any) -> Any:
        resp = await self.send(method, path, **kw)
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError as e:
            raise WarrenStreamError(f"the answer is not JSON: {resp.text[:200]!r}") from e


# ---------------------------------------------------------------------------------------
# Streams


class AsyncEventStream(Generic[T]):
    """An iterator over the events of one SSE response. It ends after the stream's terminal
    event (`complete`, `exit`, `error`, `stopped`); a stream that ends without one raises
    `WarrenStreamError`. Close it (or use it as a context manager) to stop early."""

    _terminal: frozenset[str] = frozenset({"complete", "exit", "error", "stopped"})
    _needs_terminal: bool = True

    def __init__(
        self,
        response: httpx.Response,
        parse: Callable[[dict[str, Any]], T],
        is_terminal: Optional[Callable[[T], bool]] = None,
    ) -> None:
        self.response = response
        self._parse = parse
        self._is_terminal = is_terminal or (lambda item: getattr(item, "type", None) in self._terminal)
        self._decoder = SSEDecoder()
        self._queue: deque[T] = deque()
        self._chunks = response.aiter_bytes()
        self._done = False
        self._ended = False
        self.request_id = response.headers.get("x-request-id")

    @property
    def keepalives(self) -> int:
        """How many `: keepalive` comments arrived so far."""
        return self._decoder.comments

    def __aiter__(self) -> "AsyncEventStream[T]":
        return self

    async def __anext__(self) -> T:
        while not self._queue:
            if self._done or self._ended:
                await self.aclose()
                raise StopAsyncIteration
            await self._fill()
        item = self._queue.popleft()
        if self._is_terminal(item):
            self._done = True
            self._queue.clear()
            await self.aclose()
        return item

    async def _fill(self) -> None:
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            self._ended = True
            for ev in self._decoder.flush():
                self._queue.append(self._parse(parse_event_json(ev)))
            if not self._queue and self._needs_terminal and not self._done:
                await self.aclose()
                raise WarrenStreamError("the stream ended before its terminal event") from None
            return
        except httpx.TransportError as e:
            await self.aclose()
            raise _map_transport_error(e) from e
        for ev in self._decoder.feed(chunk):
            self._queue.append(self._parse(parse_event_json(ev)))

    async def aclose(self) -> None:
        self._ended = True
        await self.response.aclose()

    async def __aenter__(self) -> "AsyncEventStream[T]":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def collect(self) -> list[T]:
        """Every event until the end (for short streams)."""
        out: list[T] = []
        async for ev in self:
            out.append(ev)
        return out


class AsyncWatchStream(AsyncEventStream[WatchEvent]):
    """Events of `watch`: first `watching` (already received when `watch` returns), then file
    events until closed; `error` ends it."""

    _terminal = frozenset({"error"})
    _needs_terminal = False


class AsyncFileStream:
    """A file download: iterate for chunks of bytes; `size` and `content_type` from headers."""

    def __init__(self, response: httpx.Response, chunk_size: Optional[int] = None) -> None:
        self.response = response
        length = response.headers.get("content-length")
        self.size: Optional[int] = int(length) if length and length.isdigit() else None
        self.content_type: Optional[str] = response.headers.get("content-type")
        self._iter = response.aiter_bytes(chunk_size)

    def __aiter__(self) -> "AsyncFileStream":
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._iter.__anext__()
        except StopAsyncIteration:
            await self.aclose()
            raise
        except httpx.TransportError as e:
            await self.aclose()
            raise _map_transport_error(e) from e

    async def read(self) -> bytes:
        parts = []
        async for c in self:
            parts.append(c)
        return b"".join(parts)

    async def aclose(self) -> None:
        await self.response.aclose()

    async def __aenter__(self) -> "AsyncFileStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncPreviewTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends requests for preview hosts (`*.{domain}`) to a node's
    address while keeping their `Host` header, as DNS for `*.localhost` would (glibc does not
    resolve `*.localhost`). Other requests go out unchanged."""

    def __init__(self, node_url: str, domain: str = "localhost", inner: Optional[httpx.AsyncBaseTransport] = None) -> None:
        self._node = httpx.URL(node_url)
        self._domain = domain.lower().lstrip(".")
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = (request.url.host or "").lower()
        if host == self._domain or host.endswith("." + self._domain):
            request.url = request.url.copy_with(
                scheme=self._node.scheme, host=self._node.host, port=self._node.port
            )
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


# ---------------------------------------------------------------------------------------
# The client


class AsyncWarren:
    """A connection to a warren cluster (any node): `AsyncWarren(url=None, api_key=None)`
    reads `WARREN_URL` and `WARREN_API_KEY` by default."""

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: Union[float, httpx.Timeout, None] = None,
        retry: Optional[RetryPolicy] = None,
        http_client: Optional[httpx.AsyncClient] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.url, self.api_key = resolve_config(url, api_key)
        if timeout is None:
            t = DEFAULT_TIMEOUT
        elif isinstance(timeout, httpx.Timeout):
            t = timeout
        else:
            t = httpx.Timeout(connect=min(10.0, float(timeout)), read=float(timeout), write=float(timeout), pool=float(timeout))
        self._t = AsyncTransport(
            self.url, self.api_key, timeout=t, retry=retry or RetryPolicy(), http_client=http_client, headers=headers
        )

    async def aclose(self) -> None:
        await self._t.aclose()

    async def __aenter__(self) -> "AsyncWarren":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- sandboxes

    def sandbox(self, id: str, **options: Any) -> "AsyncSandbox":
        """The sandbox named `id` (get-or-create, like the hosted SDK's `getSandbox`).

        Nothing is sent yet. Options (`sleep_after`, `keep_alive`, `persist_across_sessions`,
        `labels`, `instance_type`, `resources`, `env`, `region`, `egress`, `image`,
        `isolation`) are applied with `PUT /v1/sandboxes/{id}` before the first operation;
        without options the first operation creates the sandbox with the defaults."""
        return AsyncSandbox(self, id, options)

    async def create_sandbox(self, id: str, **options: Any) -> "AsyncSandbox":
        """Like `sandbox`, but ensures it exists and runs now (`PUT`)."""
        sb = AsyncSandbox(self, id, options)
        await sb.start()
        return sb

    async def get_sandbox_info(self, id: str) -> SandboxInfo:
        """`GET /v1/sandboxes/{id}` (never creates or wakes); `SandboxNotFoundError` if absent."""
        return SandboxInfo.from_dict(await self._t.json("GET", f"/v1/sandboxes/{id}"))

    async def list_sandboxes(
        self,
        *,
        state: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        region: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> list[SandboxInfo]:
        """Every sandbox matching the filters (follows `next_cursor`); `limit` caps the total."""
        out: list[SandboxInfo] = []
        cursor: Optional[str] = None
        while True:
            params: list[tuple[str, str]] = []
            if state:
                params.append(("state", state))
            for k, v in (labels or {}).items():
                params.append(("label", f"{k}={v}"))
            if region:
                params.append(("region", region))
            page = 1000 if limit is None else max(1, min(1000, limit - len(out)))
            params.append(("limit", str(page)))
            if cursor:
                params.append(("cursor", cursor))
            d = await self._t.json("GET", "/v1/sandboxes", params=params)
            batch = [SandboxInfo.from_dict(s) for s in d.get("sandboxes") or []]
            out.extend(batch)
            cursor = d.get("next_cursor")
            if not cursor or not batch or (limit is not None and len(out) >= limit):
                return out[:limit] if limit is not None else out

    async def delete_sandbox(self, id: str) -> None:
        """`DELETE /v1/sandboxes/{id}` (204 also when it is already gone)."""
        await self._t.send("DELETE", f"/v1/sandboxes/{id}")

    # -- snapshots

    async def list_snapshots(self, sandbox: Optional[str] = None) -> list[Snapshot]:
        params = {"sandbox": sandbox} if sandbox else None
        d = await self._t.json("GET", "/v1/snapshots", params=params)
        return [Snapshot.from_dict(s) for s in d.get("snapshots") or []]

    async def get_snapshot(self, snapshot: Union[str, Snapshot]) -> Snapshot:
        return Snapshot.from_dict(await self._t.json("GET", f"/v1/snapshots/{_snap_id(snapshot)}"))

    async def delete_snapshot(self, snapshot: Union[str, Snapshot]) -> None:
        await self._t.send("DELETE", f"/v1/snapshots/{_snap_id(snapshot)}")

    # -- secrets, tickets, cluster

    async def set_secret(self, name: str, value: str) -> None:
        """`PUT /v1/secrets/{name}` (write-only: values are never returned)."""
        await self._t.send("PUT", f"/v1/secrets/{name}", json={"value": value})

    async def list_secrets(self) -> list[dict[str, Any]]:
        d = await self._t.json("GET", "/v1/secrets")
        return list(d.get("secrets") or [])

    async def delete_secret(self, name: str) -> None:
        await self._t.send("DELETE", f"/v1/secrets/{name}")

    async def create_key(self, tenant: str, scope: str, name: Optional[str] = None) -> dict[str, Any]:
        """`POST /v1/keys` (admin key only): a new key, ``scope`` "admin" or "tenant"; its value is shown once."""
        body: dict[str, Any] = {"tenant": tenant, "scope": scope}
        if name is not None:
            body["name"] = name
        return dict(await self._t.json("POST", "/v1/keys", json=body, idempotent=False))

    async def list_keys(self) -> list[dict[str, Any]]:
        """`GET /v1/keys` (admin key only): ids, tenants, scopes and times, never values."""
        d = await self._t.json("GET", "/v1/keys")
        return list(d.get("keys") or [])

    async def revoke_key(self, key_id: str) -> None:
        """`DELETE /v1/keys/{id}` (admin key only): answered once every node refuses the key."""
        await self._t.send("DELETE", f"/v1/keys/{key_id}")

    async def create_join_token(
        self, ttl_s: Optional[int] = None, single_use: Optional[bool] = None, name: Optional[str] = None
    ) -> dict[str, Any]:
        """`POST /v1/cluster/join-tokens` (admin key only): a token a new node joins with,
        expiring (default an hour) and single-use unless ``single_use`` is False; shown once."""
        body: dict[str, Any] = {}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        if single_use is not None:
            body["single_use"] = single_use
        if name is not None:
            body["name"] = name
        return dict(await self._t.json("POST", "/v1/cluster/join-tokens", json=body, idempotent=False))

    async def list_join_tokens(self) -> list[dict[str, Any]]:
        """`GET /v1/cluster/join-tokens` (admin key only): states, expiries and the nodes each admitted, never values."""
        d = await self._t.json("GET", "/v1/cluster/join-tokens")
        return list(d.get("tokens") or [])

    async def revoke_join_token(self, token_id: str) -> None:
        """`DELETE /v1/cluster/join-tokens/{id}` (admin key only): it admits nobody from then on."""
        await self._t.send("DELETE", f"/v1/cluster/join-tokens/{token_id}")

    async def get_join_policy(self) -> dict[str, Any]:
        """`GET /v1/cluster/join-policy` (admin key only): whether the cluster's own join token still admits nodes."""
        return dict(await self._t.json("GET", "/v1/cluster/join-policy"))

    async def set_join_policy(self, cluster_token: bool) -> dict[str, Any]:
        """`PUT /v1/cluster/join-policy` (admin key only): ``cluster_token=False`` turns the
        cluster's own join token off (only issued join tokens admit nodes then)."""
        body = {"cluster_token": cluster_token}
        return dict(await self._t.json("PUT", "/v1/cluster/join-policy", json=body))

    async def set_tenant_quota(
        self,
        tenant: str,
        max_sandboxes: Optional[int] = None,
        max_cpus: Optional[float] = None,
        max_memory_mb: Optional[int] = None,
        max_snapshot_bytes: Optional[int] = None,
    ) -> dict[str, Any]:
        """`PUT /v1/tenants/{tenant}` (admin key only): limits of what it holds at once; none clears."""
        body: dict[str, Any] = {}
        limits = (
            ("max_sandboxes", max_sandboxes),
            ("max_cpus", max_cpus),
            ("max_memory_mb", max_memory_mb),
            ("max_snapshot_bytes", max_snapshot_bytes),
        )
        for k, v in limits:
            if v is not None:
                body[k] = v
        return dict(await self._t.json("PUT", f"/v1/tenants/{tenant}", json=body))

    async def get_tenant(self, tenant: str) -> dict[str, Any]:
        """`GET /v1/tenants/{tenant}`: its quota and what it holds."""
        return dict(await self._t.json("GET", f"/v1/tenants/{tenant}"))

    async def create_ticket(self, sandbox: str, scope: str, ttl: Optional[int] = None) -> Ticket:
        """`POST /v1/tickets` — a single-use credential for a browser's WebSocket/SSE URL."""
        body: dict[str, Any] = {"sandbox": sandbox, "scope": scope}
        if ttl is not None:
            body["ttl_s"] = int(ttl)
        d = await self._t.json("POST", "/v1/tickets", json=body, idempotent=False)
        return Ticket(ticket=str(d["ticket"]), expires_at=str(d.get("expires_at", "")))

    async def health(self) -> dict[str, Any]:
        """`GET /healthz` (no auth): `{status, problems, node, ...}`. A node that cannot start
        sandboxes safely answers 503 with the same body, which is returned too."""
        try:
            resp = await self._t.client.get(self.url + "/healthz", timeout=self._t.timeout)
        except httpx.TransportError as e:
            raise _map_transport_error(e) from e
        try:
            body = resp.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and "status" in body:
            return body
        raise error_from_response(resp.status_code, resp.content, resp.headers)

    async def cluster(self) -> dict[str, Any]:
        return dict(await self._t.json("GET", "/v1/cluster"))

    def preview_transport(self, domain: str = "localhost") -> AsyncPreviewTransport:
        """An httpx transport that reaches preview URLs through this client's node."""
        return AsyncPreviewTransport(self.url, domain)


def _snap_id(s: Union[str, Snapshot]) -> str:
    return s.id if isinstance(s, Snapshot) else str(s)


def _ctx_id(c: Union[str, CodeContext]) -> str:
    return c.id if isinstance(c, CodeContext) else str(c)


async def _body_iter(content: Any) -> AsyncIterator[bytes]:  # sync: def _body_iter(content: Any) -> Iterator[bytes]:
    """Streams a file-like object or an (async) iterable of chunks as bytes."""
    if hasattr(content, "read"):
        while True:
            chunk = content.read(1 << 20)
            if inspect.isawaitable(chunk):  # sync-remove
                chunk = await chunk  # sync-remove
            if not chunk:
                return
            yield chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)
    elif hasattr(content, "__aiter__"):  # sync-remove
        async for chunk in content:  # sync-remove
            yield chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)  # sync-remove
    else:
        for chunk in content:
            yield chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)


class AsyncSandbox:
    """One sandbox, by id. Every call under `/v1/sandboxes/{id}/…` creates it if absent and
    wakes it if it sleeps."""

    def __init__(self, warren: AsyncWarren, id: str, options: Optional[Mapping[str, Any]] = None) -> None:
        self.warren = warren
        self.id = id
        self._t = warren._t
        self._options: Optional[dict[str, Any]] = build_create_body(options or {}) or None
        self._pending: Optional[dict[str, Any]] = dict(self._options) if self._options else None
        self._lock = anyio.Lock()  # sync: self._lock = threading.Lock()
        self._default_contexts: dict[str, CodeContext] = {}
        #: The Sandbox resource as of the last call that returned it.
        self.last_info: Optional[SandboxInfo] = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"

    def _p(self, rest: str = "") -> str:
        return f"/v1/sandboxes/{self.id}{rest}"

    async def _ready(self) -> None:
        """Applies the options given to `sandbox(...)` once, before the first operation."""
        if self._pending is None:
            return
        async with self._lock:
            if self._pending is None:
                return
            await self._put(self._pending)

    async def _put(self, body: dict[str, Any]) -> SandboxInfo:
        resp = await self._t.send("PUT", self._p(), json=body, idempotent=True, timeout=_timeout_for(self._t.timeout, 120))
        info = SandboxInfo.from_dict(resp.json(), created=resp.status_code == 201)
        self._pending = None
        self.last_info = info
        return info

    # -- lifecycle

    async def start(self, snapshot: Union[str, Snapshot, None] = None, **options: Any) -> SandboxInfo:
        """Ensures the sandbox exists and runs (`PUT`), with the options given to `sandbox()`
        and these; `snapshot=` creates it from that snapshot (`from_snapshot`)."""
        body = dict(self._pending or {})
        body.update(build_create_body(options))
        if snapshot is not None:
            body["from_snapshot"] = _snap_id(snapshot)
        async with self._lock:
            return await self._put(body)

    async def update(self, **options: Any) -> SandboxInfo:
        """Changes `labels`, `sleep_after`, `keep_alive`, `persist_across_sessions` (a `PUT`)."""
        return await self.start(**options)

    async def info(self) -> SandboxInfo:
        """The Sandbox resource (`GET`: never creates or wakes it)."""
        info = await self.warren.get_sandbox_info(self.id)
        self.last_info = info
        return info

    async def sleep(self, on_progress: Optional[Callback] = None) -> SandboxInfo:
        """Persists per `persist`, stops every process, state `sleeping`."""
        await self._ready()
        d = await self._transfer("POST", self._p("/sleep"), None, on_progress)
        info = SandboxInfo.from_dict(d)
        self.last_info = info
        return info

    async def destroy(self) -> None:
        """Deletes the sandbox: container, disk and processes go; named snapshots stay. A
        later call on this handle creates it again (with the options it was made with)."""
        self._pending = dict(self._options) if self._options else None
        self._default_contexts.clear()
        await self._t.send("DELETE", self._p())

    # -- commands

    def _exec_body(
        self,
        command: Union[str, Sequence[str]],
        args: Optional[Sequence[str]],
        cwd: Optional[str],
        env: Optional[Mapping[str, str]],
        timeout: Optional[float],
        session: Optional[str],
        stdin: Union[str, bytes, None],
    ) -> dict[str, Any]:
        cmd, argv = argv_of(command, args)
        body: dict[str, Any] = {}
        if cmd is not None:
            body["command"] = cmd
        else:
            body["argv"] = argv
        if cwd is not None:
            body["cwd"] = cwd
        if env is not None:
            body["env"] = {str(k): str(v) for k, v in env.items()}
        if timeout is not None:
            body["timeout_ms"] = ms(timeout)
        if session is not None:
            body["session"] = session
        if isinstance(stdin, bytes):
            body["stdin_base64"] = base64.b64encode(stdin).decode("ascii")
        elif stdin is not None:
            body["stdin"] = stdin
        return body

    async def exec(
        self,
        command: Union[str, Sequence[str]],
        args: Optional[Sequence[str]] = None,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        session: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        on_event: Optional[Callback] = None,
    ) -> ExecResult:
        """Runs `command` (a bash script in the session's persistent shell) or, with `args`
        (`exec("npm", ["test"])`) or a list, a program without a shell. `timeout` is in
        seconds. With `on_stdout`/`on_stderr` (called with each chunk's text as it arrives)
        the output streams; the result is the same either way.

        A script that ends its shell (`exit 3`) raises `SessionTerminatedError`."""
        body = self._exec_body(command, args, cwd, env, timeout, session, stdin)
        await self._ready()
        if on_stdout is None and on_stderr is None and on_event is None:
            d = await self._t.json(
                "POST", self._p("/exec"), json=body, idempotent=False, timeout=_timeout_for(self._t.timeout, timeout)
            )
            return ExecResult.from_dict(d)
        stream = await self._open_exec_stream(body, timeout)
        out: list[bytes] = []
        err: list[bytes] = []
        async with stream:
            async for ev in stream:
                await _call(on_event, ev)
                if ev.type == "stdout":
                    out.append(ev.bytes)
                    await _call(on_stdout, ev.text)
                elif ev.type == "stderr":
                    err.append(ev.bytes)
                    await _call(on_stderr, ev.text)
                elif ev.type == "complete":
                    ob, eb = b"".join(out), b"".join(err)
                    code = int(ev.exit_code if ev.exit_code is not None else -1)
                    return ExecResult(
                        stdout=ob.decode("utf-8", errors="replace"),
                        stderr=eb.decode("utf-8", errors="replace"),
                        exit_code=code,
                        success=code == 0,
                        duration_ms=int(ev.duration_ms or 0),
                        timed_out=bool(ev.timed_out),
                        stdout_bytes=ob,
                        stderr_bytes=eb,
                        raw=ev.raw,
                    )
                elif ev.type == "error":
                    raise error_from_body(0, ev.raw, request_id=stream.request_id)
        raise WarrenStreamError("the exec stream ended without `complete`")

    async def _open_exec_stream(self, body: dict[str, Any], timeout: Optional[float]) -> AsyncEventStream[ExecEvent]:
        resp = await self._t.send(
            "POST",
            self._p("/exec"),
            json=body,
            idempotent=False,
            stream=True,
            headers={"accept": "text/event-stream"},
            timeout=_stream_timeout(self._t.timeout),
        )
        return AsyncEventStream(resp, ExecEvent.from_dict)

    async def exec_stream(
        self,
        command: Union[str, Sequence[str]],
        args: Optional[Sequence[str]] = None,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        session: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
    ) -> AsyncEventStream[ExecEvent]:
        """Runs a command and returns its events as they happen: `start {pid}`,
        `stdout {data}`, `stderr {data}`, then `complete {exit_code, ...}` or `error`."""
        body = self._exec_body(command, args, cwd, env, timeout, session, stdin)
        await self._ready()
        return await self._open_exec_stream(body, timeout)

    # -- sessions and env

    async def create_session(
        self, id: Optional[str] = None, *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None
    ) -> "AsyncSession":
        """A new shell session (its own cwd, env, functions); creating an existing id returns it."""
        body: dict[str, Any] = {}
        if id is not None:
            body["id"] = id
        if env is not None:
            body["env"] = dict(env)
        if cwd is not None:
            body["cwd"] = cwd
        await self._ready()
        d = await self._t.json("POST", self._p("/sessions"), json=body, idempotent=id is not None)
        return AsyncSession(self, SessionInfo(id=str(d["id"]), cwd=str(d.get("cwd", ""))))

    def session(self, id: str) -> "AsyncSession":
        """A handle on session `id` (created by its first use)."""
        return AsyncSession(self, SessionInfo(id=id, cwd=""))

    async def delete_session(self, id: str) -> None:
        """Kills the session's shell and its processes (idempotent)."""
        await self._ready()
        await self._t.send("DELETE", self._p(f"/sessions/{id}"))

    async def set_env_vars(self, env: Mapping[str, Optional[str]], *, session: Optional[str] = None) -> list[str]:
        """Sets (or, with `None`, unsets) variables for a session (default: every session) and
        sessions created later; returns the sessions changed."""
        body: dict[str, Any] = {"env": {str(k): (None if v is None else str(v)) for k, v in env.items()}}
        if session is not None:
            body["session"] = session
        await self._ready()
        d = await self._t.json("PATCH", self._p("/env"), json=body, idempotent=True)
        return list((d or {}).get("sessions") or [])

    # -- background processes

    async def start_process(
        self,
        command: Union[str, Sequence[str]],
        args: Optional[Sequence[str]] = None,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        id: Optional[str] = None,
        session: Optional[str] = None,
    ) -> "AsyncProcess":
        """Starts a background process (`bash -c command`, or a program with `args`)."""
        cmd, argv = argv_of(command, args)
        body: dict[str, Any] = {"command": cmd} if cmd is not None else {"argv": argv}
        if cwd is not None:
            body["cwd"] = cwd
        if env is not None:
            body["env"] = {str(k): str(v) for k, v in env.items()}
        if id is not None:
            body["id"] = id
        if session is not None:
            body["session"] = session
        await self._ready()
        d = await self._t.json("POST", self._p("/processes"), json=body, idempotent=False)
        return AsyncProcess(self, ProcessInfo.from_dict(d))

    async def list_processes(self) -> list["AsyncProcess"]:
        await self._ready()
        d = await self._t.json("GET", self._p("/processes"))
        return [AsyncProcess(self, ProcessInfo.from_dict(p)) for p in d.get("processes") or []]

    async def get_process(self, id: str) -> "AsyncProcess":
        """`ProcessNotFoundError` when no such process is known."""
        await self._ready()
        return AsyncProcess(self, ProcessInfo.from_dict(await self._t.json("GET", self._p(f"/processes/{id}"))))

    async def kill_process(self, id: str, signal: str = "TERM", *, grace: float = 5.0) -> ProcessInfo:
        """Signals the process's tree, then SIGKILLs what is left after `grace` seconds."""
        await self._ready()
        params = {"signal": str(signal), "grace_ms": str(int(grace * 1000))}
        d = await self._t.json(
            "DELETE", self._p(f"/processes/{id}"), params=params, timeout=_timeout_for(self._t.timeout, grace)
        )
        return ProcessInfo.from_dict(d)

    async def kill_all_processes(self, signal: str = "TERM", *, grace: float = 5.0) -> list[ProcessInfo]:
        """Kills every running process; returns what was killed."""
        killed: list[ProcessInfo] = []
        for p in await self.list_processes():
            if p.status == "running":
                killed.append(await self.kill_process(p.id, signal, grace=grace))
        return killed

    # -- files

    async def write_file(
        self,
        path: str,
        content: Union[str, bytes, bytearray, memoryview, Iterable[bytes], AsyncIterable[bytes], Any],
        *,
        mode: Union[str, int, None] = None,
        encoding: str = "utf-8",
    ) -> WriteFileResult:
        """Writes `content` (text, bytes, a file object or an iterable of chunks: streamed) to
        the absolute `path`, atomically; parents are created. `mode` like `"0755"` or `0o755`."""
        params = None
        if mode is not None:
            params = {"mode": mode if isinstance(mode, str) else format(mode, "04o")}
        repeatable = True
        if isinstance(content, str):
            data: Any = content.encode(encoding)
        elif isinstance(content, (bytes, bytearray, memoryview)):
            data = bytes(content)
        else:
            data = _body_iter(content)
            repeatable = False
        await self._ready()
        d = await self._t.json(
            "PUT",
            file_path(self.id, path),
            params=params,
            content=data,
            headers={"content-type": "application/octet-stream"},
            repeatable_body=repeatable,
        )
        return WriteFileResult.from_dict(d)

    async def read_file_stream(self, path: str, *, chunk_size: Optional[int] = None) -> AsyncFileStream:
        """Opens a download; iterate it for chunks (nothing is held whole in memory)."""
        await self._ready()
        resp = await self._t.send("GET", file_path(self.id, path), stream=True)
        return AsyncFileStream(resp, chunk_size)

    async def read_file_bytes(self, path: str) -> bytes:
        await self._ready()
        return (await self._t.send("GET", file_path(self.id, path))).content

    async def read_file(self, path: str, *, encoding: str = "utf-8") -> str:
        """The file's content as text (`read_file_bytes` for bytes, `read_file_stream` to stream)."""
        return (await self.read_file_bytes(path)).decode(encoding)

    async def download_dir(self, path: str, *, chunk_size: Optional[int] = None) -> AsyncFileStream:
        """The directory `path` as a tar stream (entries relative to it; modes, times, symbolic
        links); iterate it for chunks. Not a directory: `WarrenError` with `NOT_A_DIRECTORY`."""
        await self._ready()
        resp = await self._t.send("GET", self._p("/fs/archive"), params={"path": path}, stream=True)
        return AsyncFileStream(resp, chunk_size)

    async def upload_dir(
        self, path: str, tar: Union[bytes, bytearray, memoryview, Iterable[bytes], AsyncIterable[bytes], Any]
    ) -> dict[str, Any]:
        """Unpacks `tar` (bytes, a file object or an iterable of chunks: streamed) into the
        **new** directory `path`, all or nothing → `{path, entries, bytes}`. Something already
        at `path`: `ALREADY_EXISTS`; an entry leaving the directory: `INVALID_ARGUMENT`."""
        repeatable = isinstance(tar, (bytes, bytearray, memoryview))
        data: Any = bytes(tar) if repeatable else _body_iter(tar)
        await self._ready()
        d = await self._t.json(
            "PUT",
            self._p("/fs/archive"),
            params={"path": path},
            content=data,
            headers={"content-type": "application/x-tar"},
            # A second try after an answer that was lost would find the directory made.
            idempotent=False,
            repeatable_body=repeatable,
        )
        return dict(d)

    async def delete_file(self, path: str, *, recursive: bool = False) -> None:
        await self._ready()
        await self._t.send("DELETE", file_path(self.id, path), params={"recursive": "true" if recursive else "false"})

    async def stat(self, path: str) -> FileInfo:
        await self._ready()
        return FileInfo.from_dict(await self._t.json("GET", self._p("/fs/stat"), params={"path": path}))

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
            return True
        except WarrenFileNotFoundError:
            return False

    async def list_files(self, path: str = "/workspace", *, recursive: bool = False, hidden: bool = False) -> list[FileEntry]:
        await self._ready()
        params = {"path": path, "recursive": str(recursive).lower(), "hidden": str(hidden).lower()}
        d = await self._t.json("GET", self._p("/fs/list"), params=params)
        return [FileEntry.from_dict(e) for e in d.get("entries") or []]

    async def mkdir(self, path: str, *, recursive: bool = False) -> None:
        """Creates a directory (`AlreadyExistsError` if it exists, unless `recursive`)."""
        await self._ready()
        await self._t.send("POST", self._p("/fs/mkdir"), json={"path": path, "recursive": recursive}, idempotent=recursive)

    async def move_file(self, source: str, destination: str, *, overwrite: bool = False) -> None:
        """Moves (or renames) a file or directory; the destination's parents are created."""
        await self._ready()
        await self._t.send(
            "POST", self._p("/fs/move"), json={"from": source, "to": destination, "overwrite": overwrite}, idempotent=False
        )

    async def rename_file(self, old_path: str, new_path: str) -> None:
        """Renames `old_path` to `new_path` (a relative `new_path` stays in the same directory)."""
        if not new_path.startswith("/"):
            parent = old_path.rstrip("/").rsplit("/", 1)[0] or ""
            new_path = f"{parent}/{new_path}"
        await self.move_file(old_path, new_path)

    # -- git

    async def git_checkout(
        self,
        url: str,
        *,
        branch: Optional[str] = None,
        target_dir: Optional[str] = None,
        depth: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> GitCheckoutResult:
        """Clones `url` into `target_dir` (default `/workspace/<repo name>`); `GitFailedError`
        carries git's message."""
        body: dict[str, Any] = {"url": url}
        if branch is not None:
            body["branch"] = branch
        if target_dir is not None:
            body["target_dir"] = target_dir
        if depth is not None:
            body["depth"] = int(depth)
        if timeout is not None:
            body["timeout_ms"] = ms(timeout)
        await self._ready()
        d = await self._t.json(
            "POST", self._p("/git/checkout"), json=body, idempotent=False, timeout=_timeout_for(self._t.timeout, timeout or 300)
        )
        return GitCheckoutResult.from_dict(d)

    # -- ports

    async def expose_port(
        self, port: int, *, name: Optional[str] = None, token: Optional[str] = None, public: bool = False
    ) -> ExposedPort:
        """Exposes `port`; its preview URL is `result.url` (exposing again keeps the token).
        With `public=True` anyone with the URL opens it, without a token."""
        body: dict[str, Any] = {"port": int(port)}
        if name is not None:
            body["name"] = name
        if token is not None:
            body["token"] = token
        if public:
            body["public"] = True
        await self._ready()
        return ExposedPort.from_dict(await self._t.json("POST", self._p("/ports"), json=body, idempotent=True))

    async def unexpose_port(self, port: int) -> None:
        await self._ready()
        await self._t.send("DELETE", self._p(f"/ports/{int(port)}"))

    async def get_exposed_ports(self) -> list[ExposedPort]:
        await self._ready()
        d = await self._t.json("GET", self._p("/ports"))
        return [ExposedPort.from_dict(p) for p in d.get("ports") or []]

    # -- watch

    async def watch(
        self,
        path: str = "/workspace",
        *,
        recursive: bool = True,
        include: Union[str, Sequence[str], None] = None,
        exclude: Union[str, Sequence[str], None] = None,
    ) -> AsyncWatchStream:
        """Watches `path`; returns once the watch is live (its `watching` event arrived, and
        is the first event iterated), so changes made after this returns are seen."""
        params: list[tuple[str, str]] = [("path", path), ("recursive", str(recursive).lower())]
        for name, pats in (("include", include), ("exclude", exclude)):
            if pats is None:
                continue
            for p in [pats] if isinstance(pats, str) else pats:
                params.append((name, p))
        await self._ready()
        resp = await self._t.send(
            "GET",
            self._p("/watch"),
            params=params,
            stream=True,
            headers={"accept": "text/event-stream"},
            timeout=_stream_timeout(self._t.timeout),
        )
        stream = AsyncWatchStream(resp, WatchEvent.from_dict)
        try:
            while not stream._queue:
                if stream._ended:
                    raise WarrenStreamError("the watch ended before it was live")
                await stream._fill()
            first = stream._queue[0]
            if first.type == "error":
                raise WarrenStreamError(f"the watch failed: {first.message}")
        except BaseException:
            await stream.aclose()
            raise
        return stream

    # -- code interpreter

    async def create_code_context(
        self, language: str = "python", *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None
    ) -> CodeContext:
        """A new kernel (`python`, `javascript`, `typescript`): variables persist per context."""
        body: dict[str, Any] = {"language": language}
        if cwd is not None:
            body["cwd"] = cwd
        if env is not None:
            body["env"] = dict(env)
        await self._ready()
        return CodeContext.from_dict(
            await self._t.json("POST", self._p("/contexts"), json=body, idempotent=False, timeout=_timeout_for(self._t.timeout, 60))
        )

    async def list_code_contexts(self) -> list[CodeContext]:
        await self._ready()
        d = await self._t.json("GET", self._p("/contexts"))
        return [CodeContext.from_dict(c) for c in d.get("contexts") or []]

    async def delete_code_context(self, context: Union[str, CodeContext]) -> None:
        cid = _ctx_id(context)
        for lang, c in list(self._default_contexts.items()):
            if c.id == cid:
                del self._default_contexts[lang]
        await self._ready()
        await self._t.send("DELETE", self._p(f"/contexts/{cid}"))

    async def _context_for(self, context: Union[str, CodeContext, None], language: str) -> tuple[str, bool]:
        if context is not None:
            return _ctx_id(context), False
        c = self._default_contexts.get(language)
        if c is None:
            c = await self.create_code_context(language)
            self._default_contexts[language] = c
        return c.id, True

    async def run_code(
        self,
        code: str,
        *,
        context: Union[str, CodeContext, None] = None,
        language: str = "python",
        timeout: Optional[float] = None,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        on_result: Optional[Callback] = None,
        on_error: Optional[Callback] = None,
    ) -> Execution:
        """Runs `code` in `context` (default: one context per language, made on first use)
        → `Execution(results, logs, error)`. Callbacks get output and results as they
        happen. An error in the code is `execution.error`, not an exception."""
        body: dict[str, Any] = {"code": code}
        if timeout is not None:
            body["timeout_ms"] = ms(timeout)
        cid, is_default = await self._context_for(context, language)
        streaming = any(cb is not None for cb in (on_stdout, on_stderr, on_result, on_error))
        try:
            return await self._run(cid, body, timeout, streaming, on_stdout, on_stderr, on_result, on_error)
        except ContextNotFoundError:
            if not is_default:
                raise
            # The default context went away (the sandbox slept): make a new one, once.
            self._default_contexts.pop(language, None)
            cid, _ = await self._context_for(None, language)
            return await self._run(cid, body, timeout, streaming, on_stdout, on_stderr, on_result, on_error)

    async def _run(
        self,
        cid: str,
        body: dict[str, Any],
        timeout: Optional[float],
        streaming: bool,
        on_stdout: Optional[Callback],
        on_stderr: Optional[Callback],
        on_result: Optional[Callback],
        on_error: Optional[Callback],
    ) -> Execution:
        path = self._p(f"/contexts/{cid}/run")
        if not streaming:
            d = await self._t.json("POST", path, json=body, idempotent=False, timeout=_timeout_for(self._t.timeout, timeout))
            return Execution.from_dict(d)
        ex = Execution(logs=Logs())
        stream = await self._open_run_stream(path, body)
        async with stream:
            async for ev in stream:
                if ev.type == "stdout":
                    ex.logs.stdout.append(ev.text or "")
                    await _call(on_stdout, ev.text or "")
                elif ev.type == "stderr":
                    ex.logs.stderr.append(ev.text or "")
                    await _call(on_stderr, ev.text or "")
                elif ev.type == "result" and ev.result is not None:
                    ex.results.append(ev.result)
                    await _call(on_result, ev.result)
                elif ev.type == "error":
                    if ev.code:
                        raise error_from_body(0, {"code": ev.code, "message": ev.raw.get("message", ""), "details": ev.raw.get("details")})
                    ex.error = ev.error
                    await _call(on_error, ev.error)
                elif ev.type == "complete":
                    ex.execution_count = ev.execution_count or 0
                    return ex
        raise WarrenStreamError("the run stream ended without `complete`")

    async def _open_run_stream(self, path: str, body: dict[str, Any]) -> AsyncEventStream[RunEvent]:
        resp = await self._t.send(
            "POST",
            path,
            json=body,
            idempotent=False,
            stream=True,
            headers={"accept": "text/event-stream"},
            timeout=_stream_timeout(self._t.timeout),
        )
        return AsyncEventStream(resp, RunEvent.from_dict, _run_terminal)

    async def run_code_stream(
        self,
        code: str,
        *,
        context: Union[str, CodeContext, None] = None,
        language: str = "python",
        timeout: Optional[float] = None,
    ) -> AsyncEventStream[RunEvent]:
        """Runs `code`; its events (`stdout`, `stderr`, `result`, `error`, `complete`) as they happen."""
        body: dict[str, Any] = {"code": code}
        if timeout is not None:
            body["timeout_ms"] = ms(timeout)
        cid, _ = await self._context_for(context, language)
        return await self._open_run_stream(self._p(f"/contexts/{cid}/run"), body)

    # -- snapshots, restore, fork

    async def _transfer(self, method: str, path: str, body: Optional[dict[str, Any]], on_progress: Optional[Callback]) -> Any:
        """A snapshot/restore/fork/sleep, as a plain call or (with `on_progress`) a stream."""
        long = _timeout_for(self._t.timeout, 600)
        payload: Any = body if body is not None else _UNSET
        if on_progress is None:
            return await self._t.json(method, path, json=payload, idempotent=False, timeout=long)
        resp = await self._t.send(
            method,
            path,
            json=payload,
            idempotent=False,
            stream=True,
            headers={"accept": "text/event-stream"},
            timeout=_stream_timeout(long),
        )
        stream: AsyncEventStream[dict[str, Any]] = AsyncEventStream(
            resp, _TypedDict, lambda ev: ev.get("type") in ("complete", "error")
        )
        async with stream:
            async for ev in stream:
                t = ev.get("type")
                if t == "progress":
                    await _call(
                        on_progress,
                        TransferProgress(
                            phase=str(ev.get("phase", "")), bytes=int(ev.get("bytes") or 0), total_bytes=ev.get("total_bytes")
                        ),
                    )
                elif t == "complete":
                    return ev.get("result")
                elif t == "error":
                    payload = ev.get("error") if isinstance(ev.get("error"), Mapping) else ev
                    raise error_from_body(0, payload, request_id=stream.request_id)
        raise WarrenStreamError("the transfer stream ended without `complete`")

    async def snapshot(
        self, name: Optional[str] = None, *, dirs: Optional[Sequence[str]] = None, on_progress: Optional[Callback] = None
    ) -> Snapshot:
        """Saves the sandbox's filesystem (or only `dirs`) as an immutable snapshot; `.id` names it."""
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if dirs is not None:
            body["dirs"] = list(dirs)
        await self._ready()
        return Snapshot.from_dict(await self._transfer("POST", self._p("/snapshots"), body, on_progress))

    async def list_snapshots(self) -> list[Snapshot]:
        return await self.warren.list_snapshots(self.id)

    async def restore(self, snapshot: Union[str, Snapshot], *, on_progress: Optional[Callback] = None) -> SandboxInfo:
        """The sandbox's files become the snapshot's (a new container: processes do not survive)."""
        await self._ready()
        self._default_contexts.clear()
        d = await self._transfer("POST", self._p("/restore"), {"snapshot": _snap_id(snapshot)}, on_progress)
        info = SandboxInfo.from_dict(d)
        self.last_info = info
        return info

    async def fork(
        self, count: int, *, ids: Optional[Sequence[str]] = None, on_progress: Optional[Callback] = None
    ) -> ForkResult:
        """One snapshot, `count` new sandboxes started from it (ids default `{id}-fork-{i}`)."""
        body: dict[str, Any] = {"count": int(count)}
        if ids is not None:
            body["ids"] = list(ids)
        await self._ready()
        d = await self._transfer("POST", self._p("/fork"), body, on_progress)
        sandboxes = []
        for s in d.get("sandboxes") or []:
            sb = AsyncSandbox(self.warren, str(s["id"]))
            sb.last_info = SandboxInfo.from_dict(s, created=True)
            sandboxes.append(sb)
        return ForkResult(snapshot=Snapshot.from_dict(d["snapshot"]), sandboxes=sandboxes)

    # -- egress

    async def set_egress(self, policy: EgressPolicy) -> EgressPolicy:
        """Replaces the sandbox's egress policy (effective at once); returns it."""
        await self._ready()
        return await self._t.json("PUT", self._p("/egress"), json=dict(policy))  # type: ignore[no-any-return]

    async def get_egress(self) -> EgressPolicy:
        await self._ready()
        return await self._t.json("GET", self._p("/egress"))  # type: ignore[no-any-return]

    # -- terminals

    async def terminal(
        self,
        name: str = "main",
        *,
        cols: Optional[int] = None,
        rows: Optional[int] = None,
        shell: Optional[str] = None,
        since: Optional[int] = None,
    ) -> "AsyncTerminal":
        """Attaches to terminal `name` over a WebSocket (its shell outlives the socket):
        `send(keys)`, `resize(cols, rows)`, `recv()`, `read_until(text)`, `close()`."""
        from ._terminal import connect_terminal_async  # sync: from ._terminal import connect_terminal

        await self._ready()
        return await connect_terminal_async(self._t.base_url, self._t.api_key, self.id, name, cols, rows, shell, since)  # sync: return connect_terminal(self._t.base_url, self._t.api_key, self.id, name, cols, rows, shell, since)

    async def close_terminal(self, name: str) -> None:
        """Ends terminal `name`'s shell (204 also when none runs)."""
        await self._ready()
        await self._t.send("DELETE", self._p(f"/terminals/{name}"))

    async def list_terminals(self) -> list[dict[str, Any]]:
        await self._ready()
        d = await self._t.json("GET", self._p("/terminals"))
        return list((d or {}).get("terminals") or [])


def _TypedDict(d: dict[str, Any]) -> dict[str, Any]:
    return d


def _run_terminal(ev: RunEvent) -> bool:
    """A run ends with `complete`; an `error` of the code comes before it, while an `error`
    carrying an API `code` (the platform failed) ends the stream instead."""
    return ev.type == "complete" or (ev.type == "error" and bool(ev.code))


class AsyncSession:
    """A shell session of a sandbox: `exec`, `exec_stream` and `start_process` run in it."""

    def __init__(self, sandbox: AsyncSandbox, info: SessionInfo) -> None:
        self.sandbox = sandbox
        self.id = info.id
        self.cwd = info.cwd

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.sandbox.id!r}, {self.id!r})"

    async def exec(self, command: Union[str, Sequence[str]], args: Optional[Sequence[str]] = None, **kw: Any) -> ExecResult:
        return await self.sandbox.exec(command, args, session=self.id, **kw)

    async def exec_stream(
        self, command: Union[str, Sequence[str]], args: Optional[Sequence[str]] = None, **kw: Any
    ) -> AsyncEventStream[ExecEvent]:
        return await self.sandbox.exec_stream(command, args, session=self.id, **kw)

    async def start_process(
        self, command: Union[str, Sequence[str]], args: Optional[Sequence[str]] = None, **kw: Any
    ) -> "AsyncProcess":
        return await self.sandbox.start_process(command, args, session=self.id, **kw)

    async def set_env_vars(self, env: Mapping[str, Optional[str]]) -> list[str]:
        return await self.sandbox.set_env_vars(env, session=self.id)

    async def delete(self) -> None:
        await self.sandbox.delete_session(self.id)


class AsyncProcess:
    """A background process of a sandbox; `info` is its last known state."""

    def __init__(self, sandbox: AsyncSandbox, info: ProcessInfo) -> None:
        self.sandbox = sandbox
        self.info = info

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, status={self.status!r}, command={self.command!r})"

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def command(self) -> str:
        return self.info.command

    @property
    def status(self) -> str:
        return self.info.status

    @property
    def exit_code(self) -> Optional[int]:
        return self.info.exit_code

    def _p(self, rest: str = "") -> str:
        return self.sandbox._p(f"/processes/{self.id}{rest}")

    async def refresh(self) -> ProcessInfo:
        self.info = ProcessInfo.from_dict(await self.sandbox._t.json("GET", self._p()))
        return self.info

    async def get_status(self) -> str:
        return (await self.refresh()).status

    async def wait_for_log(self, pattern: Union[str, "re.Pattern[str]"], *, timeout: Optional[float] = None) -> LogMatch:
        """Waits for a whole line of stdout or stderr (from the start of the log) that contains
        `pattern` (a string) or matches it (a compiled regex; `result.match` is its
        `re.Match`). `ReadyTimeoutError` on timeout, `ProcessExitedError` if it ended first."""
        body: dict[str, Any] = {}
        if isinstance(pattern, re.Pattern):
            body["regex"] = regex_for_server(pattern)
        else:
            body["pattern"] = str(pattern)
        if timeout is not None:
            body["timeout_ms"] = ms(timeout)
        d = await self.sandbox._t.json(
            "POST", self._p("/wait/log"), json=body, idempotent=True, timeout=_timeout_for(self.sandbox._t.timeout, timeout or 300)
        )
        line = str(d.get("line", ""))
        if isinstance(pattern, re.Pattern):
            m = pattern.search(line)
        else:
            m = re.search(re.escape(str(pattern)), line)
        return LogMatch(line=line, match=m)

    async def wait_for_port(
        self,
        port: int,
        *,
        mode: str = "tcp",
        path: Optional[str] = None,
        status_min: Optional[int] = None,
        status_max: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> PortReady:
        """Waits until `port` accepts connections (`mode="tcp"`) or answers `GET path` with a
        status in `status_min..status_max` (`mode="http"`, default 200–399)."""
        body: dict[str, Any] = {"port": int(port), "mode": mode}
        if path is not None:
            body["path"] = path
        if status_min is not None:
            body["status_min"] = int(status_min)
        if status_max is not None:
            body["status_max"] = int(status_max)
        if timeout is not None:
            body["timeout_ms"] = ms(timeout)
        d = await self.sandbox._t.json(
            "POST", self._p("/wait/port"), json=body, idempotent=True, timeout=_timeout_for(self.sandbox._t.timeout, timeout or 300)
        )
        return PortReady(port=int(d.get("port", port)), status=d.get("status"))

    async def wait_for_exit(self, *, timeout: Optional[float] = None) -> int:
        """Waits for the process to end; returns its exit code."""
        body: dict[str, Any] = {}
        if timeout is not None:
            body["timeout_ms"] = ms(timeout)
        d = await self.sandbox._t.json(
            "POST", self._p("/wait/exit"), json=body, idempotent=True, timeout=_timeout_for(self.sandbox._t.timeout, timeout or 300)
        )
        return int(d["exit_code"])

    async def kill(self, signal: str = "TERM", *, grace: float = 5.0) -> ProcessInfo:
        self.info = await self.sandbox.kill_process(self.id, signal, grace=grace)
        return self.info

    async def get_logs(self, *, since: Optional[int] = None) -> ProcessLogs:
        params = {"since": str(since)} if since is not None else None
        return ProcessLogs.from_dict(await self.sandbox._t.json("GET", self._p("/logs"), params=params))

    async def stream_logs(self, *, since: Optional[int] = None, follow: bool = True) -> AsyncEventStream[LogEvent]:
        """Replays the log (from `since`, a cursor of an earlier answer), then follows it
        until the process exits: `stdout {data, cursor}`, `stderr {...}`, `exit {exit_code}`."""
        params: dict[str, str] = {"follow": str(follow).lower()}
        if since is not None:
            params["since"] = str(since)
        t = self.sandbox._t
        resp = await t.send(
            "GET",
            self._p("/logs"),
            params=params,
            stream=True,
            headers={"accept": "text/event-stream"},
            timeout=_stream_timeout(t.timeout),
        )
        s: AsyncEventStream[LogEvent] = AsyncEventStream(resp, LogEvent.from_dict)
        if not follow:
            s._needs_terminal = False
        return s
