// Example: gitCheckout of a repository (served by a git daemon inside the same sandbox, as
// cli/tests/e2e/git.rs does: a sandbox cannot reach this host), then `npm test` streamed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseSSEStream, GitFailedError, InvalidArgumentError } from '../dist/index.js';
import { newSandbox } from './helpers.mjs';

const T = { timeout: 90_000 };
const sandbox = newSandbox('git');

const MAKE_REPO = `set -e
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
rm -rf /srv/src /srv/git && mkdir -p /srv/src /srv/git && cd /srv/src
git init -q -b main .
cat > package.json <<'JSON'
{"name": "demo", "version": "1.0.0", "scripts": {"test": "node test.js"}}
JSON
cat > test.js <<'JS'
const assert = require('assert');
assert.strictEqual(1 + 1, 2);
console.log('ok 1 - arithmetic works');
console.error('a note on stderr');
console.log('1 passing');
JS
git add . && git commit -qm one
git checkout -q -b feature && echo feat > feature.txt && git add . && git commit -qm feat && git checkout -q main
git clone -q --bare /srv/src /srv/git/demo.git
`;

async function serveRepo() {
  const r = await sandbox.exec(MAKE_REPO);
  assert.equal(r.exitCode, 0, r.stderr);
  const daemon = await sandbox.startProcess(
    'exec git daemon --reuseaddr --base-path=/srv/git --export-all --listen=127.0.0.1 --port=9418 /srv/git',
    { id: 'gitd' },
  );
  await daemon.waitForPort(9418, { mode: 'tcp', timeout: 20_000 });
  return 'git://127.0.0.1:9418/demo.git';
}

test('example: gitCheckout into /workspace, then exec("npm", ["test"], {stream: true})', T, async () => {
  const repoUrl = await serveRepo();
  const checkout = await sandbox.gitCheckout(repoUrl, { branch: 'main', targetDir: '/workspace/demo' });
  assert.equal(checkout.success, true);
  assert.deepEqual([checkout.branch, checkout.targetDir], ['main', '/workspace/demo']);
  assert.match(checkout.commit, /^[0-9a-f]{40}$/);

  const stream = await sandbox.exec('npm', ['test'], { stream: true, cwd: '/workspace/demo' });
  let stdout = '';
  let stderr = '';
  let exitCode = null;
  for await (const event of parseSSEStream(stream)) {
    if (event.type === 'stdout') stdout += event.data;
    if (event.type === 'stderr') stderr += event.data;
    if (event.type === 'complete') exitCode = event.exitCode;
  }
  assert.equal(exitCode, 0, stdout + stderr);
  assert.match(stdout, /ok 1 - arithmetic works/);
  assert.match(stdout, /1 passing/);
  assert.match(stderr, /a note on stderr/);
});

test('branch and depth; failures are GitFailedError with git\'s message', T, async () => {
  const repoUrl = 'git://127.0.0.1:9418/demo.git';
  const feat = await sandbox.gitCheckout(repoUrl, { branch: 'feature', depth: 1, targetDir: 'feat' });
  assert.equal(feat.targetDir, '/workspace/feat');
  const r = await sandbox.exec('git rev-list --count HEAD && cat feature.txt', { cwd: '/workspace/feat' });
  assert.equal(r.stdout, '1\nfeat\n');
  await assert.rejects(sandbox.gitCheckout('git://127.0.0.1:9418/nope.git'), (e) => {
    assert.ok(e instanceof GitFailedError);
    assert.equal(e.status, 422);
    assert.match(e.message, /nope|not/i);
    return true;
  });
  await assert.rejects(sandbox.gitCheckout(repoUrl, { timeout: 0 }), InvalidArgumentError);
});
