"""Retry decisions and backoff (api.md: 503 `UNAVAILABLE`/`CAPACITY_EXHAUSTED`, 504
`UPSTREAM_TIMEOUT` and 429 `RATE_LIMITED` are retryable).

A request is repeated only when repeating it is safe: GET/HEAD/PUT/DELETE (idempotent by the
contract) and the few POSTs that are idempotent (waits, session creation, ...). Non-idempotent
calls (exec, starting a process, snapshots, forks) are never repeated after an answer; any
request is repeated when the connection could not be made at all (nothing was sent).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ._errors import RETRYABLE_CODES, WarrenConnectionError, WarrenError

__all__ = ["RetryPolicy", "should_retry", "IDEMPOTENT_METHODS"]

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, bounded by attempts and a deadline.

    `deadline` (seconds) bounds the whole call including the waits; a server's
    `retry-after` is honoured when it fits in what is left.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.25
    max_backoff: float = 4.0
    multiplier: float = 2.0
    deadline: float = 30.0
    jitter: bool = True

    def backoff(self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait before attempt `attempt + 1` (attempt counts from 1)."""
        base = min(self.max_backoff, self.initial_backoff * (self.multiplier ** max(0, attempt - 1)))
        if self.jitter:
            r = (rng or random).random()
            base = base / 2 + base / 2 * r
        if retry_after is not None:
            base = max(base, retry_after)
        return base

    @classmethod
    def none(cls) -> "RetryPolicy":
        return cls(max_attempts=1)


def should_retry(
    error: BaseException,
    *,
    method: str,
    idempotent: bool | None = None,
    attempt: int,
    policy: RetryPolicy,
    elapsed: float,
    wait: float,
) -> bool:
    """Whether to send the request again after `error` (the `attempt`-th failure)."""
    if attempt >= policy.max_attempts:
        return False
    if elapsed + wait > policy.deadline:
        return False
    safe = idempotent if idempotent is not None else method.upper() in IDEMPOTENT_METHODS
    if isinstance(error, WarrenConnectionError):
        # Nothing reached the server: always safe. Otherwise only an idempotent request.
        return (not error.sent) or safe
    if isinstance(error, WarrenError):
        retryable = error.retryable or error.code in RETRYABLE_CODES
        return retryable and safe
    return False
