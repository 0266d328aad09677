"""The API's resources and events as dataclasses (field names as in api.md, snake_case).

Each model keeps what the server sent in `raw`, so fields added by a newer node are not lost.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional, TypedDict, Union

__all__ = [
    "SandboxInfo",
    "Resources",
    "ExecResult",
    "ExecEvent",
    "ProcessInfo",
    "ProcessLogs",
    "LogEvent",
    "LogMatch",
    "PortReady",
    "WriteFileResult",
    "FileInfo",
    "FileEntry",
    "GitCheckoutResult",
    "SessionInfo",
    "ExposedPort",
    "WatchEvent",
    "CodeContext",
    "Result",
    "ExecutionError",
    "Logs",
    "Execution",
    "RunEvent",
    "Snapshot",
    "ForkResult",
    "TransferProgress",
    "Ticket",
    "EgressPolicy",
    "EgressRule",
    "PersistOption",
]


def _get(d: Mapping[str, Any], key: str, default: Any = None) -> Any:
    v = d.get(key, default)
    return default if v is None else v


@dataclass
class Resources:
    cpus: float
    memory_mb: int
    disk_mb: int
    pids: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Resources":
        return cls(
            cpus=float(_get(d, "cpus", 0.0)),
            memory_mb=int(_get(d, "memory_mb", 0)),
            disk_mb=int(_get(d, "disk_mb", 0)),
            pids=int(_get(d, "pids", 0)),
        )


@dataclass
class SandboxInfo:
    """The Sandbox resource (`GET /v1/sandboxes/{id}`)."""

    id: str
    state: str
    node: str
    region: str
    image: str
    resources: Resources
    labels: dict[str, str]
    persist: Any
    sleep_after_s: int
    keep_alive: bool
    isolation: str
    created_at: str
    last_active_at: str
    instance_type: Optional[str] = None
    #: True when the call that returned this created the sandbox (HTTP 201).
    created: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def persist_across_sessions(self) -> dict[str, Any]:
        """`persist` in the SDK's option form: `{"type": "disk"|"none"}` or `{"type": "dirs", "dirs": [...]}`."""
        p = self.persist
        if isinstance(p, Mapping) and "dirs" in p:
            return {"type": "dirs", "dirs": list(p["dirs"])}
        return {"type": str(p)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], created: bool = False) -> "SandboxInfo":
        return cls(
            id=str(d.get("id", "")),
            state=str(d.get("state", "")),
            node=str(d.get("node", "")),
            region=str(d.get("region", "")),
            image=str(d.get("image", "")),
            resources=Resources.from_dict(d.get("resources") or {}),
            labels=dict(d.get("labels") or {}),
            persist=d.get("persist", "disk"),
            sleep_after_s=int(_get(d, "sleep_after_s", 0)),
            keep_alive=bool(d.get("keep_alive", False)),
            isolation=str(_get(d, "isolation", "container")),
            created_at=str(_get(d, "created_at", "")),
            last_active_at=str(_get(d, "last_active_at", "")),
            instance_type=d.get("instance_type"),
            created=created,
            raw=dict(d),
        )


@dataclass
class ExecResult:
    """What `exec` returns."""

    stdout: str
    stderr: str
    exit_code: int
    success: bool
    duration_ms: int = 0
    timed_out: bool = False
    truncated: bool = False
    #: The exact bytes when the output was not valid UTF-8 (then `stdout` is a lossy rendering).
    stdout_bytes: Optional[bytes] = field(default=None, repr=False)
    stderr_bytes: Optional[bytes] = field(default=None, repr=False)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExecResult":
        ob = d.get("stdout_base64")
        eb = d.get("stderr_base64")
        return cls(
            stdout=str(_get(d, "stdout", "")),
            stderr=str(_get(d, "stderr", "")),
            exit_code=int(_get(d, "exit_code", -1)),
            success=bool(d.get("success", d.get("exit_code") == 0)),
            duration_ms=int(_get(d, "duration_ms", 0)),
            timed_out=bool(d.get("timed_out", False)),
            truncated=bool(d.get("truncated", False)),
            stdout_bytes=base64.b64decode(ob) if ob else None,
            stderr_bytes=base64.b64decode(eb) if eb else None,
            raw=dict(d),
        )


@dataclass
class ExecEvent:
    """An event of a streamed exec: `start {pid}`, `stdout {data}`, `stderr {data}`,
    `complete {exit_code, duration_ms, timed_out}` or `error {code, message, details}`."""

    type: str
    data: Optional[str] = None
    data_base64: Optional[str] = None
    pid: Optional[int] = None
    exit_code: Optional[int] = None
    duration_ms: Optional[int] = None
    timed_out: Optional[bool] = None
    code: Optional[str] = None
    message: Optional[str] = None
    details: Optional[dict[str, Any]] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def bytes(self) -> bytes:
        """The chunk's exact bytes (`data` as UTF-8, or `data_base64` decoded)."""
        if self.data is not None:
            return self.data.encode("utf-8")
        if self.data_base64:
            return base64.b64decode(self.data_base64)
        return b""

    @property
    def text(self) -> str:
        """The chunk as text (lossy when it was not UTF-8)."""
        if self.data is not None:
            return self.data
        return self.bytes.decode("utf-8", errors="replace")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExecEvent":
        return cls(
            type=str(d.get("type", "")),
            data=d.get("data"),
            data_base64=d.get("data_base64"),
            pid=d.get("pid"),
            exit_code=d.get("exit_code"),
            duration_ms=d.get("duration_ms"),
            timed_out=d.get("timed_out"),
            code=d.get("code"),
            message=d.get("message"),
            details=d.get("details"),
            raw=dict(d),
        )


@dataclass
class ProcessInfo:
    """The Process resource: `status` ∈ running|completed|failed|killed."""

    id: str
    pid: int
    command: str
    status: str
    exit_code: Optional[int]
    started_at: str
    ended_at: Optional[str]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProcessInfo":
        return cls(
            id=str(d.get("id", "")),
            pid=int(_get(d, "pid", 0)),
            command=str(_get(d, "command", "")),
            status=str(_get(d, "status", "")),
            exit_code=d.get("exit_code"),
            started_at=str(_get(d, "started_at", "")),
            ended_at=d.get("ended_at"),
            raw=dict(d),
        )


@dataclass
class ProcessLogs:
    stdout: str
    stderr: str
    cursor: int
    truncated: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProcessLogs":
        return cls(
            stdout=str(_get(d, "stdout", "")),
            stderr=str(_get(d, "stderr", "")),
            cursor=int(_get(d, "cursor", 0)),
            truncated=bool(d.get("truncated", False)),
        )


@dataclass
class LogEvent:
    """An event of a followed log: `stdout {data, cursor}`, `stderr {data, cursor}`,
    `exit {exit_code}`, `error {code, message}`."""

    type: str
    data: Optional[str] = None
    data_base64: Optional[str] = None
    cursor: Optional[int] = None
    exit_code: Optional[int] = None
    code: Optional[str] = None
    message: Optional[str] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def bytes(self) -> bytes:
        if self.data is not None:
            return self.data.encode("utf-8")
        if self.data_base64:
            return base64.b64decode(self.data_base64)
        return b""

    @property
    def text(self) -> str:
        if self.data is not None:
            return self.data
        return self.bytes.decode("utf-8", errors="replace")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LogEvent":
        return cls(
            type=str(d.get("type", "")),
            data=d.get("data"),
            data_base64=d.get("data_base64"),
            cursor=d.get("cursor"),
            exit_code=d.get("exit_code"),
            code=d.get("code"),
            message=d.get("message"),
            raw=dict(d),
        )


@dataclass
class LogMatch:
    """What `wait_for_log` returns: the whole matching `line`, and for a pattern the `re.Match`."""

    line: str
    match: Optional[re.Match[str]] = None

    def group(self, *groups: Union[int, str]) -> Any:
        if self.match is None:
            raise ValueError("no match object (the pattern did not match the line locally)")
        return self.match.group(*groups)


@dataclass
class PortReady:
    port: int
    status: Optional[int] = None


@dataclass
class WriteFileResult:
    path: str
    size: int
    sha256: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "WriteFileResult":
        return cls(path=str(d.get("path", "")), size=int(_get(d, "size", 0)), sha256=str(_get(d, "sha256", "")))


@dataclass
class FileInfo:
    """`fs/stat`: `type` ∈ file|directory|symlink|other, `mode` as four octal digits."""

    path: str
    type: str
    size: int
    mode: str
    modified_at: str

    @property
    def is_directory(self) -> bool:
        return self.type == "directory"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FileInfo":
        return cls(
            path=str(d.get("path", "")),
            type=str(d.get("type", "")),
            size=int(_get(d, "size", 0)),
            mode=str(_get(d, "mode", "")),
            modified_at=str(_get(d, "modified_at", "")),
        )


@dataclass
class FileEntry:
    """One entry of `fs/list`."""

    name: str
    path: str
    relative_path: str
    type: str
    size: int
    mode: str
    modified_at: str

    @property
    def is_directory(self) -> bool:
        return self.type == "directory"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FileEntry":
        return cls(
            name=str(d.get("name", "")),
            path=str(d.get("path", "")),
            relative_path=str(d.get("relative_path", "")),
            type=str(d.get("type", "")),
            size=int(_get(d, "size", 0)),
            mode=str(_get(d, "mode", "")),
            modified_at=str(_get(d, "modified_at", "")),
        )


@dataclass
class GitCheckoutResult:
    url: str
    branch: str
    target_dir: str
    commit: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GitCheckoutResult":
        return cls(
            url=str(d.get("url", "")),
            branch=str(_get(d, "branch", "")),
            target_dir=str(_get(d, "target_dir", "")),
            commit=str(_get(d, "commit", "")),
        )


@dataclass
class SessionInfo:
    id: str
    cwd: str


@dataclass
class ExposedPort:
    """An exposed port: its preview `url` (`http://{port}-{id}-{token}.{domain}:{port}/`)."""

    port: int
    url: str
    token: str
    name: Optional[str] = None
    public: bool = False
    """Opened without a token (`url` is then `{port}-{id}-public.{domain}`)."""

    @property
    def host(self) -> str:
        """The preview host name (with the port of the public listener, if any)."""
        from urllib.parse import urlsplit

        return urlsplit(self.url).netloc

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExposedPort":
        return cls(
            port=int(d["port"]),
            url=str(d.get("url", "")),
            token=str(d.get("token", "")),
            name=d.get("name"),
            public=bool(d.get("public", False)),
        )


WatchEventType = Literal["create", "modify", "delete", "move_from", "move_to", "attrib", "watching", "error"]


@dataclass
class WatchEvent:
    """An event of `watch`. File events have `type` = their kind (create, modify, delete,
    move_from, move_to, attrib), also in `event_type`; `watching` (the watch is live) and
    `error` (the stream ends: the watched path went away, or the queue overflowed) are
    types of their own."""

    type: str
    path: str = ""
    event_type: Optional[str] = None
    is_directory: bool = False
    timestamp: Optional[str] = None
    message: Optional[str] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_file_event(self) -> bool:
        return self.event_type is not None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "WatchEvent":
        t = str(d.get("type", ""))
        if t == "event":
            kind = str(d.get("event", ""))
            return cls(
                type=kind,
                event_type=kind,
                path=str(d.get("path", "")),
                is_directory=bool(d.get("is_dir", False)),
                timestamp=d.get("timestamp"),
                raw=dict(d),
            )
        return cls(type=t, path=str(_get(d, "path", "")), message=d.get("message"), raw=dict(d))


@dataclass
class CodeContext:
    """A code interpreter context (one kernel): `language` ∈ python|javascript|typescript."""

    id: str
    language: str
    cwd: str
    created_at: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CodeContext":
        return cls(
            id=str(d["id"]),
            language=str(_get(d, "language", "")),
            cwd=str(_get(d, "cwd", "")),
            created_at=str(_get(d, "created_at", "")),
        )


_FORMATS = ("text", "html", "markdown", "json", "png", "jpeg", "svg", "latex")


@dataclass
class Result:
    """A rich result of `run_code` (the last expression, or `display(obj)`). Images are base64."""

    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    json: Any = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    svg: Optional[str] = None
    latex: Optional[str] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def formats(self) -> list[str]:
        """The representations this result has."""
        return [f for f in _FORMATS if f in self.raw and self.raw[f] is not None]

    @property
    def png_bytes(self) -> Optional[bytes]:
        return base64.b64decode(self.png) if self.png else None

    @property
    def jpeg_bytes(self) -> Optional[bytes]:
        return base64.b64decode(self.jpeg) if self.jpeg else None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Result":
        raw = {k: v for k, v in d.items() if k != "type"}
        return cls(
            text=d.get("text"),
            html=d.get("html"),
            markdown=d.get("markdown"),
            json=d.get("json"),
            png=d.get("png"),
            jpeg=d.get("jpeg"),
            svg=d.get("svg"),
            latex=d.get("latex"),
            raw=raw,
        )


@dataclass
class ExecutionError:
    """An error raised by the code (`name` is the exception's class, e.g. `ZeroDivisionError`;
    `TimeoutError` for a run's timeout, `KernelDied` when the kernel died)."""

    name: str
    message: str
    traceback: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExecutionError":
        tb = d.get("traceback")
        if isinstance(tb, list):
            tb = "\n".join(str(x) for x in tb)
        return cls(name=str(_get(d, "name", "")), message=str(_get(d, "message", "")), traceback=str(tb or ""))


@dataclass
class Logs:
    """Output of a run, chunk by chunk as it arrived."""

    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


@dataclass
class Execution:
    """What `run_code` returns."""

    results: list[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: int = 0

    @property
    def stdout(self) -> str:
        return "".join(self.logs.stdout)

    @property
    def stderr(self) -> str:
        return "".join(self.logs.stderr)

    @property
    def text(self) -> Optional[str]:
        """The `text` of the last result that has one (the cell's value, as a notebook shows it)."""
        for r in reversed(self.results):
            if r.text is not None:
                return r.text
        return None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Execution":
        err = d.get("error")
        out = d.get("stdout") or ""
        errs = d.get("stderr") or ""
        return cls(
            results=[Result.from_dict(r) for r in d.get("results") or []],
            logs=Logs(stdout=[out] if out else [], stderr=[errs] if errs else []),
            error=ExecutionError.from_dict(err) if isinstance(err, Mapping) else None,
            execution_count=int(_get(d, "execution_count", 0)),
        )


@dataclass
class RunEvent:
    """An event of a streamed run: `stdout {text}`, `stderr {text}`, `result {...}`,
    `error {name, message, traceback[, code]}`, `complete {execution_count}`."""

    type: str
    text: Optional[str] = None
    result: Optional[Result] = None
    error: Optional[ExecutionError] = None
    #: For an `error` of the platform (not of the code): its API error code.
    code: Optional[str] = None
    execution_count: Optional[int] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RunEvent":
        t = str(d.get("type", ""))
        ev = cls(type=t, raw=dict(d))
        if t in ("stdout", "stderr"):
            ev.text = str(_get(d, "text", ""))
        elif t == "result":
            ev.result = Result.from_dict(d)
            ev.text = ev.result.text
        elif t == "error":
            ev.error = ExecutionError.from_dict(d)
            ev.code = d.get("code")
        elif t == "complete":
            ev.execution_count = int(_get(d, "execution_count", 0))
        return ev


@dataclass
class Snapshot:
    """A snapshot: `origin` ∈ user|fork|sleep|checkpoint|conflict."""

    id: str
    sandbox: str
    name: Optional[str]
    created_at: str
    size_bytes: int
    dirs: list[str]
    image: str
    origin: str
    #: Compressed bytes of its chunks (shared ones included), and those it added to the store.
    stored_bytes: int = 0
    new_bytes: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def __str__(self) -> str:
        return self.id

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Snapshot":
        return cls(
            id=str(d["id"]),
            sandbox=str(_get(d, "sandbox", "")),
            name=d.get("name"),
            created_at=str(_get(d, "created_at", "")),
            size_bytes=int(_get(d, "size_bytes", 0)),
            dirs=list(d.get("dirs") or []),
            image=str(_get(d, "image", "")),
            origin=str(_get(d, "origin", "")),
            stored_bytes=int(_get(d, "stored_bytes", 0)),
            new_bytes=int(_get(d, "new_bytes", 0)),
            raw=dict(d),
        )


@dataclass
class ForkResult:
    snapshot: Snapshot
    sandboxes: list[Any]  # list[Sandbox] or list[AsyncSandbox]


@dataclass
class TransferProgress:
    """Progress of a snapshot, restore, fork or sleep: `phase` ∈ archive|fetch|unpack."""

    phase: str
    bytes: int
    total_bytes: Optional[int] = None


@dataclass
class Ticket:
    ticket: str
    expires_at: str


class EgressRule(TypedDict, total=False):
    host: str
    methods: list[str]
    path_prefix: str
    set_headers: dict[str, str]
    remove_headers: list[str]


class EgressPolicy(TypedDict, total=False):
    """An egress policy (api.md, "Egress and credentials")."""

    default: Literal["allow", "deny"]
    allow_hosts: list[str]
    deny_hosts: list[str]
    rules: list[EgressRule]


class _PersistDisk(TypedDict):
    type: Literal["disk", "none"]


class _PersistDirs(TypedDict):
    type: Literal["dirs"]
    dirs: list[str]


#: `persist_across_sessions`: `{"type": "disk"}` (the whole filesystem survives sleep),
#: `{"type": "dirs", "dirs": [...]}`, `{"type": "none"}`; or the API's own forms.
PersistOption = Union[_PersistDisk, _PersistDirs, str, bool, Mapping[str, Any]]
