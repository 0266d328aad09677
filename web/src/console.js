// The operator's console of the web page: the sandbox list (filters, refresh, usage of the
// last 24 h, start, sleep, wake, snapshot, fork, delete), one sandbox (its processes and their
// logs, its files: browse, download, upload; its ports and snapshots), and the cluster's
// nodes. Everything a sandbox controls (file names, commands, logs, labels) is shown as text,
// never as markup: a hostile sandbox must not script the operator's page.
// Uses api(), $(), show() and signOutAndAsk() of app.js.
"use strict";

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function button(text, onClick, cls) {
  const b = el("button", text, cls);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    if (Array.isArray(c)) {
      td.className = c[1];
      if (c[0] instanceof Node) td.appendChild(c[0]);
      else td.textContent = c[0];
    } else if (c instanceof Node) td.appendChild(c);
    else td.textContent = c;
    tr.appendChild(td);
  }
  return tr;
}

// An action's outcome in the status line of the current view; 401 signs out.
async function act(statusId, what, fn) {
  $(statusId).textContent = what + "…";
  try {
    await fn();
    $(statusId).textContent = what + ": done";
    return true;
  } catch (err) {
    if (err.status === 401) signOutAndAsk();
    else $(statusId).textContent = `${what}: ${err.code || err.status || ""} ${err.message}`;
    return false;
  }
}

const enc = encodeURIComponent;

// ---- the sandbox list ------------------------------------------------------------------

let refreshTimer = null;

function stopRefresh() {
  if (refreshTimer) clearInterval(refreshTimer);
  refreshTimer = null;
}

async function listSandboxes() {
  show("sandboxes");
  stopRefresh();
  await fillSandboxes();
  if ($("auto-refresh").checked) refreshTimer = setInterval(fillSandboxes, 5000);
}

async function fillSandboxes() {
  const rows = $("sandbox-rows");
  const q = new URLSearchParams({ limit: "500" });
  if ($("filter-state").value) q.set("state", $("filter-state").value);
  if ($("filter-label").value.trim()) q.set("label", $("filter-label").value.trim());
  try {
    const list = await api("GET", "/v1/sandboxes?" + q);
    const usage = await usageBySandbox();
    rows.replaceChildren(...list.sandboxes.map((s) => sandboxRow(s, usage)));
    $("list-error").textContent = "";
    $("list-status").textContent = `${list.sandboxes.length} shown, ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    if (err.status === 401) return signOutAndAsk();
    $("list-error").textContent = "Cannot list sandboxes: " + err.message;
  }
}

function sandboxRow(s, usage) {
  const u = usage && usage.get(s.id);
  const used = (field, digits) => (!usage ? "–" : u ? u[field].toFixed(digits) : (0).toFixed(digits));
  const labels = Object.entries(s.labels || {}).map(([k, v]) => `${k}=${v}`).join(" ");
  const open = el("a", s.id);
  open.href = `#/sandbox/${enc(s.id)}`;
  const term = el("a", "terminal");
  term.href = `#/terminal/${enc(s.id)}/main`;
  const actions = el("span", null, "actions");
  const run = (what, fn) => () => act("list-status", `${what} ${s.id}`, fn).then(fillSandboxes);
  actions.append(
    term,
    button("sleep", run("sleep", () => api("POST", `/v1/sandboxes/${enc(s.id)}/sleep`))),
    button("wake", run("wake", () => api("PUT", `/v1/sandboxes/${enc(s.id)}`, {}))),
    button("snapshot", run("snapshot", () => api("POST", `/v1/sandboxes/${enc(s.id)}/snapshots`, {}))),
    button("fork", run("fork", () => api("POST", `/v1/sandboxes/${enc(s.id)}/fork`, { count: 1 }))),
    button(
      "delete",
      () => {
        if (confirm(`Delete sandbox ${s.id}? Its files are gone for good.`)) {
          run("delete", () => api("DELETE", `/v1/sandboxes/${enc(s.id)}`))();
        }
      },
      "danger",
    ),
  );
  const tr = row([
    [open, "id"],
    [s.state, "state"],
    [s.node, "node"],
    [s.region, "region"],
    [labels, "labels"],
    [used("cpu_seconds", 2), "cpu"],
    [used("memory_gib_seconds", 1), "memory"],
    [used("running_seconds", 0), "running"],
    actions,
  ]);
  tr.dataset.sandbox = s.id;
  return tr;
}

// What each sandbox used in the last 24 h, by id; null (shown as "–") when usage cannot be
// read, which leaves the list itself shown.
async function usageBySandbox() {
  try {
    const u = await api("GET", "/v1/usage?group_by=sandbox");
    $("usage-note").textContent = `Usage from ${u.from} to ${u.to}.`;
    return new Map(u.items.map((i) => [i.sandbox, i]));
  } catch (err) {
    $("usage-note").textContent = "Usage cannot be read: " + err.message;
    return null;
  }
}

$("filter-form").addEventListener("submit", (e) => {
  e.preventDefault();
  listSandboxes();
});
$("auto-refresh").addEventListener("change", listSandboxes);

$("start-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const id = $("start-id").value.trim();
  const ok = await act("list-status", `start ${id}`, () => api("PUT", `/v1/sandboxes/${enc(id)}`, {}));
  if (ok) $("start-id").value = "";
  fillSandboxes();
});

// ---- one sandbox -----------------------------------------------------------------------

let shownSandbox = null;
let filesAt = "/workspace";

async function openSandbox(id) {
  stopRefresh();
  show("sandbox-view");
  if (shownSandbox !== id) filesAt = "/workspace";
  shownSandbox = id;
  $("sandbox-title").textContent = id;
  $("sandbox-terminal").href = `#/terminal/${enc(id)}/main`;
  $("logs").textContent = "";
  try {
    const s = await api("GET", `/v1/sandboxes/${enc(id)}`);
    $("sandbox-facts").textContent =
      `${s.state} on ${s.node || "–"} (${s.region || "–"}), ${s.instance_type || ""} ${s.image || ""}`;
    await Promise.all([fillProcesses(id), fillFiles(id), fillPorts(id), fillSnapshots(id)]);
  } catch (err) {
    if (err.status === 401) return signOutAndAsk();
    $("sandbox-status").textContent = `Cannot show ${id}: ${err.message}`;
  }
}

async function fillProcesses(id) {
  const { processes } = await api("GET", `/v1/sandboxes/${enc(id)}/processes`);
  $("process-rows").replaceChildren(
    ...processes.map((p) =>
      row([
        [p.id, "process-id"],
        [p.command || (p.argv || []).join(" "), "command"],
        [p.status, "status"],
        [p.exit_code ?? "", "exit"],
        button("logs", () => showLogs(id, p.id)),
      ]),
    ),
  );
}

async function showLogs(id, pid) {
  await act("sandbox-status", `logs of ${pid}`, async () => {
    const l = await api("GET", `/v1/sandboxes/${enc(id)}/processes/${enc(pid)}/logs`);
    $("logs").textContent = `── ${pid} stdout ──\n${l.stdout}\n── ${pid} stderr ──\n${l.stderr}`;
  });
}

async function fillFiles(id) {
  $("files-path").value = filesAt;
  const q = new URLSearchParams({ path: filesAt, hidden: "true" });
  const { entries } = await api("GET", `/v1/sandboxes/${enc(id)}/fs/list?${q}`);
  const up = filesAt === "/" ? [] : [{ name: "..", type: "directory", size: "", up: true }];
  $("file-rows").replaceChildren(
    ...up.concat(entries).map((f) => {
      const target = f.up ? filesAt.replace(/\/[^/]+$/, "") || "/" : f.path;
      const name = el("a", f.type === "directory" ? f.name + "/" : f.name);
      name.href = "#";
      name.addEventListener("click", (e) => {
        e.preventDefault();
        if (f.type === "directory") {
          filesAt = target;
          fillFiles(id).catch((err) => ($("sandbox-status").textContent = err.message));
        } else {
          download(id, target, f.name);
        }
      });
      return row([[name, "file-name"], [f.type, "type"], [f.size ?? "", "size"], [f.modified_at || "", "modified"]]);
    }),
  );
}

// Downloads with the key in a header (a link cannot carry it), as a file the browser saves.
async function download(id, path, name) {
  await act("sandbox-status", `download ${path}`, async () => {
    const resp = await fetch(`/v1/sandboxes/${enc(id)}/files${path.split("/").map(enc).join("/")}`, {
      headers: { authorization: "Bearer " + apiKey() },
    });
    if (!resp.ok) throw Object.assign(new Error(resp.statusText), { status: resp.status });
    const url = URL.createObjectURL(await resp.blob());
    const a = el("a");
    a.href = url;
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  });
}

$("files-form").addEventListener("submit", (e) => {
  e.preventDefault();
  filesAt = $("files-path").value.trim() || "/workspace";
  fillFiles(shownSandbox).catch((err) => ($("sandbox-status").textContent = err.message));
});

$("upload").addEventListener("change", async () => {
  const id = shownSandbox;
  for (const file of $("upload").files) {
    const path = `${filesAt.replace(/\/$/, "")}/${file.name}`;
    await act("sandbox-status", `upload ${path}`, async () => {
      const resp = await fetch(`/v1/sandboxes/${enc(id)}/files${path.split("/").map(enc).join("/")}`, {
        method: "PUT",
        headers: { authorization: "Bearer " + apiKey(), "content-type": "application/octet-stream" },
        body: file,
      });
      if (!resp.ok) throw Object.assign(new Error((await resp.json()).message), { status: resp.status });
    });
  }
  $("upload").value = "";
  fillFiles(id);
});

async function fillPorts(id) {
  const { ports } = await api("GET", `/v1/sandboxes/${enc(id)}/ports`);
  $("port-rows").replaceChildren(
    ...ports.map((p) => {
      const a = el("a", p.url);
      a.href = p.url;
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      return row([[p.port, "port"], [p.name || "", "name"], [a, "url"], [p.public ? "public" : "token", "access"]]);
    }),
  );
}

async function fillSnapshots(id) {
  const { snapshots } = await api("GET", `/v1/snapshots?sandbox=${enc(id)}`);
  $("snapshot-rows").replaceChildren(
    ...snapshots.map((s) => row([[s.id, "snapshot-id"], [s.name || "", "name"], [s.origin, "origin"], [s.size_bytes, "size"], [s.created_at, "created"]])),
  );
}

function sandboxAction(what, fn) {
  const id = shownSandbox;
  act("sandbox-status", `${what} ${id}`, fn).then(() => openSandbox(id));
}

$("sandbox-sleep").addEventListener("click", () =>
  sandboxAction("sleep", () => api("POST", `/v1/sandboxes/${enc(shownSandbox)}/sleep`)));
$("sandbox-wake").addEventListener("click", () =>
  sandboxAction("wake", () => api("PUT", `/v1/sandboxes/${enc(shownSandbox)}`, {})));
$("sandbox-snapshot").addEventListener("click", () =>
  sandboxAction("snapshot", () => api("POST", `/v1/sandboxes/${enc(shownSandbox)}/snapshots`, {})));

// ---- the cluster -----------------------------------------------------------------------

async function openCluster() {
  stopRefresh();
  show("cluster-view");
  try {
    const c = await api("GET", "/v1/cluster");
    $("cluster-facts").textContent = `leader ${c.leader ?? "–"}, term ${c.term ?? "–"}`;
    $("node-rows").replaceChildren(
      ...(c.nodes || []).map((n) => {
        const tr = row([
          [n.id, "node-id"],
          [n.region, "region"],
          [n.state, "state"],
          [n.voter ? "voter" : "learner", "role"],
          [n.api_addr, "api"],
          [n.sandboxes ?? "", "sandboxes"],
        ]);
        tr.dataset.node = n.id;
        return tr;
      }),
    );
    $("cluster-error").textContent = "";
  } catch (err) {
    if (err.status === 401) return signOutAndAsk();
    $("cluster-error").textContent = "Cannot read the cluster: " + err.message;
  }
}

route();
