// Lifecycle and configuration: getSandbox options as the API reports them, sleep and wake,
// egress, destroy.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { getSandbox, SandboxNotFoundError, InvalidArgumentError, Warren } from '../dist/index.js';
import { warren, sandboxId, RUN } from './helpers.mjs';

const T = { timeout: 90_000 };

test('example: sleepAfter "5m" and persistAcrossSessions disk are what the API reports', T, async () => {
  const sandbox = getSandbox(warren, sandboxId('cfg'), {
    sleepAfter: '5m',
    persistAcrossSessions: { type: 'disk' },
    labels: { team: 'red' },
    instanceType: 'lite',
    env: { GREETING: 'hello' },
  });
  assert.equal(await sandbox.info(), null, 'a handle creates nothing');
  const r = await sandbox.exec('echo $GREETING');
  assert.equal(r.stdout, 'hello\n', 'the first call created it with the options');
  const info = await sandbox.getInfo();
  assert.equal(info.id, sandbox.id);
  assert.equal(info.sleep_after_s, 300);
  assert.equal(info.persist, 'disk');
  assert.equal(info.keep_alive, false);
  assert.deepEqual(info.labels, { team: 'red' });
  assert.equal(info.instance_type, 'lite');
  assert.equal(info.resources.memory_mb, 256);
  assert.equal(info.state, 'running');
  const listed = await warren.listSandboxes({ labels: { team: 'red' } });
  assert.ok(listed.sandboxes.some((s) => s.id === sandbox.id));

  // Sleep persists the disk; GET does not wake; the next call does, with the files.
  await sandbox.writeFile('/workspace/kept.txt', 'survives sleep');
  const slept = await sandbox.sleep();
  assert.equal(slept.state, 'sleeping');
  assert.equal((await sandbox.getInfo()).state, 'sleeping');
  assert.equal((await sandbox.readFile('/workspace/kept.txt')).content, 'survives sleep');
  assert.equal((await sandbox.getInfo()).state, 'running');

  // Updating an existing sandbox's settings through a new handle.
  const updated = await getSandbox(warren, sandbox.id, { keepAlive: true, persistAcrossSessions: { type: 'dirs', dirs: ['/workspace'] } }).start();
  assert.deepEqual([updated.keep_alive, updated.persist], [true, { dirs: ['/workspace'] }]);

  await sandbox.destroy();
  await assert.rejects(sandbox.getInfo(), SandboxNotFoundError);
  assert.equal(await sandbox.info(), null);
  await sandbox.destroy(); // idempotent
});

test('egress policy: set at creation, replaced with setEgress, read back', T, async () => {
  const sandbox = getSandbox(warren, sandboxId('egress'), {
    egress: { default: 'deny', allow_hosts: ['*.pypi.org'] },
  });
  const p = await sandbox.getEgress();
  assert.equal(p.default, 'deny');
  assert.deepEqual(p.allow_hosts, ['*.pypi.org']);
  const set = await sandbox.setEgress({
    default: 'allow',
    deny_hosts: ['blocked.example'],
    rules: [{ host: 'api.example', set_headers: { authorization: 'Bearer ${secret:ts-sdk-token}' } }],
  });
  assert.equal(set.default, 'allow');
  assert.deepEqual(set.deny_hosts, ['blocked.example']);
  assert.equal((await sandbox.getEgress()).rules[0].host, 'api.example');
  // A blocked request from inside gets the proxy's 403 EGRESS_DENIED.
  const r = await sandbox.exec('curl -s -m 10 http://blocked.example/ || true');
  assert.match(r.stdout, /EGRESS_DENIED/);
  await assert.rejects(sandbox.setEgress({ default: 'sometimes' }), InvalidArgumentError);
  await sandbox.destroy();
});

test('secrets are write-only; cluster and health answer', T, async () => {
  const name = `ts-sdk-${RUN}`;
  await warren.setSecret(name, 'not-to-be-shown');
  const listed = await warren.listSecrets();
  const mine = listed.find((x) => x.name === name);
  assert.ok(mine, JSON.stringify(listed));
  assert.ok(!JSON.stringify(listed).includes('not-to-be-shown'), 'no value is ever returned');
  await warren.deleteSecret(name);
  await warren.deleteSecret(name); // absent: still fine
  assert.ok(!(await warren.listSecrets()).some((x) => x.name === name));
  await assert.rejects(warren.setSecret('bad name!', 'v'), InvalidArgumentError);
  const cluster = await warren.cluster();
  assert.ok(Array.isArray(cluster.nodes) && cluster.nodes.length >= 1);
  const health = await warren.health();
  assert.equal(health.status, 'ok');
});

test('example: a tenant key made with createKey sees only its own sandboxes, until revoked', T, async () => {
  const tenant = `ts-${RUN}`;
  const made = await warren.createKey(tenant, 'tenant', 'sdk test');
  assert.equal(made.tenant, tenant);
  assert.match(made.key, /^wk_[0-9a-f]{16}_[0-9a-f]{64}$/);
  const scoped = new Warren({ url: process.env.WARREN_URL, apiKey: made.key });
  const mine = getSandbox(scoped, sandboxId('tenant'));
  assert.equal((await mine.exec('echo mine')).stdout, 'mine\n');
  const theirs = getSandbox(warren, sandboxId('admin'));
  await theirs.exec('true');
  const seen = (await scoped.listSandboxes({})).sandboxes.map((s) => s.id);
  assert.ok(seen.includes(mine.id) && !seen.includes(theirs.id), JSON.stringify(seen));
  await assert.rejects(getSandbox(scoped, theirs.id).exec('true'), SandboxNotFoundError);
  const view = await warren.setTenantQuota(tenant, { max_sandboxes: 5 });
  assert.equal(view.in_use.sandboxes, 1);
  assert.ok((await warren.listKeys()).some((k) => k.id === made.id && k.key === undefined));
  await mine.destroy();
  await warren.revokeKey(made.id);
  await assert.rejects(scoped.listSandboxes({}), (e) => e.status === 401);
});

test('example: a join token made for a new node expires, is listed without its value, and is revoked', T, async () => {
  const made = await warren.createJoinToken({ ttlS: 120, name: `ts-${RUN}` });
  assert.match(made.token, /^wjt_[0-9a-f]{16}_[0-9a-f]{64}$/);
  assert.equal(made.single_use, true);
  const listed = (await warren.listJoinTokens()).find((t) => t.id === made.id);
  assert.equal(listed.state, 'valid');
  assert.equal(listed.token, undefined);
  await warren.revokeJoinToken(made.id);
  assert.ok(!(await warren.listJoinTokens()).some((t) => t.id === made.id));
  await assert.rejects(warren.createJoinToken({ ttlS: 0 }), (e) => e.status === 400);
  assert.deepEqual(await warren.setJoinPolicy({ clusterToken: false }), { cluster_token: false });
  assert.deepEqual(await warren.getJoinPolicy(), { cluster_token: false });
  assert.deepEqual(await warren.setJoinPolicy({ clusterToken: true }), { cluster_token: true });
});
