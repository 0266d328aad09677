"""Typed errors of the warren API (api.md, "Conventions": `{code, message, retryable, details}`).

Every non-2xx answer becomes a `WarrenError` subclass chosen by its `code`; an unknown code
falls back to the class of its HTTP status family. Client-side failures (the node cannot be
reached, a stream broke) are `WarrenConnectionError` / `WarrenStreamError`.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

__all__ = [
    "WarrenError",
    "ConfigurationError",
    "WarrenConnectionError",
    "WarrenTimeoutError",
    "WarrenStreamError",
    "InvalidArgumentError",
    "UnauthorizedError",
    "ForbiddenError",
    "EgressDeniedError",
    "NotFoundError",
    "SandboxNotFoundError",
    "WarrenFileNotFoundError",
    "ProcessNotFoundError",
    "ContextNotFoundError",
    "SnapshotNotFoundError",
    "InvalidTokenError",
    "ReadyTimeoutError",
    "ConflictError",
    "ProcessExitedError",
    "WarrenIsADirectoryError",
    "WarrenNotADirectoryError",
    "AlreadyExistsError",
    "SessionTerminatedError",
    "PayloadTooLargeError",
    "UnprocessableError",
    "GitFailedError",
    "UnsupportedLanguageError",
    "UpgradeRequiredError",
    "RateLimitedError",
    "ServerError",
    "InternalError",
    "BadGatewayError",
    "PortNotListeningError",
    "UnavailableError",
    "CapacityExhaustedError",
    "UpstreamTimeoutError",
    "error_from_response",
    "error_from_body",
    "RETRYABLE_CODES",
]

#: Codes the API marks retryable: the same request may be sent again unchanged.
RETRYABLE_CODES = frozenset({"UNAVAILABLE", "CAPACITY_EXHAUSTED", "UPSTREAM_TIMEOUT", "RATE_LIMITED"})


class WarrenError(Exception):
    """An error answered by a warren node (or, for the subclasses below it, by the client)."""

    #: The HTTP status this class stands for (0: not an HTTP answer).
    default_status: int = 0

    def __init__(
        self,
        message: str,
        *,
        code: str = "UNKNOWN",
        status: int | None = None,
        retryable: bool | None = None,
        details: Mapping[str, Any] | None = None,
        request_id: str | None = None,
        node: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = self.default_status if status is None else status
        self.retryable = (code in RETRYABLE_CODES) if retryable is None else retryable
        self.details: dict[str, Any] = dict(details or {})
        self.request_id = request_id
        self.node = node
        self.retry_after = retry_after

    def __str__(self) -> str:
        rid = f" (request {self.request_id})" if self.request_id else ""
        return f"{self.code} [{self.status}]: {self.message}{rid}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, status={self.status}, "
            f"message={self.message!r}, retryable={self.retryable}, details={self.details!r})"
        )


class ConfigurationError(WarrenError):
    """The client is missing its URL or API key, or was given a bad option."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="CONFIGURATION", status=0, retryable=False)


class WarrenConnectionError(WarrenError):
    """The node could not be reached, or the connection broke before an answer."""

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message, code="CONNECTION", status=0, retryable=not sent)
        #: Whether the request may have reached the server.
        self.sent = sent


class WarrenTimeoutError(WarrenConnectionError):
    """The client gave up waiting (connect, read or write timeout of httpx)."""


class WarrenStreamError(WarrenError):
    """A stream ended without its terminal event, or carried something unparseable."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="STREAM", status=0, retryable=False)


# 400
class InvalidArgumentError(WarrenError):
    default_status = 400


# 401 / 403
class UnauthorizedError(WarrenError):
    default_status = 401


class ForbiddenError(WarrenError):
    default_status = 403


class EgressDeniedError(ForbiddenError):
    """What the egress proxy answers a program in a sandbox (seen in its output, not here)."""


# 404
class NotFoundError(WarrenError):
    default_status = 404


class SandboxNotFoundError(NotFoundError):
    pass


class WarrenFileNotFoundError(NotFoundError):
    pass


class ProcessNotFoundError(NotFoundError):
    pass


class ContextNotFoundError(NotFoundError):
    pass


class SnapshotNotFoundError(NotFoundError):
    pass


class InvalidTokenError(NotFoundError):
    pass


# 408
class ReadyTimeoutError(WarrenError):
    """A wait (`wait_for_log`, `wait_for_port`, `wait_for_exit`) gave up."""

    default_status = 408


# 409
class ConflictError(WarrenError):
    default_status = 409


class ProcessExitedError(ConflictError):
    """The process ended before what was waited for happened; `exit_code` says how."""

    @property
    def exit_code(self) -> int | None:
        v = self.details.get("exit_code")
        return int(v) if isinstance(v, (int, float)) else None


class WarrenIsADirectoryError(ConflictError):
    pass


class WarrenNotADirectoryError(ConflictError):
    pass


class AlreadyExistsError(ConflictError):
    pass


# 410
class SessionTerminatedError(WarrenError):
    """The session's shell exited (`exit N`); the next call on it gets a fresh shell."""

    default_status = 410

    @property
    def exit_code(self) -> int | None:
        v = self.details.get("exit_code")
        return int(v) if isinstance(v, (int, float)) else None

    @property
    def stdout(self) -> str:
        return str(self.details.get("stdout", ""))

    @property
    def stderr(self) -> str:
        return str(self.details.get("stderr", ""))


# 413
class PayloadTooLargeError(WarrenError):
    default_status = 413


# 422
class UnprocessableError(WarrenError):
    default_status = 422


class GitFailedError(UnprocessableError):
    pass


class UnsupportedLanguageError(UnprocessableError):
    pass


# 426
class UpgradeRequiredError(WarrenError):
    default_status = 426


# 429
class RateLimitedError(WarrenError):
    default_status = 429


# 5xx
class ServerError(WarrenError):
    default_status = 500


class InternalError(ServerError):
    default_status = 500


class BadGatewayError(ServerError):
    default_status = 502


class PortNotListeningError(BadGatewayError):
    pass


class UnavailableError(ServerError):
    default_status = 503


class CapacityExhaustedError(UnavailableError):
    pass


class UpstreamTimeoutError(ServerError):
    default_status = 504


_BY_CODE: dict[str, type[WarrenError]] = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "UNAUTHORIZED": UnauthorizedError,
    "FORBIDDEN": ForbiddenError,
    "EGRESS_DENIED": EgressDeniedError,
    "SANDBOX_NOT_FOUND": SandboxNotFoundError,
    "FILE_NOT_FOUND": WarrenFileNotFoundError,
    "PROCESS_NOT_FOUND": ProcessNotFoundError,
    "CONTEXT_NOT_FOUND": ContextNotFoundError,
    "SNAPSHOT_NOT_FOUND": SnapshotNotFoundError,
    "INVALID_TOKEN": InvalidTokenError,
    "NOT_FOUND": NotFoundError,
    "READY_TIMEOUT": ReadyTimeoutError,
    "CONFLICT": ConflictError,
    "PROCESS_EXITED": ProcessExitedError,
    "IS_A_DIRECTORY": WarrenIsADirectoryError,
    "NOT_A_DIRECTORY": WarrenNotADirectoryError,
    "ALREADY_EXISTS": AlreadyExistsError,
    "SESSION_TERMINATED": SessionTerminatedError,
    "PAYLOAD_TOO_LARGE": PayloadTooLargeError,
    "GIT_FAILED": GitFailedError,
    "UNSUPPORTED_LANGUAGE": UnsupportedLanguageError,
    "UPGRADE_REQUIRED": UpgradeRequiredError,
    "RATE_LIMITED": RateLimitedError,
    "INTERNAL": InternalError,
    "PORT_NOT_LISTENING": PortNotListeningError,
    "BAD_GATEWAY": BadGatewayError,
    "UNAVAILABLE": UnavailableError,
    "CAPACITY_EXHAUSTED": CapacityExhaustedError,
    "UPSTREAM_TIMEOUT": UpstreamTimeoutError,
}

_BY_STATUS: dict[int, type[WarrenError]] = {
    400: InvalidArgumentError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    408: ReadyTimeoutError,
    409: ConflictError,
    410: SessionTerminatedError,
    413: PayloadTooLargeError,
    422: UnprocessableError,
    426: UpgradeRequiredError,
    429: RateLimitedError,
    500: InternalError,
    502: BadGatewayError,
    503: UnavailableError,
    504: UpstreamTimeoutError,
}


def _class_for(code: str, status: int) -> type[WarrenError]:
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    cls = _BY_STATUS.get(status)
    if cls is not None:
        return cls
    if status >= 500:
        return ServerError
    return WarrenError


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        secs = float(value.strip())
    except ValueError:
        return None
    return secs if secs >= 0 else None


def error_from_body(
    status: int,
    body: Mapping[str, Any] | None,
    *,
    request_id: str | None = None,
    node: str | None = None,
    retry_after: float | None = None,
    raw_text: str = "",
) -> WarrenError:
    """The typed error for an API error object (from a response body or a stream's `error`)."""
    if isinstance(body, Mapping) and isinstance(body.get("code"), str):
        code = str(body["code"])
        message = str(body.get("message", ""))
        details = body.get("details")
        # Some bodies (the egress proxy's) put extra fields beside the standard ones.
        extra = {k: v for k, v in body.items() if k not in ("code", "message", "retryable", "details", "type")}
        merged: dict[str, Any] = {}
        if isinstance(details, Mapping):
            merged.update(details)
        for k, v in extra.items():
            merged.setdefault(k, v)
        retryable = body.get("retryable")
        cls = _class_for(code, status)
        if not status:
            status = cls.default_status
        return cls(
            message,
            code=code,
            status=status,
            retryable=bool(retryable) if isinstance(retryable, bool) else None,
            details=merged,
            request_id=request_id,
            node=node,
            retry_after=retry_after,
        )
    text = raw_text.strip()[:512]
    # Not one of the API's bodies (a proxy in between?): name the status.
    code = {502: "BAD_GATEWAY", 503: "UNAVAILABLE", 504: "UPSTREAM_TIMEOUT"}.get(status, "INTERNAL" if status >= 500 else "UNKNOWN")
    cls = _class_for(code, status)
    return cls(
        f"HTTP {status}: {text}" if text else f"HTTP {status}",
        code=code,
        status=status,
        request_id=request_id,
        node=node,
        retry_after=retry_after,
    )


def error_from_response(
    status: int,
    content: bytes,
    headers: Mapping[str, str] | None = None,
) -> WarrenError:
    """The typed error of a non-2xx HTTP answer."""
    headers = headers or {}
    text = content.decode("utf-8", errors="replace")
    try:
        body = json.loads(text) if text.strip() else None
    except ValueError:
        body = None
    return error_from_body(
        status,
        body if isinstance(body, Mapping) else None,
        request_id=headers.get("x-request-id"),
        node=headers.get("x-warren-node"),
        retry_after=_parse_retry_after(headers.get("retry-after")),
        raw_text=text,
    )
