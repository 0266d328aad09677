"""`sleep_after` and other durations: `"30s"`, `"5m"`, `"1h30m"`, `"90"` or seconds."""

from __future__ import annotations

import re
from datetime import timedelta

__all__ = ["parse_duration", "normalize_sleep_after"]

_UNITS = {
    "ms": 0.001,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*")


def parse_duration(value: str | int | float | timedelta) -> float:
    """Seconds in `value`; raises `ValueError` for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"negative duration: {value!r}")
        return float(value)
    text = str(value).strip().lower()
    if not text:
        raise ValueError("empty duration")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    pos, total = 0, 0.0
    while pos < len(text):
        m = _PART.match(text, pos)
        if not m or m.group(2) not in _UNITS:
            raise ValueError(f"invalid duration {value!r}: use e.g. \"30s\", \"5m\", \"1h30m\" or seconds")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total


def normalize_sleep_after(value: str | int | float | timedelta) -> int:
    """`sleep_after` as whole seconds (the API accepts 1 s to 30 days)."""
    secs = parse_duration(value)
    whole = int(round(secs))
    if whole < 1 or whole > 30 * 24 * 3600:
        raise ValueError(f"sleep_after must be between 1 second and 30 days, not {value!r}")
    return whole
