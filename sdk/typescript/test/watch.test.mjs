// watch: the example of seeing an edit to a .ts file; include/exclude; closing frees it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseSSEStream, FileNotFoundError, InvalidArgumentError } from '../dist/index.js';
import { newSandbox } from './helpers.mjs';

const T = { timeout: 60_000 };
const sandbox = newSandbox('watch');

test('example: watch sees an edit to a .ts file', T, async () => {
  await sandbox.writeFile('/workspace/src/index.ts', 'export const a = 1;\n');
  await sandbox.writeFile('/workspace/src/notes.md', 'notes\n');
  const stream = await sandbox.watch('/workspace/src', { include: ['*.ts'], exclude: ['node_modules'] });
  // The watch is live once watch() resolves: edit now.
  await sandbox.writeFile('/workspace/src/notes.md', 'more notes\n');
  await sandbox.exec('echo "export const b = 2;" >> /workspace/src/index.ts');
  let change = null;
  const seen = [];
  for await (const event of parseSSEStream(stream)) {
    seen.push(event);
    if (event.type === 'modify') {
      change = event;
      break;
    }
  }
  assert.equal(seen[0].type, 'watching');
  assert.equal(seen[0].path, '/workspace/src');
  assert.ok(change, JSON.stringify(seen));
  assert.equal(change.eventType, 'modify');
  assert.equal(change.path, '/workspace/src/index.ts');
  assert.equal(change.isDirectory, false);
  assert.ok(!Number.isNaN(Date.parse(change.timestamp)), change.timestamp);
  assert.ok(seen.every((e) => e.type === 'watching' || e.path.endsWith('.ts')), `include applies: ${JSON.stringify(seen)}`);
});

test('recursive watch sees new directories, deletes and moves; closing frees the watch', T, async () => {
  await sandbox.exec('mkdir -p /workspace/w');
  const stream = await sandbox.watch('/workspace/w');
  await sandbox.exec('cd /workspace/w && mkdir -p a/b && echo x > a/b/c.txt && mv a/b/c.txt a/d.txt && rm a/d.txt');
  const seen = [];
  for await (const ev of parseSSEStream(stream)) {
    seen.push(`${ev.type} ${ev.path}${ev.isDirectory ? '/' : ''}`);
    if (ev.type === 'delete' && ev.path === '/workspace/w/a/d.txt') break;
  }
  for (const want of ['create /workspace/w/a/', 'create /workspace/w/a/b/', 'create /workspace/w/a/b/c.txt', 'move_from /workspace/w/a/b/c.txt', 'move_to /workspace/w/a/d.txt', 'delete /workspace/w/a/d.txt']) {
    assert.ok(seen.includes(want), `${want} in ${JSON.stringify(seen)}`);
  }
  // Breaking out of the loop cancelled the stream: the guest drops the inotify instance.
  let freed = false;
  for (let i = 0; i < 50 && !freed; i++) {
    const r = await sandbox.exec('ls -l /proc/1/fd | grep -c inotify || true');
    freed = r.stdout.trim() === '0';
    if (!freed) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(freed, 'the watch is released when its stream is cancelled');
});

test('a missing path is FileNotFoundError, a bad glob InvalidArgumentError', T, async () => {
  await assert.rejects(sandbox.watch('/nope/not/here'), FileNotFoundError);
  await assert.rejects(sandbox.watch('/workspace', { include: ['a['] }), InvalidArgumentError);
});
