"""The same groups through AsyncWarren (anyio's pytest plugin, asyncio backend)."""

import hashlib
import json
import re
import time

import anyio
import httpx
import pytest

from conftest import new_id
from test_examples import DEV_SERVER, MAKE_REPO

import warren

pytestmark = pytest.mark.anyio


@pytest.fixture
async def aw(live_env):
    async with warren.AsyncWarren(*live_env, timeout=httpx.Timeout(connect=10, read=120, write=60, pool=30)) as client:
        yield client


@pytest.fixture
def asb(aw, async_sandbox_id):
    return aw.sandbox(async_sandbox_id)


async def test_async_exec_stream_callbacks_and_errors(asb):
    r = await asb.exec("echo out; echo err >&2; (exit 3)")
    assert (r.stdout, r.stderr, r.exit_code, r.success) == ("out\n", "err\n", 3, False)
    assert (await asb.exec("printf", ["%s|", "a b", "$HOME"])).stdout == "a b|$HOME|"
    seen = []

    async def on_out(chunk):  # async callbacks are awaited
        seen.append((time.monotonic(), chunk))

    t0 = time.monotonic()
    r = await asb.exec("echo one; sleep 1; echo two", on_stdout=on_out)
    assert r.stdout == "one\ntwo\n" and [c for _, c in seen] == ["one\n", "two\n"]
    assert seen[0][0] - t0 < time.monotonic() - t0 - 0.7
    async with await asb.exec_stream("echo a; echo b >&2") as events:
        evs = [e async for e in events]
    assert [e.type for e in evs][0] == "start" and evs[-1].type == "complete"
    r = await asb.exec("sleep 10", timeout=0.5)
    assert (r.exit_code, r.timed_out) == (124, True)
    with pytest.raises(warren.SessionTerminatedError) as ei:
        await asb.exec("exit 6")
    assert ei.value.exit_code == 6


async def test_async_sessions_and_env(asb):
    s = await asb.create_session("as1", env={"A": "1"}, cwd="/tmp")
    assert (await s.exec("pwd; echo $A")).stdout == "/tmp\n1\n"
    assert await s.set_env_vars({"B": "2", "A": None}) == ["as1"]
    assert (await s.exec('echo "[$A]$B"')).stdout == "[]2\n"
    assert (await asb.exec('echo "[$B]"')).stdout == "[]\n"
    p = await s.start_process("echo in-session $B")
    assert await p.wait_for_exit(timeout=20) == 0
    assert (await p.get_logs()).stdout == "in-session 2\n"
    await s.delete()


async def test_async_files(asb):
    await asb.write_file("/workspace/af/t.txt", "héllo")
    assert await asb.read_file("/workspace/af/t.txt") == "héllo"

    async def chunks():
        for i in range(8):
            yield bytes([i]) * 200_000

    want = hashlib.sha256(b"".join(bytes([i]) * 200_000 for i in range(8))).hexdigest()
    r = await asb.write_file("/workspace/af/big.bin", chunks())
    assert (r.size, r.sha256) == (1_600_000, want)
    h = hashlib.sha256()
    async with await asb.read_file_stream("/workspace/af/big.bin") as s:
        async for part in s:
            h.update(part)
    assert h.hexdigest() == want
    assert await asb.read_file_bytes("/workspace/af/t.txt") == "héllo".encode()
    await asb.mkdir("/workspace/af/sub/dir", recursive=True)
    assert [e.name for e in await asb.list_files("/workspace/af")] == ["big.bin", "sub", "t.txt"]
    await asb.move_file("/workspace/af/t.txt", "/workspace/af/sub/t.txt")
    await asb.rename_file("/workspace/af/sub/t.txt", "u.txt")
    assert await asb.exists("/workspace/af/sub/u.txt") and not await asb.exists("/workspace/af/t.txt")
    await asb.delete_file("/workspace/af", recursive=True)
    with pytest.raises(warren.WarrenFileNotFoundError):
        await asb.read_file("/workspace/af/sub/u.txt")


async def test_async_processes(asb):
    p = await asb.start_process("echo boot; sleep 0.3; echo 'listening on port 8200'; exec python3 -m http.server 8200", id="aweb")
    m = await p.wait_for_log(re.compile(r"port (\d+)"), timeout=20)
    assert m.match.group(1) == "8200"
    assert (await p.wait_for_port(8200, mode="http", path="/", timeout=20)).status == 200
    assert p.id in [x.id for x in await asb.list_processes()]
    with pytest.raises(warren.ReadyTimeoutError):
        await p.wait_for_exit(timeout=0.3)
    info = await p.kill("TERM", grace=2)
    assert info.status == "killed" and await p.get_status() == "killed"
    q = await asb.start_process("for i in 1 2 3; do echo n$i; sleep 0.1; done", id="acount")
    out = ""
    async with await q.stream_logs() as events:
        async for ev in events:
            if ev.type == "stdout":
                out += ev.text
            last = ev
    assert out == "n1\nn2\nn3\n" and last.type == "exit" and last.exit_code == 0
    with pytest.raises(warren.ProcessExitedError):
        await q.wait_for_log("never", timeout=10)
    with pytest.raises(warren.ProcessNotFoundError):
        await asb.kill_process("no-such")
    await asb.kill_all_processes()


async def test_async_watch(asb):
    await asb.exec("mkdir -p /workspace/aw")
    async with await asb.watch("/workspace/aw", include=["*.ts"]) as events:
        first = await events.__anext__()
        assert first.type == "watching"
        await asb.exec("echo 1 > /workspace/aw/a.ts; echo 2 >> /workspace/aw/a.ts; echo x > /workspace/aw/b.js")
        seen = []
        with anyio.fail_after(15):
            async for ev in events:
                seen.append((ev.type, ev.path))
                if ev.type == "modify":
                    break
    assert ("create", "/workspace/aw/a.ts") in seen and ("modify", "/workspace/aw/a.ts") in seen
    assert all(p.endswith(".ts") for _, p in seen)


async def test_async_code_interpreter(asb):
    ctx = await asb.create_code_context("python")
    r = await asb.run_code("import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})\ndf", context=ctx)
    assert r.error is None and "<table" in r.results[0].html
    outs, results = [], []
    r = await asb.run_code("print(df.x.sum())\ndf.x.mean()", context=ctx, on_stdout=outs.append, on_result=results.append)
    assert outs == ["6\n"] and r.text == "2.0" and len(results) == 1
    async with await asb.run_code_stream("print('s')\nraise ValueError('bad')", context=ctx) as events:
        evs = [e async for e in events]
    assert [e.type for e in evs] == ["stdout", "error", "complete"]
    assert evs[1].error.name == "ValueError" and evs[1].error.message == "bad"
    assert [c.id for c in await asb.list_code_contexts()].count(ctx.id) == 1
    await asb.delete_code_context(ctx)
    with pytest.raises(warren.ContextNotFoundError):
        await asb.run_code("1", context=ctx)
    js = await asb.run_code("[1, 2].map(x => x * 2)", language="javascript")
    assert js.results[0].json == [2, 4]


async def test_async_git_and_dev_server_preview(aw, asb):
    assert (await asb.exec("bash", ["-c", MAKE_REPO])).success
    d = await asb.start_process(
        "exec git daemon --reuseaddr --base-path=/srv/git --export-all --listen=127.0.0.1 --port=9418 /srv/git", id="agitd"
    )
    await d.wait_for_port(9418, timeout=20)
    repo = await asb.git_checkout("git://127.0.0.1:9418/demo.git")
    assert repo.target_dir == "/workspace/demo"
    lines = []
    r = await asb.exec("npm", ["test"], cwd="/workspace/demo", on_stdout=lines.append, timeout=120)
    assert r.success and "2 passing" in r.stdout
    await d.kill()
    await asb.write_file("/workspace/adev/package.json", json.dumps({"scripts": {"dev": "node server.js"}}))
    await asb.write_file("/workspace/adev/server.js", DEV_SERVER)
    srv = await asb.start_process("npm run dev", cwd="/workspace/adev", id="adev")
    m = await srv.wait_for_log(re.compile(r"Local:.*localhost:(\d+)"), timeout=60)
    exposed = await asb.expose_port(int(m.group(1)))
    async with httpx.AsyncClient(transport=aw.preview_transport(), timeout=20) as http:
        resp = await http.get(exposed.url)
    assert resp.status_code == 200 and resp.text == "hello from the dev server at /"
    assert [p.port for p in await asb.get_exposed_ports()] == [3000]
    await asb.unexpose_port(3000)
    await srv.kill()


async def test_async_snapshot_restore_and_parallel_starts(aw):
    src = aw.sandbox(new_id("asnap"), sleep_after="5m", persist_across_sessions={"type": "disk"})
    await src.write_file("/workspace/s.txt", "snapshotted")
    info = await src.info()
    assert (info.sleep_after_s, info.persist) == (300, "disk")
    snap = await src.snapshot()
    await src.write_file("/workspace/s.txt", "changed")
    starts = [aw.sandbox(new_id(f"afork{i}")) for i in (1, 2)]
    async with anyio.create_task_group() as tg:
        for f in starts:
            tg.start_soon(f.start, snap)
    for f in starts:
        assert await f.read_file("/workspace/s.txt") == "snapshotted"
    await src.restore(snap)
    assert await src.read_file("/workspace/s.txt") == "snapshotted"
    slept = await src.sleep()
    assert slept.state == "sleeping"
    assert await src.read_file("/workspace/s.txt") == "snapshotted", "woken with its disk"
    for f in starts:
        await f.destroy()


async def test_async_egress_terminal_and_errors(aw, asb, live_env):
    await asb.set_egress({"default": "allow", "deny_hosts": ["blocked.example"]})
    r = await asb.exec("curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://blocked.example/")
    assert r.stdout == "403"
    assert (await asb.get_egress())["deny_hosts"] == ["blocked.example"]
    await asb.set_egress({"default": "allow"})
    t = await asb.terminal("aterm", cols=100, rows=30)
    async with t:
        await t.read_until("", timeout=20)
        await t.send("stty size; echo ok-$((2+3))\n")
        out = await t.read_until("ok-5", timeout=20)
        assert "30 100" in out
    await asb.close_terminal("aterm")
    with pytest.raises(warren.SandboxNotFoundError):
        await aw.get_sandbox_info(new_id("absent"))
    async with warren.AsyncWarren(live_env[0], "wrong") as bad:
        with pytest.raises(warren.UnauthorizedError):
            await bad.list_sandboxes()
    with pytest.raises(warren.UnsupportedLanguageError):
        await asb.create_code_context("cobol")
