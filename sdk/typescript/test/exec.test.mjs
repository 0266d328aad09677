// exec: results, argv, streaming (as the hosted SDK's examples do it), callbacks, sessions,
// env, timeouts and typed errors, against the live node.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseSSEStream, SessionTerminatedError, InvalidArgumentError } from '../dist/index.js';
import { newSandbox } from './helpers.mjs';

const T = { timeout: 60_000 };
const sandbox = newSandbox('exec', { env: { LEVEL: 'sandbox' } });

test('exec resolves stdout, stderr, exitCode and success', T, async () => {
  const r = await sandbox.exec('echo out; echo err >&2; (exit 3)');
  assert.equal(r.stdout, 'out\n');
  assert.equal(r.stderr, 'err\n');
  assert.equal(r.exitCode, 3);
  assert.equal(r.success, false);
  assert.equal(r.timedOut, false);
  assert.equal(typeof r.duration, 'number');
  const ok = await sandbox.exec('echo $LEVEL');
  assert.deepEqual([ok.stdout, ok.exitCode, ok.success], ['sandbox\n', 0, true], 'env given at creation');
});

test('exec(file, args) runs argv without a shell', T, async () => {
  const r = await sandbox.exec('printf', ['%s|', 'a b', '$HOME', '*']);
  assert.equal(r.stdout, 'a b|$HOME|*|');
  assert.equal(r.command, 'printf %s| a b $HOME *');
});

test('example: exec with streamed output (execStream + parseSSEStream)', T, async () => {
  const started = Date.now();
  const stream = await sandbox.execStream('echo "Building..."; sleep 1; echo "warn: slow" >&2; sleep 1; echo "Done"');
  const lines = [];
  let exitCode;
  const times = {};
  for await (const event of parseSSEStream(stream)) {
    switch (event.type) {
      case 'stdout':
      case 'stderr':
        lines.push(`[${event.type}] ${event.data.trim()}`);
        times[event.data.trim()] = Date.now() - started;
        break;
      case 'complete':
        exitCode = event.exitCode;
        times.complete = Date.now() - started;
        break;
      case 'error':
        assert.fail(`exec failed: ${event.error}`);
    }
  }
  assert.deepEqual(lines, ['[stdout] Building...', '[stderr] warn: slow', '[stdout] Done']);
  assert.equal(exitCode, 0);
  assert.ok(times.complete - times['Building...'] >= 1500, `output streamed as it happened: ${JSON.stringify(times)}`);
});

test('exec with {stream: true} returns the SSE stream; it can be a Response body as is', T, async () => {
  const stream = await sandbox.exec('seq 1 3', { stream: true });
  assert.ok(stream instanceof ReadableStream);
  // What a server handler would do: hand the stream to the client untouched.
  const resp = new Response(stream, { headers: { 'content-type': 'text/event-stream' } });
  const text = await resp.text();
  assert.match(text, /^data: \{"type":"start"/);
  const events = [];
  for await (const ev of parseSSEStream(new Response(text))) events.push(ev);
  assert.equal(events.filter((e) => e.type === 'stdout').map((e) => e.data).join(''), '1\n2\n3\n');
  assert.equal(events.at(-1).type, 'complete');
  assert.equal(events.filter((e) => e.type === 'complete' || e.type === 'error').length, 1);
});

test('output callbacks see chunks as they come and the result is whole', T, async () => {
  const seen = [];
  let completed = null;
  const r = await sandbox.exec('echo one; echo two >&2; printf "\\xff\\xfe"', {
    onComplete: (res) => (completed = res),
    onOutput: (stream, data) => seen.push([stream, data]),
    onStdout: (d) => seen.push(['out', d]),
    onStderr: (d) => seen.push(['err', d]),
  });
  assert.ok(seen.some(([s, d]) => s === 'stdout' && d.includes('one')), JSON.stringify(seen));
  assert.ok(seen.some(([s, d]) => s === 'err' && d === 'two\n'), JSON.stringify(seen));
  assert.equal(r.stderr, 'two\n');
  assert.equal(r.exitCode, 0);
  assert.equal(completed, r, 'onComplete gets the result');
  assert.ok(r.stdoutBase64, 'stdout was not UTF-8: its exact bytes are given');
  assert.equal(Buffer.from(r.stdoutBase64, 'base64').toString('hex'), '6f6e650afffe');
  assert.equal(r.stdout, 'one\n\uFFFD\uFFFD');
});

test('sessions keep their own cwd and env; per-call env and cwd do not leak', T, async () => {
  await sandbox.exec('cd /tmp && export KEPT=1');
  assert.equal((await sandbox.exec('pwd; echo $KEPT')).stdout, '/tmp\n1\n');
  const s = await sandbox.createSession({ id: 'other', env: { LEVEL: 'session' }, cwd: '/' });
  assert.equal(s.id, 'other');
  assert.ok((await sandbox.listSessions()).some((x) => x.id === 'other'));
  assert.equal((await s.exec('pwd; echo $LEVEL $KEPT')).stdout, '/\nsession\n');
  assert.equal((await s.exec('echo $LEVEL', { env: { LEVEL: 'call' }, cwd: '/usr' })).stdout, 'call\n');
  assert.equal((await s.exec('echo $LEVEL; pwd')).stdout, 'session\n/\n');
  await sandbox.setEnvVars({ FROM_PATCH: 'yes' });
  assert.equal((await sandbox.exec('echo $FROM_PATCH')).stdout, 'yes\n');
  await sandbox.setEnvVars({ FROM_PATCH: undefined });
  assert.equal((await sandbox.exec('echo "[$FROM_PATCH]"')).stdout, '[]\n');
  await s.delete();
});

test('stdin, timeouts, and a shell that exits', T, async () => {
  assert.equal((await sandbox.exec('wc -c', { stdin: 'hello' })).stdout.trim(), '5');
  assert.equal((await sandbox.exec('od -An -tx1 | tr -d " \\n"', { stdin: new Uint8Array([0, 255, 16]) })).stdout, '00ff10');
  const t = await sandbox.exec('echo started; sleep 30', { timeout: 800 });
  assert.deepEqual([t.exitCode, t.timedOut, t.success, t.stdout], [124, true, false, 'started\n']);
  await assert.rejects(sandbox.exec('echo bye; exit 42', { sessionId: 'quitter' }), (e) => {
    assert.ok(e instanceof SessionTerminatedError, e.name);
    assert.equal(e.status, 410);
    assert.equal(e.exitCode, 42);
    assert.equal(e.stdout, 'bye\n');
    assert.ok(e.requestId, 'request id of the answer');
    return true;
  });
  // With a short timeout the call is answered in JSON mode: the same error, the same fields.
  await assert.rejects(sandbox.exec('echo bye-json; exit 43', { sessionId: 'quitter', timeout: 10_000 }), (e) => {
    assert.ok(e instanceof SessionTerminatedError, e.name);
    assert.deepEqual([e.exitCode, e.stdout], [43, 'bye-json\n']);
    return true;
  });
  // The streamed form reports it as the stream's error event.
  const events = [];
  for await (const ev of parseSSEStream(await sandbox.execStream('exit 9', { sessionId: 'quitter' }))) events.push(ev);
  assert.equal(events.at(-1).type, 'error');
  assert.equal(events.at(-1).code, 'SESSION_TERMINATED');
  assert.equal(events.at(-1).exitCode, 9);
  assert.equal((await sandbox.exec('echo fresh', { sessionId: 'quitter' })).stdout, 'fresh\n');
  await assert.rejects(sandbox.exec('true', { timeout: 0 }), InvalidArgumentError);
});

test('aborting a streamed exec ends the stream', T, async () => {
  const ac = new AbortController();
  const stream = await sandbox.execStream('for i in $(seq 1 100); do echo tick-$i; sleep 0.1; done', { signal: ac.signal });
  const seen = [];
  await assert.rejects(
    (async () => {
      for await (const ev of parseSSEStream(stream)) {
        seen.push(ev);
        if (ev.type === 'stdout' && ev.data.includes('tick-2')) ac.abort();
      }
    })(),
    (e) => e.name === 'AbortError',
  );
  assert.ok(!seen.some((e) => e.type === 'complete'), 'aborted before the end');
});
