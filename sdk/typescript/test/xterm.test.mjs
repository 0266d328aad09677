// @warren/sandbox/xterm in headless Chromium (playwright-core, Debian's chromium): a page
// with xterm.js and SandboxAddon attaches to a sandbox terminal with a ticket its server
// fetched, types, sees the output, survives a dropped socket without printing anything
// twice, resizes, and replays after a reload.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { readFileSync, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { warren, newSandbox, WARREN_URL } from './helpers.mjs';

const T = { timeout: 120_000 };
const root = fileURLToPath(new URL('..', import.meta.url));
const chromiumPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const sandbox = newSandbox('xterm');

const PAGE = `<!doctype html>
<html><head><link rel="stylesheet" href="/xterm.css"><script src="/xterm.js"></script></head>
<body><div id="term" style="width: 800px; height: 400px"></div><div id="state">disconnected</div>
<script type="module">
import { SandboxAddon, warrenTerminalUrl } from '/addon.js';
const params = new URLSearchParams(location.search);
const term = new Terminal({ cols: 80, rows: 24 });
const states = [];
const addon = new SandboxAddon({
  // The page's own server holds the API key and hands out single-use tickets.
  getWebSocketUrl: async ({ sandboxId, name }) => {
    const { ticket } = await (await fetch('/ticket?sandbox=' + sandboxId)).json();
    return warrenTerminalUrl({ baseUrl: params.get('node'), sandboxId, name, ticket });
  },
  onStateChange: (s) => { states.push(s); document.getElementById('state').textContent = s; },
});
term.loadAddon(addon);
term.open(document.getElementById('term'));
addon.connect({ sandboxId: params.get('sandbox'), name: 'web' });
window.term = term;
window.addon = addon;
window.states = states;
window.screenText = () => {
  const b = term.buffer.active;
  const lines = [];
  for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true));
  return lines.join('\\n');
};
</script></body></html>`;

let server;
let pageUrl;

before(async () => {
  server = http.createServer(async (req, res) => {
    const u = new URL(req.url, 'http://x');
    const send = (type, body) => {
      res.writeHead(200, { 'content-type': type });
      res.end(body);
    };
    if (u.pathname === '/') return send('text/html', PAGE);
    if (u.pathname === '/xterm.js') return send('text/javascript', readFileSync(`${root}/node_modules/@xterm/xterm/lib/xterm.js`));
    if (u.pathname === '/xterm.css') return send('text/css', readFileSync(`${root}/node_modules/@xterm/xterm/css/xterm.css`));
    if (u.pathname === '/addon.js') return send('text/javascript', readFileSync(`${root}/dist/xterm/index.js`));
    if (u.pathname === '/ticket') {
      const t = await warren.createTicket(u.searchParams.get('sandbox'), 'terminal', 60);
      return send('application/json', JSON.stringify(t));
    }
    res.writeHead(404);
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  pageUrl = `http://127.0.0.1:${server.address().port}/?sandbox=${sandbox.id}&node=${encodeURIComponent(WARREN_URL)}`;
});

after(() => new Promise((r) => server.close(r)));

test('SandboxAddon: type, see output, drop the socket, resume from the cursor, reload and replay', T, async (t) => {
  if (!existsSync(chromiumPath)) {
    t.skip(`no chromium at ${chromiumPath} (set CHROMIUM)`);
    return;
  }
  const { chromium } = await import('playwright-core');
  await sandbox.exec('true'); // the sandbox exists before the page asks for a ticket
  const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(30_000);
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(pageUrl);
    await page.waitForFunction(() => document.getElementById('state').textContent === 'connected');
    await page.click('#term');
    await page.keyboard.type('echo browser-$((40+2))\n');
    await page.waitForFunction(() => window.screenText().includes('browser-42'));
    const count = () => page.evaluate(() => (window.screenText().match(/^browser-42$/gm) ?? []).length);
    assert.equal(await count(), 1);

    // A dropped socket: the addon reconnects from its cursor; nothing is written twice.
    const cursor = await page.evaluate(() => window.addon.cursor);
    assert.ok(cursor > 0, `cursor ${cursor}`);
    await page.evaluate(() => window.addon.reconnectNow());
    await page.waitForFunction(() => window.states.filter((s) => s === 'connected').length >= 2);
    assert.equal(await count(), 1, 'the replay from the cursor repeats nothing');
    await page.click('#term');
    await page.keyboard.type('X=kept; echo again-$((1+1))-$X\n');
    await page.waitForFunction(() => window.screenText().includes('again-2-kept'));

    // Resizing the xterm reaches the shell.
    await page.evaluate(() => window.term.resize(100, 30));
    await page.keyboard.type('stty size; echo sized-$((5*5))\n');
    await page.waitForFunction(() => window.screenText().includes('sized-25'));
    assert.match(await page.evaluate(() => window.screenText()), /30 100/);

    // A reload attaches a new socket: the kept output is replayed, the shell is the same.
    await page.reload();
    await page.waitForFunction(() => document.getElementById('state').textContent === 'connected');
    await page.waitForFunction(() => window.screenText().includes('again-2-kept'));
    await page.click('#term');
    await page.keyboard.type('echo still-$X-$((2+3))\n');
    await page.waitForFunction(() => window.screenText().includes('still-kept-5'));
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});
