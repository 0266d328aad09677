// Shared setup of the live tests: the node from WARREN_URL / WARREN_API_KEY (required: the
// run fails loudly without them), ids unique to this run, and cleanup of every sandbox made.
import { after } from 'node:test';
import http from 'node:http';
import { Warren, getSandbox } from '../dist/index.js';

const url = process.env.WARREN_URL;
const apiKey = process.env.WARREN_API_KEY;
if (!url || !apiKey) {
  throw new Error(
    'WARREN_URL and WARREN_API_KEY must be set to a live warren node for these tests ' +
      '(e.g. `warren dev --listen 127.0.0.1:7171`, key in <data-dir>/api-key)',
  );
}

export const warren = new Warren({ url, apiKey });
export const RUN = process.env.TS_RUN_ID ?? Math.random().toString(16).slice(2, 8);

const made = new Set();

/** A unique sandbox id of this run (`ts-<run>-<name>`), destroyed after the file's tests. */
export function sandboxId(name) {
  const id = `ts-${RUN}-${name}-${Math.random().toString(16).slice(2, 6)}`;
  made.add(id);
  return id;
}

/** getSandbox with a unique id, remembered for cleanup. */
export function newSandbox(name, options) {
  return getSandbox(warren, sandboxId(name), options);
}

/** Remembers an id made some other way (forks). */
export function track(id) {
  made.add(id);
}

after(async () => {
  await Promise.all(
    [...made].map((id) =>
      getSandbox(warren, id)
        .destroy()
        .catch((e) => console.error(`cleanup of ${id} failed: ${e.message}`)),
    ),
  );
});

/**
 * GET a preview URL through the node the tests talk to, the way a browser on this machine
 * would reach `{port}-{id}-{token}.localhost`: a connection to the node with the preview
 * URL's Host header (this host's resolver does not map *.localhost).
 */
export function fetchPreview(previewUrl, path = '/') {
  const u = new URL(previewUrl);
  const node = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: node.hostname,
        port: node.port || 80,
        path,
        method: 'GET',
        headers: { host: u.host },
      },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
      },
    );
    req.on('error', reject);
    req.setTimeout(20000, () => req.destroy(new Error('preview request timed out')));
    req.end();
  });
}

/** Collects a parsed SSE stream into an array (until it ends or `until(event)` is true). */
export async function collect(iterable, until) {
  const out = [];
  for await (const ev of iterable) {
    out.push(ev);
    if (until && until(ev, out)) break;
  }
  return out;
}

export { url as WARREN_URL };
