"""Watch: events with kinds, include/exclude, errors."""

import time

import pytest

import warren


def collect(stream, until, limit=10.0):
    seen = []
    deadline = time.monotonic() + limit
    for ev in stream:
        seen.append(ev)
        if until(seen) or time.monotonic() > deadline:
            break
    return seen


@pytest.mark.deadline(30)
def test_watch_reports_kinds_and_honours_globs(sb):
    sb.exec("rm -rf /workspace/w && mkdir -p /workspace/w/.git")
    with sb.watch("/workspace/w", include=["*.ts"], exclude=".git") as s:
        first = next(s)
        assert first.type == "watching" and first.path == "/workspace/w" and first.event_type is None
        sb.exec(
            "cd /workspace/w && echo a > a.ts && echo b > b.js && echo more >> a.ts "
            "&& touch .git/x.ts && mkdir -p sub/deep && echo c > sub/deep/c.ts && rm a.ts"
        )
        seen = collect(s, lambda evs: any(e.type == "delete" and e.path.endswith("/a.ts") for e in evs))
    kinds = {(e.type, e.path) for e in seen}
    assert ("create", "/workspace/w/a.ts") in kinds
    assert ("modify", "/workspace/w/a.ts") in kinds
    assert ("delete", "/workspace/w/a.ts") in kinds
    assert ("create", "/workspace/w/sub/deep/c.ts") in kinds
    assert all(e.path.endswith(".ts") and ".git" not in e.path for e in seen)
    ev = next(e for e in seen if e.type == "create")
    assert ev.event_type == "create" and ev.timestamp and ev.is_directory is False


@pytest.mark.deadline(30)
def test_watch_errors(sb):
    with pytest.raises(warren.WarrenFileNotFoundError):
        sb.watch("/nope/not/here")
    with pytest.raises(warren.InvalidArgumentError):
        sb.watch("/workspace", include="a[")
    sb.exec("mkdir -p /workspace/gone")
    with sb.watch("/workspace/gone") as s:
        next(s)
        sb.exec("rm -rf /workspace/gone")
        evs = collect(s, lambda evs: evs[-1].type == "error")
    assert evs[-1].type == "error" and evs[-1].message
