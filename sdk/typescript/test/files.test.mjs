// Files: text, bytes, streams both ways, directories, moves, deletes, typed errors.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { FileNotFoundError, IsADirectoryError, AlreadyExistsError, NotFoundError } from '../dist/index.js';
import { newSandbox } from './helpers.mjs';

const T = { timeout: 60_000 };
const sandbox = newSandbox('files');

test('writeFile and readFile: text, with parents created', T, async () => {
  const w = await sandbox.writeFile('/workspace/dir/sub/hello.txt', 'héllo\n');
  assert.equal(w.path, '/workspace/dir/sub/hello.txt');
  assert.equal(w.size, Buffer.byteLength('héllo\n'));
  assert.equal(w.sha256, createHash('sha256').update('héllo\n').digest('hex'));
  const r = await sandbox.readFile('/workspace/dir/sub/hello.txt');
  assert.deepEqual([r.content, r.encoding, r.isBinary, r.size], ['héllo\n', 'utf-8', false, 7]);
  assert.match(r.mimeType, /^text\/plain/);
  // Relative paths are under /workspace; the shell sees the same file.
  assert.equal((await sandbox.readFile('dir/sub/hello.txt')).content, 'héllo\n');
  assert.equal((await sandbox.exec('cat /workspace/dir/sub/hello.txt')).stdout, 'héllo\n');
});

test('bytes, base64 and modes', T, async () => {
  const bytes = new Uint8Array([0, 1, 2, 255, 254, 10]);
  await sandbox.writeFile('/workspace/bin.dat', bytes);
  assert.deepEqual(await sandbox.readFileBytes('/workspace/bin.dat'), bytes);
  const r = await sandbox.readFile('/workspace/bin.dat');
  assert.equal(r.encoding, 'base64');
  assert.equal(r.isBinary, true);
  assert.deepEqual(new Uint8Array(Buffer.from(r.content, 'base64')), bytes);
  await sandbox.writeFile('/workspace/b64.txt', Buffer.from('from base64').toString('base64'), { encoding: 'base64' });
  assert.equal((await sandbox.readFile('/workspace/b64.txt')).content, 'from base64');
  await sandbox.writeFile('/workspace/run.sh', '#!/bin/sh\necho ran\n', { mode: '0755' });
  assert.equal((await sandbox.stat('/workspace/run.sh')).mode, '0755');
  assert.equal((await sandbox.exec('/workspace/run.sh')).stdout, 'ran\n');
});

test('streams: a 3 MiB upload from a ReadableStream and a streamed download', T, async () => {
  const chunk = new Uint8Array(64 * 1024).map((_, i) => i % 251);
  const n = 48;
  const hash = createHash('sha256');
  for (let i = 0; i < n; i++) hash.update(chunk);
  let sent = 0;
  const upload = new ReadableStream({
    pull(c) {
      if (sent++ < n) c.enqueue(chunk);
      else c.close();
    },
  });
  const w = await sandbox.writeFile('/workspace/big.bin', upload);
  assert.equal(w.size, chunk.length * n);
  assert.equal(w.sha256, hash.digest('hex'));
  const down = await sandbox.readFileStream('/workspace/big.bin');
  const h2 = createHash('sha256');
  let total = 0;
  let pieces = 0;
  for await (const part of down) {
    h2.update(part);
    total += part.byteLength;
    pieces++;
  }
  assert.equal(total, chunk.length * n);
  assert.equal(h2.digest('hex'), w.sha256);
  assert.ok(pieces > 1, 'arrived in pieces');
  // An async iterable of strings works too.
  async function* gen() {
    yield 'a,';
    yield 'b,';
    yield 'c';
  }
  await sandbox.writeFile('/workspace/gen.txt', gen());
  assert.equal((await sandbox.readFile('/workspace/gen.txt')).content, 'a,b,c');
});

test('mkdir, listFiles, exists, moveFile, renameFile, deleteFile', T, async () => {
  const m = await sandbox.mkdir('/workspace/tree/a/b', { recursive: true });
  assert.equal(m.created, true);
  assert.equal((await sandbox.mkdir('/workspace/tree/a/b', { recursive: true })).created, false);
  await assert.rejects(sandbox.mkdir('/workspace/tree/a'), AlreadyExistsError);
  await sandbox.writeFile('/workspace/tree/a/one.txt', '1');
  await sandbox.writeFile('/workspace/tree/a/b/two.txt', '22');
  await sandbox.writeFile('/workspace/tree/.hidden', 'h');
  const flat = await sandbox.listFiles('/workspace/tree');
  assert.deepEqual(flat.files.map((f) => f.name), ['a']);
  const all = await sandbox.listFiles('/workspace/tree', { recursive: true, includeHidden: true });
  assert.deepEqual(all.files.map((f) => f.relativePath), ['.hidden', 'a', 'a/b', 'a/b/two.txt', 'a/one.txt']);
  const two = all.files.find((f) => f.name === 'two.txt');
  assert.deepEqual([two.type, two.size, two.absolutePath], ['file', 2, '/workspace/tree/a/b/two.txt']);
  assert.equal(all.files.find((f) => f.name === 'b').type, 'directory');
  assert.equal(all.count, 5);

  assert.equal((await sandbox.exists('/workspace/tree/a/one.txt')).exists, true);
  assert.equal((await sandbox.exists('/workspace/tree/nope')).exists, false);
  await sandbox.moveFile('/workspace/tree/a/one.txt', '/workspace/moved/deeper/one.txt');
  assert.equal((await sandbox.readFile('/workspace/moved/deeper/one.txt')).content, '1');
  await sandbox.renameFile('/workspace/moved/deeper/one.txt', '/workspace/moved/deeper/uno.txt');
  assert.equal((await sandbox.exists('/workspace/moved/deeper/one.txt')).exists, false);
  assert.equal((await sandbox.exists('/workspace/moved/deeper/uno.txt')).exists, true);

  await assert.rejects(sandbox.deleteFile('/workspace/tree'), IsADirectoryError);
  await sandbox.deleteFile('/workspace/tree', { recursive: true });
  assert.equal((await sandbox.exists('/workspace/tree')).exists, false);
  await sandbox.deleteFile('/workspace/moved/deeper/uno.txt');
});

test('missing files and directories raise typed errors', T, async () => {
  await assert.rejects(sandbox.readFile('/workspace/no/such/file'), (e) => {
    assert.ok(e instanceof FileNotFoundError && e instanceof NotFoundError);
    assert.equal(e.code, 'FILE_NOT_FOUND');
    assert.equal(e.status, 404);
    assert.equal(e.retryable, false);
    return true;
  });
  await assert.rejects(sandbox.readFile('/workspace'), IsADirectoryError);
  await assert.rejects(sandbox.deleteFile('/workspace/nope'), FileNotFoundError);
  await assert.rejects(sandbox.moveFile('/workspace/nope', '/workspace/x'), FileNotFoundError);
  await assert.rejects(sandbox.listFiles('/workspace/nope'), FileNotFoundError);
});

test('directories as tar streams: downloadDir, then uploadDir into a new directory', T, async () => {
  await sandbox.exec(
    'mkdir -p /workspace/tree/src/sub && printf "one\\n" > /workspace/tree/src/a.txt' +
      ' && printf "two\\n" > /workspace/tree/src/sub/b.txt && ln -s a.txt /workspace/tree/src/link',
  );
  const tar = await sandbox.downloadDir('/workspace/tree/src');
  const chunks = [];
  for await (const c of tar) chunks.push(c);
  const bytes = Buffer.concat(chunks);
  assert.ok(bytes.length >= 1024 && bytes.length % 512 === 0, `a tar of ${bytes.length} bytes`);
  const up = await sandbox.uploadDir('/workspace/tree/copy', bytes);
  assert.equal(up.path, '/workspace/tree/copy');
  assert.equal(up.entries, 4);
  const listing = (cmd) => sandbox.exec(`cd ${cmd} && find . | sort && cat sub/b.txt && readlink link`);
  assert.equal((await listing('/workspace/tree/copy')).stdout, (await listing('/workspace/tree/src')).stdout);
  // A stream body works too; never over something that is there; garbage is refused whole.
  const again = await sandbox.downloadDir('/workspace/tree/src');
  await assert.rejects(sandbox.uploadDir('/workspace/tree/copy', again), AlreadyExistsError);
  await assert.rejects(
    sandbox.uploadDir('/workspace/tree/bad', new Uint8Array(2048).fill(65)),
    (e) => e.code === 'INVALID_ARGUMENT',
  );
  assert.equal((await sandbox.exists('/workspace/tree/bad')).exists, false);
  const streamed = await sandbox.uploadDir('/workspace/tree/streamed', await sandbox.downloadDir('/workspace/tree/src'));
  assert.equal(streamed.entries, 4);
  await assert.rejects(sandbox.downloadDir('/workspace/tree/src/a.txt'), (e) => e.code === 'NOT_A_DIRECTORY');
});
