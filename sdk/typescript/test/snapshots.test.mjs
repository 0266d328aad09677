// Snapshots: snapshot() then 4 sandboxes started from it with start({snapshot}); fork;
// restore; the snapshot catalog.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { getSandbox, SnapshotNotFoundError, ConflictError } from '../dist/index.js';
import { warren, newSandbox, sandboxId, track } from './helpers.mjs';

const T = { timeout: 150_000 };
const source = newSandbox('snap', { labels: { suite: 'ts-sdk' } });

test('example: snapshot(), then 4 forks started with start({snapshot})', T, async () => {
  await source.writeFile('/workspace/state.json', JSON.stringify({ step: 1 }));
  await source.exec('pip --version > /workspace/tool.txt 2>&1 || true');
  const snapshot = await source.snapshot({ name: 'after-step-1' });
  assert.match(snapshot, /^snap-/);
  const info = await warren.getSnapshot(snapshot);
  assert.deepEqual([info.sandbox, info.name, info.origin], [source.id, 'after-step-1', 'user']);
  assert.ok((await source.listSnapshots()).some((s) => s.id === snapshot));

  const forks = await Promise.all(
    [1, 2, 3, 4].map(async (i) => {
      const fork = getSandbox(warren, sandboxId(`f${i}`));
      const started = await fork.start({ snapshot });
      assert.equal(started.state, 'running');
      return fork;
    }),
  );
  // Each fork has the snapshot's files and goes its own way.
  await Promise.all(
    forks.map(async (fork, i) => {
      assert.deepEqual(JSON.parse((await fork.readFile('/workspace/state.json')).content), { step: 1 });
      await fork.writeFile('/workspace/state.json', JSON.stringify({ step: 2, fork: i }));
    }),
  );
  for (const [i, fork] of forks.entries()) {
    assert.deepEqual(JSON.parse((await fork.readFile('/workspace/state.json')).content), { step: 2, fork: i });
  }
  assert.deepEqual(JSON.parse((await source.readFile('/workspace/state.json')).content), { step: 1 }, 'the source is untouched');
  // Starting an existing id from the same snapshot again is idempotent; another is a conflict.
  await forks[0].start({ snapshot });
  const other = await source.snapshot();
  await assert.rejects(forks[0].start({ snapshot: other }), ConflictError);
  await Promise.all(forks.map((f) => f.destroy()));
  await warren.deleteSnapshot(other);
  await warren.deleteSnapshot(snapshot);
});

test('warren.start({snapshot}) makes a new id; fork(count); restore', T, async () => {
  const snapshot = await source.snapshot();
  const fresh = await warren.start({ snapshot, prefix: `ts-${source.id.split('-')[1]}-new` });
  track(fresh.id);
  assert.equal((await fresh.readFile('/workspace/state.json')).content, JSON.stringify({ step: 1 }));

  const progress = [];
  const forked = await source.fork(2, { onProgress: (p) => progress.push(p) });
  forked.sandboxes.forEach((s) => track(s.id));
  assert.match(forked.snapshot, /^snap-/);
  assert.ok(progress.every((p) => typeof p.phase === 'string' && typeof p.bytes === 'number'), JSON.stringify(progress));
  assert.deepEqual(forked.sandboxes.map((s) => s.id), [`${source.id}-fork-1`, `${source.id}-fork-2`]);
  assert.deepEqual(forked.infos.map((s) => s.labels.suite), ['ts-sdk', 'ts-sdk'], 'forks keep the source settings');
  assert.equal((await forked.sandboxes[1].exec('cat /workspace/state.json')).stdout, JSON.stringify({ step: 1 }));

  await source.writeFile('/workspace/state.json', 'changed');
  await source.writeFile('/workspace/extra.txt', 'new file');
  const phases = new Set();
  const restored = await source.restore(snapshot, { onProgress: (p) => phases.add(p.phase) });
  assert.ok(phases.size > 0, 'a streamed restore reports progress');
  assert.equal(restored.id, source.id);
  assert.equal((await source.readFile('/workspace/state.json')).content, JSON.stringify({ step: 1 }));
  assert.equal((await source.exists('/workspace/extra.txt')).exists, false);
  await assert.rejects(source.restore('snap-000000000000deadbeef'), SnapshotNotFoundError);
  await Promise.all([fresh.destroy(), ...forked.sandboxes.map((s) => s.destroy())]);
  await warren.deleteSnapshot(snapshot);
  await warren.deleteSnapshot(forked.snapshot);
  await assert.rejects(warren.getSnapshot(snapshot), SnapshotNotFoundError);
});
