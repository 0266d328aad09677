// A preview in headless Chromium (Debian's, through playwright-core): loading the token URL
// ends on the session host with no token in the address; the preview cookie is host-only,
// HttpOnly and hidden from the page's scripts; a reload and a WebSocket of the page work on
// the cookie alone, and nothing the page sends or the sandbox sees carries the token.
//   PREVIEW_URL=http://8000-id-token.localhost:7070/ TOKEN=token SESSION_HOST=8000-id.localhost \
//     node web/e2e/preview.mjs
import { chromium } from "playwright-core";

const previewUrl = process.env.PREVIEW_URL;
const token = process.env.TOKEN;
const sessionHost = process.env.SESSION_HOST;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
if (!previewUrl || !token || !sessionHost) {
  console.error("set PREVIEW_URL, TOKEN and SESSION_HOST");
  process.exit(2);
}

function check(ok, what) {
  if (!ok) throw new Error(what);
}

const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
try {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  const sent = [];
  page.on("request", (r) => sent.push(r.url()));

  await page.goto(previewUrl + "page?q=1");
  const at = new URL(page.url());
  check(at.hostname === sessionHost, `the page ended on ${page.url()}, not on ${sessionHost}`);
  check(!page.url().includes(token), `the token is still in the address: ${page.url()}`);
  check(at.search === "?q=1", `the query was not kept: ${page.url()}`);
  check((await page.textContent("#hello")).startsWith("hello from"), "the page did not load");

  const cookies = await context.cookies();
  const preview = cookies.filter((c) => c.name.startsWith("warren_preview_"));
  check(preview.length === 1, `preview cookies: ${JSON.stringify(cookies)}`);
  const [c] = preview;
  check(c.domain === sessionHost, `the cookie is not host-only: domain ${c.domain}`);
  check(c.httpOnly && c.sameSite === "Lax", `cookie flags: ${JSON.stringify(c)}`);
  check(
    !(await page.evaluate(() => document.cookie)).includes("warren_preview_"),
    "the page's scripts can read the preview cookie",
  );

  // What the page's own requests carry to the sandbox: no token, no preview cookie.
  const seen = await page.evaluate(async () => (await fetch("/allheaders")).json());
  const leaked = seen.filter(([k, v]) => v.includes("warren_preview") || k === "x-warren-preview-token");
  check(leaked.length === 0, `the sandbox saw: ${JSON.stringify(leaked)}`);
  const tokenSeen = seen.filter(([, v]) => v.includes(process.env.TOKEN));
  check(tokenSeen.length === 0, `the token reached the sandbox: ${JSON.stringify(tokenSeen)}`);

  // A WebSocket of the page, on the cookie alone.
  const echo = await page.evaluate(
    () =>
      new Promise((resolve, reject) => {
        const ws = new WebSocket(`ws://${location.host}/ws`);
        ws.onopen = () => ws.send("ping");
        ws.onmessage = (e) => resolve(e.data);
        ws.onerror = () => reject(new Error("websocket failed"));
      }),
  );
  check(echo === "echo:ping", `websocket answered ${echo}`);

  // A reload stays on the session host and loads.
  await page.reload();
  check(new URL(page.url()).hostname === sessionHost, `after reload: ${page.url()}`);
  check((await page.textContent("#hello")).startsWith("hello from"), "the reload did not load");

  // Only the first request and the exchange carried the token.
  const withToken = sent.filter((u) => u.includes(token));
  check(withToken.length === 2, `requests that carried the token: ${JSON.stringify(withToken)}`);

  // Without the cookie (another browser), the session host is refused.
  const stranger = await browser.newContext();
  const r = await (await stranger.newPage()).goto(`http://${sessionHost}:${at.port}/page`);
  check(r.status() === 404, `a stranger got ${r.status()} from the session host`);
  console.log("browser preview test passed");
} finally {
  await browser.close();
}
