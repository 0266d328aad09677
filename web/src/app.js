// The warren web page: sign in with an API key, route between the views (the console's
// sandbox list, one sandbox and the cluster are in console.js), and terminals.
// Terminals are WebSockets opened with a single-use ticket (browsers cannot set headers on
// a WebSocket); a dropped socket reconnects on its own, from the cursor of the last byte it
// showed, so nothing is printed twice and nothing is lost.
"use strict";

const KEY = "warren.api_key";
const $ = (id) => document.getElementById(id);

function apiKey() {
  return sessionStorage.getItem(KEY);
}

async function api(method, path, body) {
  const resp = await fetch(path, {
    method,
    headers: {
      authorization: "Bearer " + apiKey(),
      ...(body ? { "content-type": "application/json" } : {}),
    },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await resp.text();
  const data = text ? JSON.parse(text) : null;
  if (!resp.ok) {
    const err = new Error((data && data.message) || resp.statusText);
    err.status = resp.status;
    err.code = data && data.code;
    throw err;
  }
  return data;
}

function show(section) {
  for (const id of ["sign-in", "sandboxes", "sandbox-view", "cluster-view", "terminal-view"]) {
    $(id).hidden = id !== section;
  }
  $("sign-out").hidden = section === "sign-in";
}

// ---- sign in -------------------------------------------------------------------------

$("sign-in-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $("api-key").value.trim());
  try {
    await api("GET", "/v1/sandboxes?limit=1");
    $("sign-in-error").textContent = "";
    route();
  } catch (err) {
    sessionStorage.removeItem(KEY);
    $("sign-in-error").textContent =
      err.status === 401 ? "That API key is not valid." : "Sign-in failed: " + err.message;
  }
});

$("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  location.hash = "#/";
  route();
});

// ---- sandboxes: console.js -------------------------------------------------------------

$("open-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const id = $("open-id").value.trim();
  const name = $("open-name").value.trim() || "main";
  location.hash = `#/terminal/${encodeURIComponent(id)}/${encodeURIComponent(name)}`;
});

// ---- terminal ------------------------------------------------------------------------

let current = null;

class TerminalView {
  constructor(sandbox, name) {
    this.sandbox = sandbox;
    this.name = name;
    this.cursor = null; // bytes of output shown so far (terminal cursor)
    this.closed = false;
    this.exited = false;
    this.retry = 0;
    this.term = new Terminal({ cursorBlink: true, scrollback: 5000, convertEol: false });
    this.fit = new FitAddon.FitAddon();
    this.term.loadAddon(this.fit);
    const el = $("terminal");
    el.replaceChildren();
    this.term.open(el);
    this.fit.fit();
    this.term.onData((d) => this.send(new TextEncoder().encode(d)));
    this.term.onBinary((d) => this.send(Uint8Array.from(d, (c) => c.charCodeAt(0))));
    this.term.onResize(({ cols, rows }) => this.control({ type: "resize", cols, rows }));
    this.onWindowResize = () => this.fit.fit();
    window.addEventListener("resize", this.onWindowResize);
    this.connect();
  }

  status(text) {
    $("terminal-status").textContent = text;
  }

  send(bytes) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(bytes);
  }

  control(msg) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  async connect() {
    if (this.closed) return;
    this.status("connecting…");
    let ticket;
    try {
      ticket = await api("POST", "/v1/tickets", { sandbox: this.sandbox, scope: "terminal" });
    } catch (err) {
      if (err.status === 401) return signOutAndAsk();
      return this.reconnectLater("cannot get a ticket: " + err.message);
    }
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const q = new URLSearchParams({
      cols: this.term.cols,
      rows: this.term.rows,
      ticket: ticket.ticket,
    });
    if (this.cursor !== null) q.set("since", this.cursor);
    const url = `${proto}//${location.host}/v1/sandboxes/${encodeURIComponent(this.sandbox)}` +
      `/terminals/${encodeURIComponent(this.name)}?${q}`;
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    let replaying = true;
    ws.onmessage = (ev) => {
      if (typeof ev.data === "string") {
        const msg = JSON.parse(ev.data);
        if (msg.type === "ready") {
          replaying = false;
          this.cursor = msg.cursor;
          this.retry = 0;
          this.status("connected");
          this.term.focus();
        } else if (msg.type === "exit") {
          this.exited = true;
          this.cursor = null;
          this.status(`shell exited with ${msg.code} — press Enter for a new one`);
          const sub = this.term.onData(() => {
            sub.dispose();
            this.exited = false;
            this.term.reset();
            this.connect();
          });
        } else if (msg.type === "error") {
          this.term.write(`\r\n\x1b[31m[warren: ${msg.message}]\x1b[0m\r\n`);
        }
        return;
      }
      const bytes = new Uint8Array(ev.data);
      this.term.write(bytes);
      if (!replaying && this.cursor !== null) this.cursor += bytes.length;
    };
    ws.onclose = () => {
      if (this.ws !== ws || this.closed || this.exited) return;
      this.reconnectLater("disconnected");
    };
  }

  reconnectLater(why) {
    const delay = Math.min(8000, 250 * 2 ** this.retry++);
    this.status(`${why}; reconnecting in ${(delay / 1000).toFixed(1)} s`);
    setTimeout(() => this.connect(), delay);
  }

  close() {
    this.closed = true;
    window.removeEventListener("resize", this.onWindowResize);
    if (this.ws) this.ws.close();
    this.term.dispose();
  }
}

function openTerminal(sandbox, name) {
  show("terminal-view");
  $("terminal-title").textContent = `${sandbox} · ${name}`;
  if (current && current.sandbox === sandbox && current.name === name) return;
  if (current) current.close();
  current = new TerminalView(sandbox, name);
}

// ---- routing -------------------------------------------------------------------------

function signOutAndAsk() {
  sessionStorage.removeItem(KEY);
  route();
}

function route() {
  if (!apiKey()) {
    stopRefresh();
    if (current) current.close();
    current = null;
    show("sign-in");
    $("api-key").focus();
    return;
  }
  const m = location.hash.match(/^#\/terminal\/([^/]+)\/([^/]+)$/);
  if (m) {
    stopRefresh();
    openTerminal(decodeURIComponent(m[1]), decodeURIComponent(m[2]));
    return;
  }
  if (current) current.close();
  current = null;
  const one = location.hash.match(/^#\/sandbox\/([^/]+)$/);
  if (one) openSandbox(decodeURIComponent(one[1]));
  else if (location.hash === "#/cluster") openCluster();
  else listSandboxes();
}

window.addEventListener("hashchange", route);
fetch("/healthz")
  .then((r) => r.json())
  .then((h) => ($("node").textContent = `node ${h.node || ""}`))
  .catch(() => {});
// route() runs at the end of console.js, which loads after this script.
