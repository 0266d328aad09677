"""Pure helpers shared by the sync and async clients: sandbox options, paths, regexes."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from typing import Any, Mapping, Sequence
from urllib.parse import quote

from ._duration import normalize_sleep_after
from ._errors import ConfigurationError

__all__ = [
    "DEFAULT_URL",
    "resolve_config",
    "build_create_body",
    "persist_to_api",
    "file_path",
    "regex_for_server",
    "ms",
    "CREATE_OPTIONS",
]

DEFAULT_URL = "http://127.0.0.1:7070"

#: Keyword options of `Warren.sandbox(...)` / `get_sandbox(...)`.
CREATE_OPTIONS = frozenset(
    {
        "sleep_after",
        "keep_alive",
        "persist_across_sessions",
        "persist",
        "labels",
        "instance_type",
        "resources",
        "env",
        "region",
        "egress",
        "image",
        "isolation",
        "from_snapshot",
    }
)


def resolve_config(url: str | None, api_key: str | None) -> tuple[str, str]:
    """`url`/`api_key`, else `WARREN_URL`/`WARREN_API_KEY`; a missing key is an error."""
    u = url or os.environ.get("WARREN_URL") or DEFAULT_URL
    k = api_key or os.environ.get("WARREN_API_KEY")
    if not k:
        raise ConfigurationError(
            "no API key: pass api_key= or set WARREN_API_KEY (a dev node stores it in <data_dir>/api-key)"
        )
    u = u.rstrip("/")
    if u.endswith("/v1"):
        u = u[: -len("/v1")]
    if not (u.startswith("http://") or u.startswith("https://")):
        raise ConfigurationError(f"WARREN_URL must start with http:// or https://, not {u!r}")
    return u, k


def persist_to_api(value: Any) -> Any:
    """`persist_across_sessions` → the API's `persist` (`"disk"`, `"none"`, `{"dirs": [...]}`)."""
    if value is None:
        return None
    if value is True:
        return "disk"
    if value is False:
        return "none"
    if isinstance(value, str):
        if value not in ("disk", "none"):
            raise ValueError(f"persist must be 'disk', 'none' or {{'type': 'dirs', 'dirs': [...]}}, not {value!r}")
        return value
    if isinstance(value, Mapping):
        t = value.get("type")
        if t is None and "dirs" in value:
            t = "dirs"
        if t in ("disk", "none"):
            return t
        if t == "dirs":
            dirs = value.get("dirs")
            if not dirs or isinstance(dirs, str):
                raise ValueError("persist_across_sessions {'type': 'dirs'} needs a non-empty list 'dirs'")
            return {"dirs": [str(d) for d in dirs]}
        raise ValueError(f"unknown persist type {t!r}: use 'disk', 'dirs' or 'none'")
    raise ValueError(f"invalid persist_across_sessions {value!r}")


def build_create_body(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The body of `PUT /v1/sandboxes/{id}` for the SDK's keyword options."""
    unknown = set(opts) - CREATE_OPTIONS
    if unknown:
        raise TypeError(f"unknown sandbox option(s): {', '.join(sorted(unknown))}")
    body: dict[str, Any] = {}
    for key in ("image", "instance_type", "region", "isolation", "from_snapshot"):
        if opts.get(key) is not None:
            body[key] = str(opts[key])
    if opts.get("sleep_after") is not None:
        sa = opts["sleep_after"]
        if not isinstance(sa, (str, int, float, timedelta)) or isinstance(sa, bool):
            raise ValueError(f"sleep_after must be like '5m' or seconds, not {sa!r}")
        body["sleep_after"] = normalize_sleep_after(sa)
    if opts.get("keep_alive") is not None:
        body["keep_alive"] = bool(opts["keep_alive"])
    for key in ("env", "labels"):
        if opts.get(key) is not None:
            body[key] = {str(k): str(v) for k, v in dict(opts[key]).items()}
    if opts.get("resources") is not None:
        body["resources"] = dict(opts["resources"])
    persist = opts.get("persist_across_sessions")
    if persist is None:
        persist = opts.get("persist")
    if persist is not None:
        body["persist"] = persist_to_api(persist)
    if opts.get("egress") is not None:
        body["egress"] = dict(opts["egress"])
    return body


def file_path(sandbox_id: str, path: str) -> str:
    """`/v1/sandboxes/{id}/files/{path}` with the path percent-encoded (slashes kept)."""
    if not path.startswith("/"):
        raise ValueError(f"file paths are absolute: {path!r}")
    return f"/v1/sandboxes/{sandbox_id}/files/{quote(path.lstrip('/'), safe='/')}"


_FLAG_LETTERS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"), (re.VERBOSE, "x"))


def regex_for_server(pattern: "re.Pattern[str]") -> str:
    """A Python pattern as the node's regex (Rust syntax: the common subset), flags inline."""
    flags = "".join(letter for flag, letter in _FLAG_LETTERS if pattern.flags & flag)
    src = pattern.pattern
    # Named groups: Python's (?P<name>...) is accepted by the Rust regex crate as is.
    return f"(?{flags}){src}" if flags else src


def ms(seconds: float | None) -> int | None:
    """Seconds → whole milliseconds (at least 1), for `timeout_ms` fields."""
    if seconds is None:
        return None
    if seconds <= 0:
        raise ValueError(f"timeouts are positive seconds, not {seconds!r}")
    return max(1, int(round(seconds * 1000)))


def argv_of(command: str | Sequence[str], args: Sequence[str] | None) -> tuple[str | None, list[str] | None]:
    """`exec("ls -l")` → a shell command; `exec("ls", ["-l"])` or `exec(["ls", "-l"])` → argv."""
    if isinstance(command, (list, tuple)):
        if args:
            raise TypeError("give argv as one list, or a program and its args, not both")
        return None, [str(a) for a in command]
    if args is not None:
        if isinstance(args, str):
            raise TypeError("args is a list of strings, not a string")
        return None, [str(command), *[str(a) for a in args]]
    return str(command), None
