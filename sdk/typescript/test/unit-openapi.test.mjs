// The SDK's type declarations agree with the OpenAPI document (docs/openapi.json, generated
// from the API's wire types): for each response schema below, every required field of the
// schema is a property of its TS interface (under the SDK's name for it, where it has
// another), and every property of the interface is a field of the schema, or one the SDK
// adds, listed here with the reason. The interfaces are read from src/ with the TypeScript
// compiler's parser, so a renamed or dropped property is seen without a build.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import ts from 'typescript';

const here = path.dirname(fileURLToPath(import.meta.url));
const SRC = path.join(here, '..', 'src');
const DOCUMENT = path.join(here, '..', '..', '..', 'docs', 'openapi.json');

/** The .ts files below `dir`. */
function sources(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sources(p);
    return e.isFile() && e.name.endsWith('.ts') ? [p] : [];
  });
}

/** Every interface (and object type alias) declared in src/: name -> its property names. */
export function declaredTypes(dir = SRC) {
  const out = new Map();
  for (const file of sources(dir)) {
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    for (const st of source.statements) {
      let members;
      if (ts.isInterfaceDeclaration(st)) members = st.members;
      else if (ts.isTypeAliasDeclaration(st) && ts.isTypeLiteralNode(st.type)) members = st.type.members;
      else continue;
      const props = members.filter(ts.isPropertySignature).map((m) => m.name.getText(source));
      out.set(st.name.text, new Set(props));
    }
  }
  return out;
}

// schema: the document's schema; type: the SDK's interface; renamed: the schema's field ->
// the SDK's property, where the names differ; sdkOnly: properties the SDK adds, no answer
// carries them.
const PAIRS = [
  { schema: 'Sandbox', type: 'SandboxInfo' },
  { schema: 'Snapshot', type: 'SnapshotInfo' },
  { schema: 'Process', type: 'ProcessInfo' },
  {
    // The hosted SDK's shape: camelCase, and what the call was (its command, start, session).
    schema: 'ExecResponse',
    type: 'ExecResult',
    renamed: {
      exit_code: 'exitCode',
      duration_ms: 'duration',
      timed_out: 'timedOut',
      stdout_base64: 'stdoutBase64',
      stderr_base64: 'stderrBase64',
    },
    sdkOnly: ['command', 'timestamp', 'sessionId'],
  },
  {
    schema: 'ListEntry',
    type: 'FileInfo',
    renamed: { path: 'absolutePath', relative_path: 'relativePath', modified_at: 'modifiedAt' },
  },
  // The hosted SDK's result shape: success, the listed path, a count and when.
  { schema: 'ListResponse', type: 'ListFilesResult', renamed: { entries: 'files' }, sdkOnly: ['success', 'path', 'count', 'timestamp'] },
  { schema: 'WriteFileResponse', type: 'WriteFileResult', sdkOnly: ['success', 'timestamp'] },
  {
    schema: 'GitCheckoutResponse',
    type: 'GitCheckoutResult',
    renamed: { url: 'repoUrl', target_dir: 'targetDir' },
    sdkOnly: ['success', 'timestamp'],
  },
  { schema: 'ExposedPort', type: 'ExposedPort' },
  { schema: 'Context', type: 'CodeContext', renamed: { created_at: 'createdAt' } },
  { schema: 'ExecutionResult', type: 'Result' },
  // `code`: set on a streamed run's `error` event when the platform, not the code, failed.
  { schema: 'ExecutionError', type: 'ExecutionError', sdkOnly: ['code'] },
  {
    // stdout and stderr are kept chunk by chunk, as streamed runs deliver them, in `logs`;
    // `code` is what was run.
    schema: 'RunCodeResponse',
    type: 'Execution',
    renamed: { stdout: 'logs', stderr: 'logs', execution_count: 'executionCount' },
    sdkOnly: ['code'],
  },
  { schema: 'Tenant', type: 'TenantView' },
];

/** What is wrong between one schema and one interface's properties (empty when they agree). */
export function disagreements(schema, pair, props) {
  const renamed = pair.renamed ?? {};
  const sdkOnly = new Set(pair.sdkOnly ?? []);
  const fields = Object.keys(schema.properties ?? {});
  const name = (f) => renamed[f] ?? f;
  const wrong = [];
  for (const f of schema.required ?? []) {
    if (!props.has(name(f))) wrong.push(`required field ${f} is not in ${pair.type}`);
  }
  const fromSchema = new Set(fields.map(name));
  for (const p of [...props].sort()) {
    if (!fromSchema.has(p) && !sdkOnly.has(p)) wrong.push(`${pair.type}.${p} is not a field of ${pair.schema}`);
  }
  // The exceptions stay true: a rename names real fields; an SDK-only property is not the schema's.
  for (const [f, p] of Object.entries(renamed)) {
    if (!fields.includes(f)) wrong.push(`renamed ${f} is not a field of ${pair.schema}`);
    if (!props.has(p)) wrong.push(`renamed to ${p}, not a property of ${pair.type}`);
  }
  for (const p of sdkOnly) {
    if (!props.has(p)) wrong.push(`SDK-only ${p} is not a property of ${pair.type}`);
    if (fields.includes(p)) wrong.push(`SDK-only ${p} is a field of ${pair.schema}`);
  }
  return wrong;
}

const schemas = JSON.parse(readFileSync(DOCUMENT, 'utf8')).components.schemas;
const types = declaredTypes();

for (const pair of PAIRS) {
  test(`${pair.type} names the fields of the schema ${pair.schema}`, () => {
    assert.ok(schemas[pair.schema], `docs/openapi.json has no schema ${pair.schema}`);
    assert.ok(types.has(pair.type), `src/ declares no interface ${pair.type}`);
    assert.deepEqual(disagreements(schemas[pair.schema], pair, types.get(pair.type)), []);
  });
}

test('the check sees a missing and an extra field', () => {
  const pair = { schema: 'Process', type: 'ProcessInfo' };
  const more = structuredClone(schemas.Process);
  more.properties.cgroup = { type: 'string' };
  more.required.push('cgroup');
  assert.deepEqual(disagreements(more, pair, types.get('ProcessInfo')), ['required field cgroup is not in ProcessInfo']);
  const fewer = structuredClone(schemas.Process);
  delete fewer.properties.ended_at;
  assert.deepEqual(disagreements(fewer, pair, types.get('ProcessInfo')), ['ProcessInfo.ended_at is not a field of Process']);
});
