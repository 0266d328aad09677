// The operator's console in headless Chromium (Debian's, through playwright-core): filters,
// start, a sandbox's processes with logs, its files (browse, download, upload; a hostile file
// name stays text), ports and snapshots, sleep and wake, fork and delete, the cluster's nodes.
// Exits non-zero with a message on any failure.
//   WARREN_URL=http://127.0.0.1:7070 WARREN_API_KEY=... SANDBOX=id NEW_SANDBOX=id2 node web/e2e/console.mjs
import { chromium } from "playwright-core";
import { readFile } from "node:fs/promises";

const url = process.env.WARREN_URL;
const key = process.env.WARREN_API_KEY;
const a = process.env.SANDBOX;
const b = process.env.NEW_SANDBOX;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
if (!url || !key || !a || !b) {
  console.error("set WARREN_URL, WARREN_API_KEY, SANDBOX and NEW_SANDBOX");
  process.exit(2);
}

async function api(method, path, body, raw) {
  const r = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body && !raw ? { "content-type": "application/json" } : {}) },
    body: raw ? body : body ? JSON.stringify(body) : undefined,
  });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r.status === 204 ? null : raw === "text" ? r.text() : r.headers.get("content-type")?.includes("json") ? r.json() : r.text();
}

function check(ok, what) {
  if (!ok) throw new Error(what);
}

// What the console will show, made through the API.
const hostile = "<img src=x onerror=alert(1)>.txt";
await api("PUT", `/v1/sandboxes/${a}`, { labels: { team: "alpha" } });
await api("PUT", `/v1/sandboxes/${a}/files/workspace/notes/hello.txt`, "hello from the api\n", true);
await api("PUT", `/v1/sandboxes/${a}/files/workspace/${encodeURIComponent(hostile)}`, "x", true);
await api("POST", `/v1/sandboxes/${a}/processes`, { id: "srv", command: "echo started-$((6*7)); sleep 300" });
const port = await api("POST", `/v1/sandboxes/${a}/ports`, { port: 8000 });

const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
let dialogs = 0;
try {
  const context = await browser.newContext({ acceptDownloads: true });
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  page.on("dialog", (d) => {
    dialogs += 1;
    d.accept();
  });
  await page.goto(url + "/");
  await page.fill("#api-key", key);
  await page.click("#sign-in-form button");
  const rowOf = (id) => page.locator(`#sandbox-rows tr[data-sandbox="${id}"]`);
  await rowOf(a).waitFor();
  check((await rowOf(a).locator("td.labels").textContent()) === "team=alpha", "labels not shown");

  // Filters: by label, and one that matches nothing.
  await page.fill("#filter-label", "team=alpha");
  await page.click("#filter-form button");
  await page.waitForFunction(() => document.querySelectorAll("#sandbox-rows tr").length === 1);
  await page.fill("#filter-label", "team=nobody");
  await page.click("#filter-form button");
  await page.waitForFunction(() => document.querySelectorAll("#sandbox-rows tr").length === 0);
  await page.fill("#filter-label", "");
  await page.click("#filter-form button");

  // Start a new sandbox.
  await page.fill("#start-id", b);
  await page.click("#start-form button");
  await rowOf(b).locator("td.state:text-is('running')").waitFor();

  // One sandbox: processes and logs.
  await rowOf(a).locator("td.id a").click();
  await page.waitForSelector("#sandbox-title:text-is('" + a + "')");
  const proc = page.locator("#process-rows tr", { hasText: "srv" });
  await proc.waitFor();
  await proc.locator("button").click();
  await page.waitForSelector("#logs:has-text('started-42')");

  // Files: a hostile name is text, not markup; browse into a directory; download; upload.
  const hostileRow = page.locator("#file-rows td.file-name", { hasText: "onerror" });
  await hostileRow.waitFor();
  check((await hostileRow.textContent()) === hostile, "the hostile file name was not shown as text");
  check((await page.locator("#file-rows img").count()) === 0, "a file name became markup");
  await page.locator("#file-rows a", { hasText: "notes/" }).click();
  const hello = page.locator("#file-rows a", { hasText: "hello.txt" });
  await hello.waitFor();
  const [download] = await Promise.all([page.waitForEvent("download"), hello.click()]);
  check(download.suggestedFilename() === "hello.txt", `download named ${download.suggestedFilename()}`);
  const got = await readFile(await download.path(), "utf8");
  check(got === "hello from the api\n", `downloaded ${JSON.stringify(got)}`);
  await page.setInputFiles("#upload", {
    name: "from-browser.txt",
    mimeType: "text/plain",
    buffer: Buffer.from("uploaded by the console\n"),
  });
  await page.locator("#file-rows a", { hasText: "from-browser.txt" }).waitFor();
  const uploaded = await api("GET", `/v1/sandboxes/${a}/files/workspace/notes/from-browser.txt`, undefined, "text");
  check(uploaded === "uploaded by the console\n", `uploaded ${JSON.stringify(uploaded)}`);

  // Ports and snapshots.
  await page.locator("#port-rows a", { hasText: port.url }).waitFor();
  await page.click("#sandbox-snapshot");
  await page.locator("#snapshot-rows td.origin:text-is('user')").waitFor();

  // Sleep and wake.
  await page.click("#sandbox-sleep");
  await page.waitForSelector("#sandbox-facts:has-text('sleeping')");
  await page.click("#sandbox-wake");
  await page.waitForSelector("#sandbox-facts:has-text('running')");

  // Fork from the list, then delete the fork (the confirmation is accepted).
  await page.click("#to-sandboxes");
  await rowOf(b).waitFor();
  await rowOf(b).locator("button:text-is('fork')").click();
  const fork = `${b}-fork-1`;
  await rowOf(fork).waitFor();
  await rowOf(fork).locator("button:text-is('delete')").click();
  await rowOf(fork).waitFor({ state: "detached" });
  check(dialogs === 1, `${dialogs} dialogs: only the delete's confirmation may open one`);

  // The cluster's nodes.
  await page.click("#to-cluster");
  await page.locator("#node-rows tr td.state:text-is('up')").first().waitFor();
  console.log("browser console test passed");
} catch (e) {
  console.error("browser console test failed:", e.message);
  process.exitCode = 1;
} finally {
  await browser.close();
}
