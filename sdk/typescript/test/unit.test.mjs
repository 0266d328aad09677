// Pure parts: SSE parsing, error mapping, retry decisions, durations, request mapping; and
// the retry loop against a local fake server (no warren node needed).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import {
  SSEParser,
  parseSSEStream,
  errorFromResponse,
  errorFromBody,
  WarrenError,
  FileNotFoundError,
  NotFoundError,
  SessionTerminatedError,
  ProcessExitedError,
  CapacityExhaustedError,
  UnavailableError,
  UpstreamTimeoutError,
  InternalError,
  EgressDeniedError,
  ERROR_CLASSES,
  STATUS_BY_CODE,
  backoffDelay,
  shouldRetry,
  retryAfterMs,
  parseSleepAfter,
  createRequestBody,
  normalizeExecEvent,
  normalizeWatchEvent,
  Warren,
  getSandbox,
  encodeSSE,
} from '../dist/index.js';

const enc = new TextEncoder();
const T = { timeout: 10_000 };

function streamOf(chunks) {
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(typeof ch === 'string' ? enc.encode(ch) : ch);
      c.close();
    },
  });
}

test('SSE parser: events split anywhere, CRLF, keepalives, multi-line data', T, () => {
  const wire = ': keepalive\r\n\r\ndata: {"type":"stdout","data":"h\\u00e9"}\r\n\r\ndata: {"a":\ndata: 1}\n\n: keepalive\n\ndata: {"type":"complete"}\r\r';
  const bytes = enc.encode(wire);
  // Every split point, including inside the two-byte "é" escape and inside CRLF pairs.
  for (let i = 0; i <= bytes.length; i++) {
    const p = new SSEParser();
    const items = [...p.push(bytes.slice(0, i)), ...p.push(bytes.slice(i)), ...p.end()];
    const data = items.filter((x) => x.data !== undefined).map((x) => JSON.parse(x.data));
    const comments = items.filter((x) => x.comment !== undefined).map((x) => x.comment);
    assert.deepEqual(data, [{ type: 'stdout', data: 'hé' }, { a: 1 }, { type: 'complete' }], `split at ${i}`);
    assert.deepEqual(comments, ['keepalive', 'keepalive'], `split at ${i}`);
  }
});

test('SSE parser: a multi-byte UTF-8 character split across chunks', T, () => {
  const bytes = enc.encode('data: {"d":"→ü"}\n\n');
  const p = new SSEParser();
  const out = [];
  for (const b of bytes) out.push(...p.push(new Uint8Array([b])));
  assert.equal(JSON.parse(out[0].data).d, '→ü');
});

test('parseSSEStream reads a ReadableStream and a Response, skips comments', T, async () => {
  const wire = [': keepalive\n\n', 'data: {"type":"start","pid":1}\n', '\ndata: {"type":"stdout","data_base64":"/w=="}\n\n', 'data: {"type":"complete","exit_code":0}\n\n'];
  const a = [];
  for await (const ev of parseSSEStream(streamOf(wire))) a.push(ev);
  assert.deepEqual(a.map((e) => e.type), ['start', 'stdout', 'complete']);
  const b = [];
  for await (const ev of parseSSEStream(new Response(streamOf(wire)))) b.push(ev);
  assert.deepEqual(b, a);
  // Breaking out cancels the source.
  let cancelled = false;
  const src = new ReadableStream({
    pull(c) {
      c.enqueue(enc.encode('data: {"n":1}\n\n'));
    },
    cancel() {
      cancelled = true;
    },
  });
  for await (const ev of parseSSEStream(src)) {
    assert.equal(ev.n, 1);
    break;
  }
  assert.ok(cancelled);
});

test('exec and watch events are normalized; data_base64 decodes (lossy text beside exact bytes)', T, () => {
  const out = normalizeExecEvent({ type: 'stderr', data_base64: '/w==' });
  assert.equal(out.data, '\uFFFD');
  assert.equal(out.data_base64, '/w==');
  const c = normalizeExecEvent({ type: 'complete', exit_code: 3, duration_ms: 5, timed_out: false });
  assert.equal(c.exitCode, 3);
  assert.equal(c.exit_code, 3);
  const e = normalizeExecEvent({ type: 'error', code: 'SESSION_TERMINATED', message: 'gone', details: { exit_code: 9 } });
  assert.equal(e.exitCode, 9);
  const w = normalizeWatchEvent({ type: 'event', event: 'modify', path: '/w/a.ts', is_dir: false, timestamp: 't' });
  assert.deepEqual(w, { type: 'modify', eventType: 'modify', path: '/w/a.ts', isDirectory: false, timestamp: 't' });
  assert.deepEqual(normalizeWatchEvent({ type: 'watching', path: '/w' }), { type: 'watching', path: '/w' });
  assert.equal(normalizeWatchEvent({ type: 'error', message: 'gone' }).error, 'gone');
  assert.equal(new TextDecoder().decode(encodeSSE({ a: 1 })), 'data: {"a":1}\n\n');
});

test('error bodies map to typed classes with code, status, retryable, details, requestId', T, () => {
  const h = new Headers({ 'x-request-id': 'req-1', 'x-warren-node': 'n1' });
  const e = errorFromResponse(404, JSON.stringify({ code: 'FILE_NOT_FOUND', message: 'no such file', retryable: false }), h);
  assert.ok(e instanceof FileNotFoundError && e instanceof NotFoundError && e instanceof WarrenError && e instanceof Error);
  assert.equal(e.code, 'FILE_NOT_FOUND');
  assert.equal(e.status, 404);
  assert.equal(e.retryable, false);
  assert.equal(e.requestId, 'req-1');
  assert.equal(e.node, 'n1');
  assert.equal(e.message, 'no such file');
  const s = errorFromResponse(410, JSON.stringify({ code: 'SESSION_TERMINATED', message: 'x', retryable: false, details: { exit_code: 42, stdout: 'o', stderr: '' } }));
  assert.ok(s instanceof SessionTerminatedError);
  assert.equal(s.exitCode, 42);
  assert.equal(s.stdout, 'o');
  const p = errorFromBody({ code: 'PROCESS_EXITED', message: 'ended', details: { exit_code: 3 } }, 409);
  assert.ok(p instanceof ProcessExitedError);
  assert.equal(p.exitCode, 3);
  const c = errorFromResponse(503, JSON.stringify({ code: 'CAPACITY_EXHAUSTED', message: 'full', retryable: true }));
  assert.ok(c instanceof CapacityExhaustedError && c instanceof UnavailableError);
  assert.equal(c.retryable, true);
  // Not JSON (a proxy's page): the status decides.
  const g = errorFromResponse(504, '<html>gateway timeout</html>');
  assert.ok(g instanceof UpstreamTimeoutError);
  assert.equal(g.code, 'UPSTREAM_TIMEOUT');
  assert.equal(g.retryable, true);
  assert.match(g.message, /HTTP 504: <html>/);
  const i = errorFromResponse(500, 'boom');
  assert.ok(i instanceof InternalError);
  const d = errorFromResponse(403, JSON.stringify({ code: 'EGRESS_DENIED', message: 'no', host: 'x.com', sandbox: 'sb', retryable: false }));
  assert.ok(d instanceof EgressDeniedError);
  assert.deepEqual(d.details, { host: 'x.com', sandbox: 'sb' });
  // Every code of the contract has a class whose status matches the table.
  for (const [code, status] of Object.entries(STATUS_BY_CODE)) {
    const err = errorFromBody({ code, message: 'm' });
    assert.ok(err instanceof ERROR_CLASSES[code], code);
    assert.equal(err.status, status, code);
  }
});

test('retry decisions: only repeatable requests, only retryable answers, within the deadline', T, () => {
  const base = { idempotent: true, elapsedMs: 0, delayMs: 100, retryTimeoutMs: 10_000 };
  assert.equal(shouldRetry({ ...base, status: 503 }), true);
  assert.equal(shouldRetry({ ...base, status: 504 }), true);
  assert.equal(shouldRetry({ ...base, status: 429 }), true);
  assert.equal(shouldRetry({ ...base, networkError: true }), true);
  assert.equal(shouldRetry({ ...base, status: 503, retryable: false }), false, 'the body says no');
  assert.equal(shouldRetry({ ...base, status: 500 }), false);
  assert.equal(shouldRetry({ ...base, status: 404 }), false);
  assert.equal(shouldRetry({ ...base, status: 409 }), false);
  assert.equal(shouldRetry({ ...base, idempotent: false, status: 503 }), false, 'not safe to repeat');
  assert.equal(shouldRetry({ ...base, status: 503, elapsedMs: 9_950 }), false, 'past the deadline');
  assert.equal(shouldRetry({ ...base, status: 503, retryTimeoutMs: 0 }), false, 'retries off');
  const p = { initialDelayMs: 100, maxDelayMs: 1000, multiplier: 2, jitter: 0 };
  assert.deepEqual([0, 1, 2, 3, 4, 5].map((a) => backoffDelay(a, p)), [100, 200, 400, 800, 1000, 1000]);
  const j = { ...p, jitter: 0.5 };
  assert.equal(backoffDelay(1, j, () => 0), 100);
  assert.equal(backoffDelay(1, j, () => 1), 300);
  assert.equal(retryAfterMs('2'), 2000);
  assert.equal(retryAfterMs(null), undefined);
  assert.equal(retryAfterMs(new Date(10_000).toUTCString(), 4_000), 6_000);
});

test('sleepAfter parsing', T, () => {
  assert.equal(parseSleepAfter('5m'), 300);
  assert.equal(parseSleepAfter('30s'), 30);
  assert.equal(parseSleepAfter('1h'), 3600);
  assert.equal(parseSleepAfter('1h30m'), 5400);
  assert.equal(parseSleepAfter('2 minutes'), 120);
  assert.equal(parseSleepAfter('90'), 90);
  assert.equal(parseSleepAfter(45), 45);
  for (const bad of ['', 'soon', '5x', '0s', 0, -3, '500ms', '31d', '5m later']) {
    assert.throws(() => parseSleepAfter(bad), (e) => e.code === 'INVALID_ARGUMENT', String(bad));
  }
});

test('getSandbox options map onto the create request of the API', T, () => {
  assert.deepEqual(
    createRequestBody({
      sleepAfter: '5m',
      keepAlive: true,
      persistAcrossSessions: { type: 'dirs', dirs: ['/workspace', '/data'] },
      labels: { team: 'red' },
      instanceType: 'lite',
      env: { A: '1' },
      region: 'eu',
      egress: { default: 'deny', allow_hosts: ['*.pypi.org'] },
    }),
    {
      sleep_after: 300,
      keep_alive: true,
      persist: { dirs: ['/workspace', '/data'] },
      labels: { team: 'red' },
      instance_type: 'lite',
      env: { A: '1' },
      region: 'eu',
      egress: { default: 'deny', allow_hosts: ['*.pypi.org'] },
    },
  );
  assert.deepEqual(createRequestBody({ persistAcrossSessions: { type: 'disk' } }), { persist: 'disk' });
  assert.deepEqual(createRequestBody({ persistAcrossSessions: { type: 'none' } }, 'snap-1'), { persist: 'none', from_snapshot: 'snap-1' });
  const w = new Warren({ url: 'http://127.0.0.1:1', apiKey: 'k' });
  assert.throws(() => getSandbox(w, 'Bad_Id'), (e) => e.code === 'INVALID_ARGUMENT');
  assert.equal(getSandbox(w, 'MyBox', { normalizeId: true }).id, 'mybox');
  assert.throws(() => getSandbox(w, 'ok', { sleepAfter: 'never' }), (e) => e.code === 'INVALID_ARGUMENT');
});

/** A local server answering each request with the next of `answers`. */
async function fakeServer(answers) {
  const seen = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method, url: req.url, body, auth: req.headers.authorization });
      const a = answers[Math.min(seen.length - 1, answers.length - 1)];
      res.writeHead(a.status, { 'content-type': 'application/json', 'x-request-id': `r${seen.length}`, ...(a.headers ?? {}) });
      res.end(JSON.stringify(a.body));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, seen, close: () => new Promise((r) => server.close(r)) };
}

const busy = { status: 503, body: { code: 'UNAVAILABLE', message: 'moving', retryable: true } };
const sandboxBody = { id: 'sb', state: 'running' };

test('retryable answers are retried with backoff for safe requests, never for exec', T, async () => {
  const srv = await fakeServer([busy, busy, { status: 200, body: sandboxBody }]);
  try {
    const w = new Warren({ url: srv.url, apiKey: 'k', retry: { initialDelayMs: 10, maxDelayMs: 50 } });
    const info = await getSandbox(w, 'sb').getInfo();
    assert.equal(info.id, 'sb');
    assert.equal(srv.seen.length, 3, 'two 503s, then the answer');
    assert.equal(srv.seen[0].auth, 'Bearer k');
  } finally {
    await srv.close();
  }
  const srv2 = await fakeServer([busy, { status: 200, body: {} }]);
  try {
    const w = new Warren({ url: srv2.url, apiKey: 'k', retry: { initialDelayMs: 10 } });
    await assert.rejects(getSandbox(w, 'sb').exec('echo hi'), (e) => e instanceof UnavailableError && e.requestId === 'r1');
    assert.equal(srv2.seen.length, 1, 'exec is not safe to repeat');
  } finally {
    await srv2.close();
  }
});

test('retries stop at the deadline and surface the last error', T, async () => {
  const srv = await fakeServer([{ status: 504, body: { code: 'UPSTREAM_TIMEOUT', message: 'slow', retryable: true } }]);
  try {
    const w = new Warren({ url: srv.url, apiKey: 'k', retryTimeoutMs: 300, retry: { initialDelayMs: 50, maxDelayMs: 100 } });
    const t0 = Date.now();
    await assert.rejects(getSandbox(w, 'sb').getInfo(), (e) => e instanceof UpstreamTimeoutError);
    const took = Date.now() - t0;
    assert.ok(took < 1500, `gave up within the budget (${took} ms)`);
    assert.ok(srv.seen.length >= 2 && srv.seen.length <= 6, `${srv.seen.length} attempts`);
  } finally {
    await srv.close();
  }
  const srv2 = await fakeServer([{ status: 404, body: { code: 'SANDBOX_NOT_FOUND', message: 'no', retryable: false } }]);
  try {
    const w = new Warren({ url: srv2.url, apiKey: 'k' });
    await assert.rejects(getSandbox(w, 'sb').getInfo(), (e) => e.code === 'SANDBOX_NOT_FOUND');
    assert.equal(srv2.seen.length, 1, 'a 404 is not retried');
  } finally {
    await srv2.close();
  }
});

test('a refused connection is a NetworkError (retried for safe calls until the deadline)', T, async () => {
  const w = new Warren({ url: 'http://127.0.0.1:9', apiKey: 'k', retryTimeoutMs: 200, retry: { initialDelayMs: 20 } });
  await assert.rejects(getSandbox(w, 'sb').getInfo(), (e) => e.code === 'NETWORK_ERROR' && e.status === 0);
});

test('long waits are made of server waits of at most 240 s (Node fetch stops at 300 s)', T, async () => {
  const timeout = { status: 408, body: { code: 'READY_TIMEOUT', message: 'not yet', retryable: false } };
  const srv = await fakeServer([
    { status: 200, body: { id: 'p', pid: 1, command: 'x', status: 'running', exit_code: null, started_at: '2026-01-01T00:00:00Z', ended_at: null } },
    timeout,
    timeout,
    { status: 200, body: { line: 'Local: http://localhost:3000/' } },
  ]);
  try {
    const w = new Warren({ url: srv.url, apiKey: 'k' });
    const p = await getSandbox(w, 'sb').startProcess('npm run dev');
    const r = await p.waitForLog(/localhost:(\d+)/, 600_000);
    assert.equal(r.match[1], '3000');
    const waits = srv.seen.slice(1).map((x) => JSON.parse(x.body));
    assert.equal(waits.length, 3, 'a 408 before the deadline is waited again');
    assert.ok(waits.every((b) => b.timeout_ms <= 240_000 && b.regex === 'localhost:(\\d+)'), JSON.stringify(waits));
  } finally {
    await srv.close();
  }
});
