// Runs every *.test.mjs file, two at a time, each test bounded (180 s), on Node 18 as on
// later versions (whose --test-concurrency and --test-timeout flags Node 18 lacks).
import { run } from 'node:test';
import { tap } from 'node:test/reporters';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const only = process.argv.slice(2);
const files = readdirSync(here)
  .filter((f) => f.endsWith('.test.mjs'))
  .filter((f) => only.length === 0 || only.some((o) => f.startsWith(o)))
  .map((f) => path.join(here, f));

const stream = run({ files, concurrency: 2, timeout: 180_000 });
stream.on('test:fail', () => {
  process.exitCode = 1;
});
stream.compose(tap).pipe(process.stdout);
