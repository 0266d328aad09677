// Terminals over WebSocket: type `echo hi`, see the output, reconnect and see the replay
// (from the cursor: nothing twice), resize, state kept across sockets, exit.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidArgumentError, UpgradeRequiredError } from '../dist/index.js';
import { warren, newSandbox } from './helpers.mjs';

const T = { timeout: 60_000 };
const sandbox = newSandbox('term');

test('example: open a terminal, type echo hi, see it; reconnect and see the replay', T, async () => {
  const term = await sandbox.terminal('main', { cols: 80, rows: 24 });
  term.write('echo hi-$((40+2))\n'); // the arithmetic makes the output differ from the echoed input
  await term.waitFor('hi-42\r\n');
  const cursorBefore = term.cursor;
  assert.ok(cursorBefore > 0);
  term.close();

  // A new socket replays the kept output first (the shell lives on).
  const again = await sandbox.terminal('main');
  assert.match(again.lastReplay, /hi-42/);
  again.write('echo second-$((1+1))\n');
  await again.waitFor('second-2\r\n');

  // A dropped socket resumes from its cursor: only what came after it is replayed.
  const mark = again.output.length;
  await again.reconnect();
  assert.doesNotMatch(again.lastReplay, /hi-42/, 'nothing before the cursor is sent again');
  again.write('echo third-$((1+2))\n');
  const after = await again.waitFor('third-3\r\n', { from: mark });
  assert.equal((after.match(/second-2\r\n/g) ?? []).length, 0, 'no duplicate output after the reconnect');
  again.close();
});

test('resize reaches stty; state persists across sockets; exit ends the socket', T, async () => {
  const t = await sandbox.terminal('sized', { cols: 80, rows: 24 });
  t.write('stty size; echo size-$((40+2))\n');
  assert.match(await t.waitFor('size-42\r\n'), /24 80/);
  t.resize(120, 40);
  const mark = t.output.length;
  t.write('export KEPT=kept-value; stty size; echo resized-$((40+3))\n');
  assert.match(await t.waitFor('resized-43\r\n', { from: mark }), /40 120/);
  t.close();
  const t2 = await sandbox.terminal('sized');
  t2.write('echo $KEPT-$((2+2))\n');
  await t2.waitFor('kept-value-4');
  const exited = new Promise((resolve) => t2.once('exit', resolve));
  t2.write('exit 3\n');
  assert.equal(await exited, 3);
  assert.equal(t2.exitCode, 3);
  // Listed while running; deleting an absent terminal is fine.
  await sandbox.closeTerminal('nothing-here');
});

test('a bad size is InvalidArgumentError before anything runs; plain GET is 426', T, async () => {
  await assert.rejects(sandbox.terminal('main', { cols: 0 }), InvalidArgumentError);
  await assert.rejects(
    warren.request('GET', `/v1/sandboxes/${sandbox.id}/terminals/main`),
    (e) => e instanceof UpgradeRequiredError && e.status === 426,
  );
});
