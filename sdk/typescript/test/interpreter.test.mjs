// Code interpreter: the pandas example (a DataFrame made in one run, read in the next),
// callbacks, rich results, errors, JavaScript, streaming, listing and deleting contexts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseSSEStream, ContextNotFoundError, UnsupportedLanguageError } from '../dist/index.js';
import { newSandbox, collect } from './helpers.mjs';

const T = { timeout: 90_000 };
const sandbox = newSandbox('code');

test('example: a pandas analysis, then a second runCode reading the DataFrame', T, async () => {
  const ctx = await sandbox.createCodeContext({ language: 'python' });
  assert.equal(ctx.language, 'python');
  const printed = [];
  const shown = [];
  const analysis = await sandbox.runCode(
    `
import pandas as pd
sales = pd.DataFrame({
    "region": ["north", "south", "north", "east", "south"],
    "units": [10, 4, 6, 8, 12],
    "price": [2.5, 3.0, 2.5, 4.0, 3.0],
})
sales["revenue"] = sales["units"] * sales["price"]
summary = sales.groupby("region")["revenue"].sum().sort_values(ascending=False)
print(f"rows: {len(sales)}")
summary.to_frame()
`,
    {
      context: ctx,
      onStdout: (out) => printed.push(out),
      onResult: (r) => shown.push(r),
    },
  );
  assert.equal(analysis.error, undefined, JSON.stringify(analysis.error));
  assert.equal(printed.map((o) => o.text).join(''), 'rows: 5\n');
  assert.equal(typeof printed[0].timestamp, 'number');
  assert.deepEqual(analysis.logs.stdout, ['rows: 5\n']);
  assert.equal(analysis.results.length, 1);
  const table = analysis.results[0];
  assert.equal(shown[0], table);
  assert.match(table.html, /<table/);
  assert.match(table.text, /south\s+48\.0/);
  assert.ok(table.formats().includes('html') && table.formats().includes('text'), table.formats().join());

  const next = await sandbox.runCode('int(sales["units"].sum()), summary.idxmax(), round(float(sales["revenue"].mean()), 2)', { context: ctx });
  assert.equal(next.error, undefined, JSON.stringify(next.error));
  assert.equal(next.results[0].text, "(40, 'south', 24.0)");
  assert.equal(next.executionCount, 2);
});

test('errors are reported with name, message and traceback; the context survives', T, async () => {
  const ctx = await sandbox.createCodeContext({ language: 'python' });
  const errors = [];
  const r = await sandbox.runCode('x = 1\n1/0', { context: ctx, onError: (e) => errors.push(e) });
  assert.equal(r.error.name, 'ZeroDivisionError');
  assert.match(r.error.message, /division by zero/);
  assert.ok(Array.isArray(r.error.traceback) && r.error.traceback.join('\n').includes('ZeroDivisionError'));
  assert.equal(errors[0].name, 'ZeroDivisionError');
  assert.equal((await sandbox.runCode('x + 1', { context: ctx })).results[0].text, '2');
  const json = await sandbox.runCode('{"a": [1, 2]}', { context: ctx });
  assert.deepEqual(json.results[0].json, { a: [1, 2] });
});

test('javascript contexts, the default context, runCodeStream', T, async () => {
  const js = await sandbox.createCodeContext({ language: 'javascript' });
  await sandbox.runCode('const xs = [1, 2, 3]', { context: js });
  const r = await sandbox.runCode('console.log("sum"); xs.reduce((a, b) => a + b, 0)', { context: js.id });
  assert.equal(r.results[0].text, '6');
  assert.deepEqual(r.logs.stdout, ['sum\n']);
  // No context: a default python context, reused.
  await sandbox.runCode('default_var = 41');
  assert.equal((await sandbox.runCode('default_var + 1')).results[0].text, '42');
  const events = await collect(parseSSEStream(await sandbox.runCodeStream('import time\nprint("a")\ntime.sleep(0.2)\nprint("b")\n7*6')));
  assert.deepEqual(events.map((e) => e.type), ['stdout', 'stdout', 'result', 'complete']);
  assert.equal(events[2].text, '42');
});

test('listCodeContexts, deleteCodeContext, unsupported languages', T, async () => {
  const ctx = await sandbox.createCodeContext({ language: 'python', cwd: '/tmp', envVars: { GREETING: 'hi' } });
  assert.equal(ctx.cwd, '/tmp');
  assert.equal((await sandbox.runCode('import os; os.getcwd(), os.environ["GREETING"]', { context: ctx })).results[0].text, "('/tmp', 'hi')");
  const ids = (await sandbox.listCodeContexts()).map((c) => c.id);
  assert.ok(ids.includes(ctx.id));
  await sandbox.deleteCodeContext(ctx);
  assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === ctx.id));
  await assert.rejects(sandbox.runCode('1', { context: ctx }), ContextNotFoundError);
  await assert.rejects(sandbox.createCodeContext({ language: 'cobol' }), UnsupportedLanguageError);
});
