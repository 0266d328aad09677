// Background processes (waits, logs, kill) and the dev-server example: startProcess("npm run
// dev"), waitForLog(RegExp), exposePort, and a request to the preview URL.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  parseSSEStream,
  ReadyTimeoutError,
  ProcessExitedError,
  AlreadyExistsError,
  ProcessNotFoundError,
  InvalidTokenError,
} from '../dist/index.js';
import { newSandbox, fetchPreview, collect } from './helpers.mjs';

const T = { timeout: 90_000 };
const sandbox = newSandbox('proc');

const DEV_SERVER = `
const http = require('http');
const port = Number(process.env.PORT || 3000);
http.createServer((req, res) => {
  res.setHeader('content-type', 'text/plain');
  res.end('hello from the dev server at ' + req.url + ' via ' + req.headers['x-forwarded-host']);
}).listen(port, () => {
  console.log('');
  console.log('  VITE-ish dev server ready');
  console.log('  Local: http://localhost:' + port + '/');
});
`;

test('example: npm run dev, waitForLog, exposePort, fetch the preview URL', T, async () => {
  await sandbox.writeFile('/workspace/app/package.json', JSON.stringify({ name: 'app', scripts: { dev: 'node server.js' } }));
  await sandbox.writeFile('/workspace/app/server.js', DEV_SERVER);

  const server = await sandbox.startProcess('npm run dev', { cwd: '/workspace/app', id: 'dev' });
  assert.equal(server.id, 'dev');
  assert.equal(server.status, 'running');
  const log = await server.waitForLog(/Local:.*localhost:(\d+)/);
  assert.equal(log.line.trim(), 'Local: http://localhost:3000/');
  assert.equal(log.match[1], '3000');
  const port = Number(log.match[1]);
  await server.waitForPort(port);
  const { url } = await sandbox.exposePort(port);
  assert.match(url, new RegExp(`^http://3000-${sandbox.id}-[a-z0-9]+\\.localhost(:\\d+)?/$`));

  const res = await fetchPreview(url, '/hello');
  assert.equal(res.status, 200);
  assert.equal(res.body, `hello from the dev server at /hello via ${new URL(url).host}`);

  const ports = await sandbox.getExposedPorts();
  assert.deepEqual(ports.map((p) => [p.port, p.url]), [[3000, url]]);
  await sandbox.unexposePort(port);
  const gone = await fetchPreview(url);
  assert.equal(gone.status, 404);
  assert.equal(JSON.parse(gone.body).code, 'INVALID_TOKEN');
  assert.ok(new InvalidTokenError({ code: 'INVALID_TOKEN', message: '' }));
  await server.kill();
});

test('waitForLog with a string, timeouts and a process that exits first', T, async () => {
  const p = await sandbox.startProcess("echo starting; sleep 0.3; echo 'ready on 80' >&2; sleep 60");
  assert.match(p.id, /^p-/);
  const hit = await p.waitForLog('ready');
  assert.equal(hit.line, 'ready on 80');
  assert.equal(hit.match[0], 'ready');
  await assert.rejects(p.waitForLog('never', 400), (e) => e instanceof ReadyTimeoutError && e.status === 408);
  const q = await sandbox.startProcess('echo bye; exit 3');
  await assert.rejects(q.waitForLog('never', 20_000), (e) => {
    assert.ok(e instanceof ProcessExitedError);
    assert.equal(e.exitCode, 3);
    return true;
  });
  assert.deepEqual(await q.waitForExit(10_000), { exitCode: 3 });
  await q.refresh();
  assert.deepEqual([q.status, q.exitCode], ['failed', 3]);
  assert.ok(q.endTime instanceof Date);
  await assert.rejects(p.waitForExit(300), ReadyTimeoutError);
  const killed = await p.kill('TERM', { graceMs: 2000 });
  assert.deepEqual([killed.status, killed.exitCode], ['killed', 143]);
});

test('waitForPort in tcp and http modes', T, async () => {
  const web = await sandbox.startProcess(['python3', '-m', 'http.server', '8123'], { id: 'web', cwd: '/tmp' });
  assert.deepEqual(await web.waitForPort(8123, { mode: 'http', timeout: 20_000 }), { port: 8123, status: 200 });
  assert.deepEqual(await web.waitForPort(8123, { mode: 'tcp' }), { port: 8123 });
  await assert.rejects(web.waitForPort(8124, { mode: 'tcp', timeout: 500 }), ReadyTimeoutError);
  await assert.rejects(sandbox.startProcess('sleep 1', { id: 'web' }), AlreadyExistsError);
  await web.kill('KILL');
});

test('getLogs with cursors, streamLogs replays then follows to exit', T, async () => {
  const p = await sandbox.startProcess('for i in $(seq 1 40); do echo out-$i; echo err-$i >&2; sleep 0.02; done', {
    env: { UNUSED: 'x' },
  });
  await p.waitForLog('out-10');
  const first = await p.getLogs();
  assert.ok(first.stdout.startsWith('out-1\n'));
  const events = await collect(parseSSEStream(await p.streamLogs({ since: first.cursor })));
  const out = first.stdout + events.filter((e) => e.type === 'stdout').map((e) => e.data).join('');
  const err = first.stderr + events.filter((e) => e.type === 'stderr').map((e) => e.data).join('');
  const want = (k) => Array.from({ length: 40 }, (_, i) => `${k}-${i + 1}\n`).join('');
  assert.equal(out, want('out'), 'nothing lost or repeated between replay and follow');
  assert.equal(err, want('err'));
  const last = events.at(-1);
  assert.deepEqual([last.type, last.exitCode, last.processId], ['exit', 0, p.id]);
  const cursors = events.filter((e) => e.cursor !== undefined).map((e) => e.cursor);
  assert.deepEqual(cursors, [...cursors].sort((a, b) => a - b));
  const rest = await sandbox.getProcessLogs(p.id, { since: cursors.at(-1) });
  assert.deepEqual([rest.stdout, rest.stderr], ['', '']);
  // The sandbox-level stream of the same process, from the start.
  const again = await collect(parseSSEStream(await sandbox.streamProcessLogs(p.id)));
  assert.equal(again.filter((e) => e.type === 'stdout').map((e) => e.data).join(''), want('out'));
});

test('listProcesses, getProcess, killProcess, killAllProcesses', T, async () => {
  await sandbox.startProcess('sleep 120', { id: 'a' });
  await sandbox.startProcess('sleep 120', { processId: 'b' });
  const list = await sandbox.listProcesses();
  const running = list.filter((p) => p.status === 'running').map((p) => p.id);
  assert.ok(running.includes('a') && running.includes('b'), JSON.stringify(running));
  assert.equal((await sandbox.getProcess('a')).command, 'sleep 120');
  assert.equal(await sandbox.getProcess('nope'), null);
  const k = await sandbox.killProcess('a');
  assert.equal(k.status, 'killed');
  const n = await sandbox.killAllProcesses();
  assert.ok(n >= 1, `killed ${n}`);
  assert.equal((await sandbox.listProcesses()).filter((p) => p.status === 'running').length, 0);
  await assert.rejects(sandbox.killProcess('nope'), ProcessNotFoundError);
});
