"""The hosted Sandbox SDK's published examples, written in Python against warren."""

import json
import re
import time

import httpx
import pytest

from conftest import new_id

import warren
from warren import get_sandbox

MAKE_REPO = r"""set -e
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
rm -rf /srv/src /srv/git && mkdir -p /srv/src /srv/git && cd /srv/src
cat > package.json <<'JSON'
{"name": "demo", "version": "1.0.0", "scripts": {"test": "node test.js"}}
JSON
cat > test.js <<'JS'
const assert = require('assert');
const add = (a, b) => a + b;
assert.strictEqual(add(2, 3), 5);
console.log('ok 1 - adds numbers');
setTimeout(() => { console.log('ok 2 - later'); console.log('2 passing'); }, 300);
JS
git init -q -b main . && git add . && git commit -qm 'demo project'
git clone -q --bare /srv/src /srv/git/demo.git
"""


def test_git_checkout_then_npm_test_streamed(sb):
    """Serve a repository with `git daemon` inside the sandbox (it cannot reach the host),
    check it out into /workspace, run its tests with streamed output."""
    assert sb.exec("bash", ["-c", MAKE_REPO]).success  # its `set -e` must not stay in the session
    daemon = sb.start_process(
        "exec git daemon --reuseaddr --base-path=/srv/git --export-all --listen=127.0.0.1 --port=9418 /srv/git",
        id="gitd",
    )
    daemon.wait_for_port(9418, timeout=20)
    head = sb.exec("git -C /srv/git/demo.git rev-parse HEAD").stdout.strip()

    repo = sb.git_checkout("git://127.0.0.1:9418/demo.git", target_dir="/workspace/demo", depth=1)
    assert (repo.target_dir, repo.branch, repo.commit) == ("/workspace/demo", "main", head)

    chunks: list[str] = []
    result = sb.exec("npm", ["test"], cwd="/workspace/demo", on_stdout=chunks.append, on_stderr=chunks.append, timeout=120)
    assert result.success, result.stdout + result.stderr
    assert "ok 1 - adds numbers" in result.stdout and "2 passing" in result.stdout
    assert len(chunks) >= 2 and "".join(chunks).count("passing") == 1

    with pytest.raises(warren.GitFailedError) as ei:
        sb.git_checkout("git://127.0.0.1:9418/nope.git")
    assert ei.value.status == 422 and ei.value.message
    assert not sb.exists("/workspace/nope")
    daemon.kill()


def test_pandas_analysis_across_two_runs(sb):
    ctx = sb.create_code_context(language="python")
    first = sb.run_code(
        "import pandas as pd\n"
        "df = pd.DataFrame({'city': ['a', 'b', 'a', 'c'], 'sales': [10, 20, 30, 40]})\n"
        "summary = df.groupby('city')['sales'].sum()\n"
        "df.describe()",
        context=ctx,
    )
    assert first.error is None, first.error
    assert "<table" in first.results[0].html and first.results[0].text
    second = sb.run_code("print(len(df))\nsummary.to_dict()", context=ctx)
    assert second.error is None and second.stdout == "4\n"
    assert second.results[0].json == {"a": 40, "b": 20, "c": 40}


DEV_SERVER = r"""
const http = require('http');
const port = 3000;
http.createServer((req, res) => {
  res.setHeader('content-type', 'text/plain');
  res.end('hello from the dev server at ' + req.url);
}).listen(port, () => {
  console.log('');
  console.log('  VITE v5.0.0  ready in 42 ms');
  console.log('');
  console.log(`  ➜  Local:   http://localhost:${port}/`);
});
"""


def test_dev_server_preview_url(w, sb):
    sb.write_file("/workspace/app/package.json", json.dumps({"name": "app", "scripts": {"dev": "node server.js"}}))
    sb.write_file("/workspace/app/server.js", DEV_SERVER)
    server = sb.start_process("npm run dev", cwd="/workspace/app", id="dev")
    ready = server.wait_for_log(re.compile(r"Local:.*localhost:(\d+)"), timeout=60)
    port = int(ready.match.group(1))
    assert port == 3000
    exposed = sb.expose_port(port, name="web")
    assert exposed.url.startswith(f"http://3000-{sb.id}-{exposed.token}.localhost:")
    # *.localhost is loopback for browsers, not for glibc: route the preview host to the node.
    with httpx.Client(transport=w.preview_transport(), timeout=20) as http:
        r = http.get(exposed.url + "some/path")
    assert r.status_code == 200 and r.text == "hello from the dev server at /some/path"
    assert [p.port for p in sb.get_exposed_ports()] == [3000]
    sb.unexpose_port(3000)
    with httpx.Client(transport=w.preview_transport(), timeout=20) as http:
        r = http.get(exposed.url)
    assert r.status_code == 404 and r.json()["code"] == "INVALID_TOKEN"
    server.kill()


@pytest.mark.deadline(30)
def test_watch_sees_an_edit_to_a_ts_file(sb):
    sb.write_file("/workspace/web/src/index.ts", "export const a = 1;\n")
    with sb.watch("/workspace/web", include="*.ts") as events:
        assert next(events).type == "watching"
        sb.exec("echo 'export const b = 2;' >> /workspace/web/src/index.ts")
        for ev in events:
            if ev.type == "modify":
                break
    assert (ev.type, ev.event_type, ev.path, ev.is_directory) == ("modify", "modify", "/workspace/web/src/index.ts", False)


def test_snapshot_then_four_forks_started_from_it(w):
    source = get_sandbox(w, new_id("snapsrc"))
    source.write_file("/workspace/state.txt", "before the snapshot\n")
    source.exec("pip --version >/dev/null 2>&1; echo built > /workspace/build.log")
    snap = source.snapshot(name="base")
    assert snap.id.startswith("snap-") and snap.sandbox == source.id and snap.origin == "user"
    source.write_file("/workspace/state.txt", "after the snapshot\n")

    forks = [w.sandbox(new_id(f"fork{i}")) for i in range(1, 5)]
    for f in forks:
        info = f.start(snapshot=snap)
        assert info.state == "running" and info.created
    for i, f in enumerate(forks, 1):
        assert f.read_file("/workspace/state.txt") == "before the snapshot\n"
        f.write_file("/workspace/mine.txt", f"fork {i}")
    assert [f.read_file("/workspace/mine.txt") for f in forks] == [f"fork {i}" for i in range(1, 5)]
    assert source.read_file("/workspace/state.txt") == "after the snapshot\n"
    # Starting the same id from the same snapshot again is idempotent.
    assert forks[0].start(snapshot=snap).created is False
    assert snap.id in [s.id for s in w.list_snapshots(sandbox=source.id)]


def test_sleep_after_and_persist_across_sessions_config(w):
    sb = w.sandbox(new_id("cfg"), sleep_after="5m", persist_across_sessions={"type": "disk"}, labels={"suite": "py"}, keep_alive=False)
    assert sb.exec("echo configured").stdout == "configured\n"
    info = sb.info()
    assert (info.sleep_after_s, info.persist, info.keep_alive, info.labels) == (300, "disk", False, {"suite": "py"})
    assert info.persist_across_sessions == {"type": "disk"}
    info = sb.update(sleep_after=90, persist_across_sessions={"type": "dirs", "dirs": ["/workspace"]})
    assert (info.sleep_after_s, info.persist) == (90, {"dirs": ["/workspace"]})
    assert sb.info().persist_across_sessions == {"type": "dirs", "dirs": ["/workspace"]}
