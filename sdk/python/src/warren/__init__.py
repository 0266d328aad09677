"""warren: a sandbox computer for every AI agent — the Python SDK.

    from warren import Warren

    with Warren() as w:                       # WARREN_URL, WARREN_API_KEY
        sb = w.sandbox("my-agent", sleep_after="5m")
        print(sb.exec("echo hello").stdout)

`AsyncWarren` is the same API with `async`/`await`.
"""

from __future__ import annotations

from typing import Any, overload

from ._async_client import (
    AsyncEventStream,
    AsyncFileStream,
    AsyncPreviewTransport,
    AsyncProcess,
    AsyncSandbox,
    AsyncSession,
    AsyncWarren,
    AsyncWatchStream,
)
from ._duration import normalize_sleep_after, parse_duration
from ._errors import *  # noqa: F401,F403
from ._errors import __all__ as _errors_all
from ._models import *  # noqa: F401,F403
from ._models import __all__ as _models_all
from ._retry import RetryPolicy, should_retry
from ._sse import SSEDecoder, SSEEvent, parse_sse
from ._sync_client import (
    EventStream,
    FileStream,
    PreviewTransport,
    Process,
    Sandbox,
    Session,
    Warren,
    WatchStream,
)
from ._terminal import AsyncTerminal, Terminal, TerminalMessage

__version__ = "0.1.0"


@overload
def get_sandbox(warren: Warren, id: str, **options: Any) -> Sandbox: ...
@overload
def get_sandbox(warren: AsyncWarren, id: str, **options: Any) -> AsyncSandbox: ...
def get_sandbox(warren: Any, id: str, **options: Any) -> Any:
    """`warren.sandbox(id, **options)`, in the hosted Sandbox SDK's spelling (`getSandbox`)."""
    return warren.sandbox(id, **options)


__all__ = [
    "Warren",
    "AsyncWarren",
    "Sandbox",
    "AsyncSandbox",
    "Process",
    "AsyncProcess",
    "Session",
    "AsyncSession",
    "EventStream",
    "AsyncEventStream",
    "WatchStream",
    "AsyncWatchStream",
    "FileStream",
    "AsyncFileStream",
    "PreviewTransport",
    "AsyncPreviewTransport",
    "Terminal",
    "AsyncTerminal",
    "TerminalMessage",
    "get_sandbox",
    "RetryPolicy",
    "should_retry",
    "parse_duration",
    "normalize_sleep_after",
    "SSEDecoder",
    "SSEEvent",
    "parse_sse",
    *_errors_all,
    *_models_all,
]
