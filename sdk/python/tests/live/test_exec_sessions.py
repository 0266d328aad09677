"""exec (shell and argv), streaming, timeouts, terminated shells, sessions and env."""

import time

import pytest

import warren


def test_exec_shell_and_argv(sb):
    r = sb.exec("echo out; echo err >&2; exit_code=3; (exit $exit_code)")
    assert (r.stdout, r.stderr, r.exit_code, r.success) == ("out\n", "err\n", 3, False)
    r = sb.exec("true")
    assert (r.exit_code, r.success) == (0, True)
    # argv: no shell, so nothing is expanded.
    r = sb.exec("printf", ["%s|", "a b", "$HOME", "*"])
    assert r.stdout == "a b|$HOME|*|"
    assert sb.exec(["printf", "%s", "list form"]).stdout == "list form"
    assert sb.exec("no-such-binary-here", []).exit_code == 127
    r = sb.exec("pwd; echo $X", cwd="/tmp", env={"X": "per-call"})
    assert r.stdout == "/tmp\nper-call\n"
    assert sb.exec("pwd; echo \"[$X]\"").stdout == "/workspace\n[]\n", "per-call cwd/env do not persist"


def test_exec_stdin_timeout_and_binary_output(sb):
    assert sb.exec("wc -c", stdin="hello").stdout.strip() == "5"
    assert sb.exec("od -An -tx1 | tr -d ' \\n'", stdin=b"\x00\xff\x10").stdout == "00ff10"
    t = time.monotonic()
    r = sb.exec("echo started; sleep 30", timeout=1.0)
    assert time.monotonic() - t < 15
    assert (r.exit_code, r.timed_out, r.success, r.stdout) == (124, True, False, "started\n")
    r = sb.exec("printf '\\xff\\xfe' >&2")
    assert r.stderr_bytes == b"\xff\xfe"


def test_exec_with_streamed_output(sb):
    """As the hosted SDK's example: print output as the command produces it."""
    seen: list[tuple[float, str, str]] = []
    t0 = time.monotonic()
    result = sb.exec(
        "echo one; sleep 1; echo two >&2; sleep 1; echo three",
        on_stdout=lambda chunk: seen.append((time.monotonic() - t0, "out", chunk)),
        on_stderr=lambda chunk: seen.append((time.monotonic() - t0, "err", chunk)),
    )
    end = time.monotonic() - t0
    assert result.success and result.stdout == "one\nthree\n" and result.stderr == "two\n"
    assert [(k, c) for _, k, c in seen] == [("out", "one\n"), ("err", "two\n"), ("out", "three\n")]
    assert seen[0][0] + 1.5 <= end, f"output must stream, not arrive at the end: {seen} end={end:.2f}"


def test_exec_stream_events(sb):
    with sb.exec_stream("echo a; printf '\\xff'; echo b >&2") as events:
        evs = list(events)
    assert evs[0].type == "start" and evs[0].pid
    assert evs[-1].type == "complete" and evs[-1].exit_code == 0
    assert sum(e.type in ("complete", "error") for e in evs) == 1
    out = b"".join(e.bytes for e in evs if e.type == "stdout")
    assert out == b"a\n\xff"
    assert any(e.data_base64 for e in evs if e.type == "stdout"), "non-UTF-8 bytes arrive as data_base64"
    big = sb.exec_stream("seq 1 20000").collect()
    text = "".join(e.text for e in big if e.type == "stdout")
    assert text == "".join(f"{i}\n" for i in range(1, 20001))


def test_a_shell_that_exits_is_reported_and_the_next_call_gets_a_fresh_one(sb):
    s = sb.create_session("quitter")
    s.exec("export Z=1")
    with pytest.raises(warren.SessionTerminatedError) as ei:
        s.exec("echo bye; exit 42")
    assert ei.value.exit_code == 42 and ei.value.stdout == "bye\n" and ei.value.status == 410
    assert s.exec('echo "[$Z]"').stdout == "[]\n"
    stream = s.exec_stream("exit 9")
    last = stream.collect()[-1]
    assert last.type == "error" and last.code == "SESSION_TERMINATED" and last.details["exit_code"] == 9
    with pytest.raises(warren.SessionTerminatedError):
        s.exec("exit 7", on_stdout=print)


def test_sessions_keep_their_state_apart_and_env_patches(sb):
    a = sb.create_session("sa", env={"LEVEL": "session"}, cwd="/tmp")
    assert (a.id, a.cwd) == ("sa", "/tmp")
    a.exec("cd /; export A=1; f() { echo fn-$A; }")
    assert a.exec("pwd; f; echo $LEVEL").stdout == "/\nfn-1\nsession\n"
    b = sb.create_session("sb2")
    assert b.exec('pwd; echo "[$A][$LEVEL]"').stdout == "/workspace\n[][]\n"
    assert sb.create_session("sa").id == "sa", "creating an existing session returns it"
    changed = sb.set_env_vars({"P": "v1", "Q": "q"}, session="sb2")
    assert changed == ["sb2"]
    assert b.exec("echo $P$Q").stdout == "v1q\n"
    b.set_env_vars({"Q": None})
    assert b.exec('echo "$P[$Q]"').stdout == "v1[]\n"
    b.exec("sleep 300 & echo $! > /tmp/sb2.pid")
    b.delete()
    sb.delete_session("sb2")  # idempotent
    assert sb.exec("kill -0 $(cat /tmp/sb2.pid) 2>/dev/null && echo alive || echo gone").stdout == "gone\n"
