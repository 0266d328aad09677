"""Snapshots, restore, fork, sleep and wake, info, destroy; errors of the API itself."""

import re

import httpx
import pytest

from conftest import RUN, new_id

import warren


def test_restore_fork_and_snapshot_catalog(w):
    sb = w.sandbox(new_id("life"))
    sb.write_file("/workspace/v.txt", "one")
    progress = []
    snap = sb.snapshot(on_progress=progress.append)
    assert progress and all(isinstance(p, warren.TransferProgress) for p in progress)
    assert w.get_snapshot(snap).id == snap.id
    sb.write_file("/workspace/v.txt", "two")
    sb.write_file("/workspace/extra.txt", "x")
    info = sb.restore(snap)
    assert info.state == "running"
    assert sb.read_file("/workspace/v.txt") == "one" and not sb.exists("/workspace/extra.txt")

    forked = sb.fork(2)
    assert [f.id for f in forked.sandboxes] == [f"{sb.id}-fork-1", f"{sb.id}-fork-2"]
    assert forked.snapshot.id.startswith("snap-")
    for f in forked.sandboxes:
        assert f.read_file("/workspace/v.txt") == "one"
        assert f.last_info.state == "running"
    with pytest.raises(warren.ConflictError):
        sb.fork(1, ids=[forked.sandboxes[0].id])

    named = sb.snapshot("named", dirs=["/workspace"])
    assert named.name == "named" and named.dirs == ["/workspace"]
    w.delete_snapshot(named)
    with pytest.raises(warren.SnapshotNotFoundError):
        w.get_snapshot(named.id)
    with pytest.raises(warren.SnapshotNotFoundError):
        sb.restore("snap-000000000000deadbeef")
    for f in forked.sandboxes:
        f.destroy()


def test_sleep_wake_and_destroy(w):
    sb = w.sandbox(new_id("sleepy"), persist_across_sessions={"type": "disk"})
    sb.write_file("/workspace/keep.txt", "kept through sleep")
    sb.start_process("sleep 300", id="lost")
    info = sb.sleep()
    assert info.state == "sleeping"
    assert w.get_sandbox_info(sb.id).state == "sleeping", "GET does not wake it"
    assert sb.read_file("/workspace/keep.txt") == "kept through sleep"
    assert sb.info().state == "running"
    # Processes do not survive sleep (the container is new).
    assert not _has_process(sb, "lost") or sb.get_process("lost").status != "running"
    assert all(p.status != "running" for p in sb.list_processes())
    sb.destroy()
    sb.destroy()  # idempotent
    with pytest.raises(warren.SandboxNotFoundError):
        sb.info()


def _has_process(sb, pid):
    try:
        sb.get_process(pid)
        return True
    except warren.ProcessNotFoundError:
        return False


def test_listing_and_api_errors(w, sb, live_env):
    ids = [s.id for s in w.list_sandboxes()]
    assert sb.id in ids
    sb.update(labels={"role": f"shared-{RUN}"})
    assert [s.id for s in w.list_sandboxes(labels={"role": f"shared-{RUN}"})] == [sb.id]
    assert len(w.list_sandboxes(limit=1)) == 1
    with pytest.raises(warren.SandboxNotFoundError) as ei:
        w.get_sandbox_info(new_id("never-made"))
    e = ei.value
    assert (e.status, e.code, e.retryable) == (404, "SANDBOX_NOT_FOUND", False) and e.request_id and e.node
    with pytest.raises(warren.InvalidArgumentError):
        w.sandbox("Not_A_Valid_ID").exec("true")
    with pytest.raises(warren.InvalidArgumentError):
        w.sandbox(new_id("badopts"), instance_type="huge").exec("true")
    with pytest.raises(warren.ConflictError):
        w.sandbox(sb.id, image="warren/other:1").start()
    url, _ = live_env
    with warren.Warren(url, "wrong-key") as bad:
        with pytest.raises(warren.UnauthorizedError) as ei:
            bad.list_sandboxes()
        assert ei.value.status == 401
    with warren.Warren("http://127.0.0.1:9", "k", retry=warren.RetryPolicy(max_attempts=2, initial_backoff=0.01)) as down:
        with pytest.raises(warren.WarrenConnectionError) as ei:
            down.health()
        assert not ei.value.sent


def test_ports_tokens_and_silent_ports(w, sb):
    exposed = sb.expose_port(9000, token="mytoken1234567890abc")
    assert exposed.token == "mytoken1234567890abc"
    assert sb.expose_port(9000).token == "mytoken1234567890abc", "exposing again keeps the token"
    with httpx.Client(transport=w.preview_transport(), timeout=20) as http:
        r = http.get(exposed.url)
        assert r.status_code == 502 and r.json()["code"] == "PORT_NOT_LISTENING"
        wrong = exposed.url.replace("mytoken1234567890abc", "wrongtoken1")
        assert http.get(wrong).json()["code"] == "INVALID_TOKEN"
    with pytest.raises(warren.InvalidArgumentError):
        sb.expose_port(0)
    sb.unexpose_port(9000)
    sb.unexpose_port(9000)
    assert 9000 not in [p.port for p in sb.get_exposed_ports()]


def test_egress_policy_applies_at_once(w):
    sb = w.sandbox(new_id("egress"), egress={"default": "deny", "allow_hosts": ["allowed.example"]})
    # An address literal: decided by the policy without any name resolution.
    r = sb.exec("curl -s --max-time 10 -w '\\n%{http_code}' http://93.184.216.34/")
    body, code = r.stdout.rsplit("\n", 1)
    assert code == "403", r.stdout
    err = warren.error_from_response(403, body.encode())
    assert isinstance(err, warren.EgressDeniedError) and err.details.get("host") == "93.184.216.34"
    assert sb.get_egress()["default"] == "deny"
    policy = sb.set_egress({"default": "allow", "deny_hosts": ["denied.example"]})
    assert policy["deny_hosts"] == ["denied.example"]
    probe = "curl -s -o /dev/null -w '%{http_code}' --max-time 20 http://denied.example/"
    assert sb.exec(probe).stdout == "403"
    sb.set_egress({"default": "allow"})
    assert sb.exec(probe).stdout != "403", "effective at once (the upstream itself may fail: 502)"


def test_terminal_resize_replay_and_exit(sb):
    t = sb.terminal("main", cols=80, rows=24)
    t.read_until("", timeout=20)
    assert t.cursor is not None
    t.send("stty size; echo size-$((40+2))\n")
    assert "24 80" in t.read_until("size-42", timeout=20)
    t.resize(120, 40)
    t.send("stty size; echo resized-$((40+3))\n")
    assert "40 120" in t.read_until("resized-43", timeout=20)
    t.send("export KEPT=kept-value; echo marker-$((6*7))\n")
    t.read_until("marker-42", timeout=20)
    t.close()
    with sb.terminal("main") as t2:
        replay = t2.read_until("", timeout=20)
        assert "marker-42" in replay
        t2.send("echo $KEPT done-$((1+1))\n")
        assert "kept-value" in t2.read_until("done-2", timeout=20)
        t2.send("exit 3\n")
        t2.read_until("never printed", timeout=20)
        assert t2.exit_code == 3
    with pytest.raises(warren.InvalidArgumentError):
        sb.terminal("main", cols=0, rows=24)
    with sb.terminal("second", cols=90, rows=20) as t3:
        t3.read_until("", timeout=20)
        names = {t["name"]: t for t in sb.list_terminals()}
        assert names["second"]["cols"] == 90 and names["second"]["attached"] >= 1
    sb.close_terminal("second")
    sb.close_terminal("second")
    ticket = sb.warren.create_ticket(sb.id, "terminal", ttl=60)
    assert ticket.ticket and ticket.expires_at
    with pytest.raises(warren.InvalidArgumentError):
        sb.warren.create_ticket(sb.id, "terminal", ttl=3600)


def test_health_and_write_only_secrets(w):
    h = w.health()
    assert h["status"] == "ok" and h["api_version"] == 1
    name = f"{RUN}-token"
    w.set_secret(name, "s3cr3t-value")
    listed = {s["name"]: s for s in w.list_secrets()}
    assert name in listed and "value" not in listed[name]
    assert "s3cr3t-value" not in repr(w.list_secrets())
    w.delete_secret(name)
    w.delete_secret(name)  # also when absent
    assert name not in {s["name"] for s in w.list_secrets()}
    with pytest.raises(warren.InvalidArgumentError):
        w.set_secret("bad name!", "v")


def test_a_tenant_key_sees_only_its_tenant_and_its_quota_holds(w, live_env):
    url, _ = live_env
    tenant = f"py-{RUN}"
    made = w.create_key(tenant, "tenant", name="sdk test")
    assert made["tenant"] == tenant and made["key"].startswith("wk_")
    scoped = warren.Warren(url, made["key"])
    try:
        mine = scoped.sandbox(new_id("tenant"))
        assert mine.exec("echo mine").stdout == "mine\n"
        theirs = w.sandbox(new_id("admin"))
        theirs.exec("true")
        seen = [s.id for s in scoped.list_sandboxes()]
        assert mine.id in seen and theirs.id not in seen
        with pytest.raises(warren.SandboxNotFoundError):
            scoped.sandbox(theirs.id).exec("true")
        view = w.set_tenant_quota(tenant, max_sandboxes=1)
        assert view["in_use"]["sandboxes"] == 1
        with pytest.raises(warren.ForbiddenError):
            scoped.sandbox(new_id("over")).exec("true")
        assert scoped.get_tenant(tenant)["quota"]["max_sandboxes"] == 1
        assert any(k["id"] == made["id"] and "key" not in k for k in w.list_keys())
        mine.destroy()
        theirs.destroy()
    finally:
        w.revoke_key(made["id"])
    with pytest.raises(warren.UnauthorizedError):
        scoped.list_sandboxes()


def test_a_join_token_made_for_a_new_node_expires_is_listed_without_its_value_and_is_revoked(w: warren.Warren) -> None:
    made = w.create_join_token(ttl_s=120, name="py-sdk")
    assert re.fullmatch(r"wjt_[0-9a-f]{16}_[0-9a-f]{64}", made["token"])
    assert made["single_use"] is True
    listed = [t for t in w.list_join_tokens() if t["id"] == made["id"]]
    assert listed and listed[0]["state"] == "valid" and "token" not in listed[0]
    w.revoke_join_token(made["id"])
    assert all(t["id"] != made["id"] for t in w.list_join_tokens())
    with pytest.raises(warren.InvalidArgumentError):
        w.create_join_token(ttl_s=0)
    assert w.set_join_policy(cluster_token=False) == {"cluster_token": False}
    assert w.get_join_policy() == {"cluster_token": False}
    assert w.set_join_policy(cluster_token=True) == {"cluster_token": True}
