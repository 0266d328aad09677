import random
from datetime import timedelta

import httpx
import pytest

import warren
from warren import RetryPolicy, WarrenConnectionError, normalize_sleep_after, parse_duration, should_retry
from warren._errors import error_from_response
from warren._options import build_create_body, file_path, persist_to_api, regex_for_server

P = RetryPolicy(max_attempts=5, deadline=10)


def err(status, code):
    return error_from_response(status, f'{{"code":"{code}","message":"x"}}'.encode())


@pytest.mark.parametrize(
    "status,code,method,idem,expected",
    [
        (503, "UNAVAILABLE", "GET", None, True),
        (503, "CAPACITY_EXHAUSTED", "PUT", None, True),
        (504, "UPSTREAM_TIMEOUT", "DELETE", None, True),
        (429, "RATE_LIMITED", "GET", None, True),
        (503, "UNAVAILABLE", "POST", None, False),  # exec, start process, snapshot: never repeated
        (503, "UNAVAILABLE", "POST", True, True),  # a POST the SDK knows is idempotent (waits)
        (500, "INTERNAL", "GET", None, False),
        (404, "SANDBOX_NOT_FOUND", "GET", None, False),
        (409, "CONFLICT", "PUT", None, False),
    ],
)
def test_retry_decision(status, code, method, idem, expected):
    e = err(status, code)
    assert should_retry(e, method=method, idempotent=idem, attempt=1, policy=P, elapsed=0, wait=0.1) is expected


def test_connection_errors_retry_only_when_nothing_was_sent_or_safe():
    unsent = WarrenConnectionError("refused", sent=False)
    sent = WarrenConnectionError("reset", sent=True)
    assert should_retry(unsent, method="POST", attempt=1, policy=P, elapsed=0, wait=0.1)
    assert not should_retry(sent, method="POST", attempt=1, policy=P, elapsed=0, wait=0.1)
    assert should_retry(sent, method="GET", attempt=1, policy=P, elapsed=0, wait=0.1)


def test_attempts_and_deadline_bound_retries():
    e = err(503, "UNAVAILABLE")
    assert not should_retry(e, method="GET", attempt=5, policy=P, elapsed=0, wait=0.1)
    assert not should_retry(e, method="GET", attempt=1, policy=P, elapsed=9.95, wait=0.1)


def test_backoff_grows_exponentially_is_capped_and_honours_retry_after():
    p = RetryPolicy(initial_backoff=0.5, multiplier=2, max_backoff=3, jitter=False)
    assert [p.backoff(a) for a in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert p.backoff(1, retry_after=2.5) == 2.5
    j = RetryPolicy(initial_backoff=1, jitter=True)
    rng = random.Random(1)
    for _ in range(50):
        assert 0.5 <= j.backoff(1, rng=rng) <= 1.0


def test_transport_retries_safe_requests_and_not_exec():
    calls = {"GET": 0, "POST": 0}

    def handler(req: httpx.Request) -> httpx.Response:
        calls[req.method] += 1
        assert req.headers["authorization"] == "Bearer k"
        if calls[req.method] < 3:
            return httpx.Response(503, json={"code": "UNAVAILABLE", "message": "moving", "retryable": True})
        return httpx.Response(200, json={"entries": []}, headers={"x-request-id": "r"})

    client = httpx.Client(transport=httpx.MockTransport(handler))
    w = warren.Warren("http://node:1", "k", http_client=client, retry=RetryPolicy(initial_backoff=0.01, jitter=False))
    sb = w.sandbox("s1")
    assert sb.list_files("/workspace") == []
    assert calls["GET"] == 3
    with pytest.raises(warren.UnavailableError) as ei:
        sb.exec("echo hi")
    assert calls["POST"] == 1, "exec is not repeated"
    assert ei.value.retryable


def test_transport_gives_up_at_the_deadline():
    n = 0

    def handler(req):
        nonlocal n
        n += 1
        return httpx.Response(504, json={"code": "UPSTREAM_TIMEOUT", "message": "slow"})

    client = httpx.Client(transport=httpx.MockTransport(handler))
    w = warren.Warren("http://node:1", "k", http_client=client, retry=RetryPolicy(initial_backoff=0.05, max_attempts=100, deadline=0.3, jitter=False))
    with pytest.raises(warren.UpstreamTimeoutError):
        w.get_sandbox_info("s1")
    assert 2 <= n <= 5


def test_connect_errors_are_retried_even_for_post():
    n = 0

    def handler(req):
        nonlocal n
        n += 1
        if n == 1:
            raise httpx.ConnectError("refused", request=req)
        return httpx.Response(200, json={"exit_code": 0, "stdout": "hi\n", "stderr": "", "success": True})

    client = httpx.Client(transport=httpx.MockTransport(handler))
    w = warren.Warren("http://node:1", "k", http_client=client, retry=RetryPolicy(initial_backoff=0.01))
    assert w.sandbox("s").exec("echo hi").stdout == "hi\n"
    assert n == 2


@pytest.mark.parametrize(
    "value,secs",
    [("5m", 300), ("30s", 30), ("10m", 600), ("1h30m", 5400), ("90", 90), (45, 45), (timedelta(minutes=2), 120), ("2 hours", 7200)],
)
def test_sleep_after_parsing(value, secs):
    assert normalize_sleep_after(value) == secs


@pytest.mark.parametrize("bad", ["soon", "", "5x", 0, "0s", "31d", -1, True])
def test_sleep_after_rejects(bad):
    with pytest.raises(ValueError):
        normalize_sleep_after(bad)


def test_parse_duration_ms():
    assert parse_duration("1500ms") == 1.5


def test_create_body_maps_the_sdk_options():
    body = build_create_body(
        {
            "sleep_after": "5m",
            "keep_alive": True,
            "persist_across_sessions": {"type": "dirs", "dirs": ["/workspace"]},
            "labels": {"team": "red"},
            "instance_type": "basic",
            "env": {"A": 1},
            "region": "local",
            "egress": {"default": "deny"},
        }
    )
    assert body == {
        "sleep_after": 300,
        "keep_alive": True,
        "persist": {"dirs": ["/workspace"]},
        "labels": {"team": "red"},
        "instance_type": "basic",
        "env": {"A": "1"},
        "region": "local",
        "egress": {"default": "deny"},
    }
    assert persist_to_api({"type": "disk"}) == "disk"
    assert persist_to_api({"type": "none"}) == "none"
    assert persist_to_api(False) == "none"
    with pytest.raises(ValueError):
        persist_to_api({"type": "dirs", "dirs": []})
    with pytest.raises(TypeError):
        build_create_body({"sleepafter": "5m"})


def test_file_paths_are_encoded_but_slashes_kept():
    assert file_path("sb", "/tmp/a b#c.txt") == "/v1/sandboxes/sb/files/tmp/a%20b%23c.txt"
    assert file_path("sb", "/x/100%.txt") == "/v1/sandboxes/sb/files/x/100%25.txt"
    with pytest.raises(ValueError):
        file_path("sb", "relative")


def test_regex_flags_are_sent_inline():
    import re

    assert regex_for_server(re.compile(r"Local:.*localhost:(\d+)")) == r"Local:.*localhost:(\d+)"
    assert regex_for_server(re.compile("ready", re.I)) == "(?i)ready"


def test_config_from_env(monkeypatch):
    monkeypatch.setenv("WARREN_URL", "http://h:1/v1/")
    monkeypatch.setenv("WARREN_API_KEY", "key")
    w = warren.Warren()
    assert (w.url, w.api_key) == ("http://h:1", "key")
    monkeypatch.delenv("WARREN_API_KEY")
    with pytest.raises(warren.ConfigurationError):
        warren.Warren()


def test_preview_transport_routes_preview_hosts_to_the_node_and_keeps_host():
    seen = []

    def handler(req):
        seen.append((str(req.url), req.headers["host"]))
        return httpx.Response(200, text="ok")

    t = warren.PreviewTransport("http://127.0.0.1:7272", inner=httpx.MockTransport(handler))
    with httpx.Client(transport=t) as c:
        assert c.get("http://3000-sb-tok12345.localhost:7272/x").text == "ok"
        c.get("http://example.com/")
    assert seen[0] == ("http://127.0.0.1:7272/x", "3000-sb-tok12345.localhost:7272")
    assert seen[1][0] == "http://example.com/"


def test_generated_sync_client_is_up_to_date():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "tools" / "unasync.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.anyio
async def test_async_stream_parsing_with_a_mock_transport():
    chunks = [b'data: {"type":"start","pid":1}\n', b'\n: keepalive\n\ndata: {"type":"stdout","da', b'ta":"x\\n"}\n\ndata: {"type":"complete","exit_code":0,"duration_ms":1,"timed_out":false}\n\n']

    async def stream():
        for c in chunks:
            yield c

    def handler(req):
        assert req.headers["accept"] == "text/event-stream"
        return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        w = warren.AsyncWarren("http://node:1", "k", http_client=client)
        s = await w.sandbox("s").exec_stream("echo x")
        evs = [e async for e in s]
        assert [e.type for e in evs] == ["start", "stdout", "complete"]
        assert s.keepalives == 1
        out = []
        r = await w.sandbox("s").exec("echo x", on_stdout=out.append)
        assert (r.stdout, r.exit_code, out) == ("x\n", 0, ["x\n"])


def test_a_stream_without_its_terminal_event_raises():
    def handler(req):
        return httpx.Response(200, content=b'data: {"type":"stdout","data":"x"}\n\n')

    w = warren.Warren("http://node:1", "k", http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    s = w.sandbox("s").exec_stream("echo x")
    assert next(s).type == "stdout"
    with pytest.raises(warren.WarrenStreamError):
        next(s)


def test_options_are_applied_once_before_the_first_operation_and_after_destroy():
    import json as _json

    log = []

    def handler(req):
        log.append((req.method, req.url.path, _json.loads(req.content) if req.content else None))
        if req.method == "PUT":
            return httpx.Response(201, json={"id": "s", "state": "running", "sleep_after_s": 300, "persist": "disk"})
        if req.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(200, json={"exit_code": 0, "stdout": "", "stderr": "", "success": True})

    w = warren.Warren("http://node:1", "k", http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    sb = warren.get_sandbox(w, "s", sleep_after="5m", persist_across_sessions={"type": "disk"})
    assert log == [], "nothing is sent when the handle is made"
    sb.exec("true")
    sb.exec("true")
    sb.destroy()
    sb.exec("true")
    assert [(m, p) for m, p, _ in log] == [
        ("PUT", "/v1/sandboxes/s"),
        ("POST", "/v1/sandboxes/s/exec"),
        ("POST", "/v1/sandboxes/s/exec"),
        ("DELETE", "/v1/sandboxes/s"),
        ("PUT", "/v1/sandboxes/s"),
        ("POST", "/v1/sandboxes/s/exec"),
    ]
    assert log[0][2] == {"sleep_after": 300, "persist": "disk"}
    assert sb.last_info.created and sb.last_info.sleep_after_s == 300
