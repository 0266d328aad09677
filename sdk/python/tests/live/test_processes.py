"""Background processes: waits, kills, logs with cursors, listing."""

import re
import time

import pytest

import warren


def test_wait_for_log_with_strings_and_patterns(sb):
    p = sb.start_process("echo starting; sleep 0.5; echo 'server ready on 8080' >&2; sleep 300", id="srv")
    assert (p.id, p.status) == ("srv", "running") and p.pid > 0
    m = p.wait_for_log("ready", timeout=20)
    assert m.line == "server ready on 8080" and m.match is not None
    m = p.wait_for_log(re.compile(r"ready on (\d+)"), timeout=20)
    assert m.match.group(1) == "8080" and m.group(1) == "8080"
    assert p.wait_for_log(re.compile(r"^STA.T", re.IGNORECASE), timeout=20).line == "starting"
    with pytest.raises(warren.ReadyTimeoutError) as ei:
        p.wait_for_log("never", timeout=0.5)
    assert ei.value.status == 408
    with pytest.raises(warren.AlreadyExistsError):
        sb.start_process("sleep 1", id="srv")
    killed = p.kill()
    assert (killed.status, killed.exit_code) == ("killed", 143)
    assert p.status == "killed"
    q = sb.start_process("echo bye; exit 3", id="quitter")
    with pytest.raises(warren.ProcessExitedError) as ei:
        q.wait_for_log("never", timeout=20)
    assert ei.value.exit_code == 3


def test_wait_for_port_exit_and_the_process_list(sb):
    web = sb.start_process("sleep 0.3; exec python3 -m http.server 8123", id="web")
    assert web.wait_for_port(8123, mode="http", timeout=20).status == 200
    assert web.wait_for_port(8123, timeout=20).status is None
    with pytest.raises(warren.ReadyTimeoutError):
        web.wait_for_port(8124, timeout=0.6)
    short = sb.start_process(["bash", "-c", "sleep 0.3; exit 5"], id="short")
    assert short.wait_for_exit(timeout=20) == 5
    with pytest.raises(warren.ReadyTimeoutError):
        web.wait_for_exit(timeout=0.3)
    procs = {p.id: p for p in sb.list_processes()}
    assert procs["short"].status == "failed" and procs["short"].exit_code == 5
    assert procs["web"].status == "running"
    assert short.refresh().ended_at
    assert sb.get_process("web").command.endswith("8123")
    with pytest.raises(warren.ProcessNotFoundError):
        sb.get_process("no-such-process")
    sb.start_process("sleep 300", id="idle")
    killed = {p.id for p in sb.kill_all_processes(grace=2)}
    assert {"web", "idle"} <= killed
    assert all(p.status != "running" for p in sb.list_processes())
    # Killing an ended process returns it unchanged.
    assert sb.kill_process("idle", "KILL").status == "killed"


def test_tree_kill_escalates_after_the_grace(sb):
    p = sb.start_process("trap 'echo ignoring TERM' TERM; sleep 313 & while true; do sleep 0.2; done", id="stubborn")
    time.sleep(0.3)
    t = time.monotonic()
    info = p.kill("TERM", grace=1.0)
    assert time.monotonic() - t >= 0.9
    assert (info.status, info.exit_code) == ("killed", 137)
    assert sb.exec("pgrep -f 'sleep 313' || echo none").stdout == "none\n"


def test_logs_replay_from_a_cursor_then_follow_without_loss(sb):
    script = "for i in $(seq 1 60); do echo out-$i; echo err-$i >&2; sleep 0.02; done"
    p = sb.start_process(script, id="counter")
    p.wait_for_log("out-20", timeout=20)
    first = p.get_logs()
    assert first.stdout.startswith("out-1\n")
    out, err, exit_code, last = first.stdout, first.stderr, None, first.cursor
    with p.stream_logs(since=first.cursor) as events:
        for ev in events:
            if ev.type == "stdout":
                assert ev.cursor > last
                last = ev.cursor
                out += ev.text
            elif ev.type == "stderr":
                last = ev.cursor
                err += ev.text
            elif ev.type == "exit":
                exit_code = ev.exit_code
    assert out == "".join(f"out-{i}\n" for i in range(1, 61))
    assert err == "".join(f"err-{i}\n" for i in range(1, 61))
    assert exit_code == 0
    assert p.get_logs(since=last).stdout == ""
    replay = p.stream_logs(follow=False).collect()
    assert replay[-1].type == "exit"
    with pytest.raises(warren.InvalidArgumentError):
        p.get_logs(since=3)
    assert p.get_status() == "completed"
