// warren's JavaScript/TypeScript kernel: one persistent REPL context, driven by the guest.
//
// Requests arrive as JSON lines on fd 3 ({"seq": N, "code": "..."}); events leave as JSON
// lines on fd 4: stdout, stderr, result, error, and {"type": "done", "seq": N} at the end of
// each run. fd 1 and 2 stay pipes the guest reads too (process.stdout.write, child
// processes). The REPL gives the completion value of the last expression statement,
// const/let that persist across runs and top-level await. SIGINT ends a run that awaits
// (its promise is dropped); a synchronous busy loop cannot be interrupted, so the guest
// kills the kernel then.
'use strict';

const fs = require('fs');
const readline = require('readline');
const repl = require('repl');
const util = require('util');
const { Console } = require('console');
const { PassThrough } = require('stream');

const language = process.argv[2] === 'typescript' ? 'typescript' : 'javascript';

function emit(event) {
  const line = Buffer.from(JSON.stringify(event) + '\n', 'utf8');
  let off = 0;
  while (off < line.length) {
    try {
      off += fs.writeSync(4, line, off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}

const input = new PassThrough();
const output = new PassThrough();
output.resume();
const server = repl.start({
  input,
  output,
  prompt: '',
  terminal: false,
  useGlobal: false,
  ignoreUndefined: true,
  // Its SIGINT watchdog would swallow the signal our handler below needs.
  breakEvalOnSigint: false,
});

function streamOf(type) {
  return {
    write(chunk) {
      const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
      if (text.length > 0) emit({ type, text });
      return true;
    },
  };
}
server.context.console = new Console({
  stdout: streamOf('stdout'),
  stderr: streamOf('stderr'),
  colorMode: false,
  ignoreErrors: false,
});

let ts = null;
function transpileAs(code, module) {
  const out = ts.transpileModule(code, {
    reportDiagnostics: true,
    compilerOptions: { target: ts.ScriptTarget.ES2022, module, esModuleInterop: true },
  });
  const errors = (out.diagnostics || []).filter((d) => d.category === ts.DiagnosticCategory.Error);
  if (errors.length > 0) {
    const text = errors.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('\n');
    const err = new SyntaxError(text);
    err.stack = 'SyntaxError: ' + text;
    throw err;
  }
  return out.outputText;
}

function transpile(code) {
  if (ts === null) ts = require('typescript');
  let js = transpileAs(code, ts.ModuleKind.ESNext);
  if (/^\s*import\s/m.test(js)) {
    // The REPL runs scripts: imports become require() calls.
    js = transpileAs(code, ts.ModuleKind.CommonJS).replace(/^"use strict";\s*$/m, '');
    if (server.context.exports === undefined) server.context.exports = {};
  }
  // A cell is a script, not a module: the REPL cannot take the marker TypeScript adds.
  return js.replace(/^export \{\};?\s*$/gm, '');
}

function isPlain(value) {
  if (Array.isArray(value)) return true;
  if (value === null || typeof value !== 'object') return false;
  if (Object.prototype.toString.call(value) !== '[object Object]') return false;
  const proto = Object.getPrototypeOf(value);
  return proto === null || Object.getPrototypeOf(proto) === null;
}

function formatResult(value) {
  const result = { type: 'result', text: util.inspect(value, { depth: 6, colors: false }) };
  if (isPlain(value)) {
    try {
      const json = JSON.stringify(value);
      if (json !== undefined) result.json = JSON.parse(json);
    } catch (_) {
      // not JSON-serialisable (cycles, BigInt): text only
    }
  }
  return result;
}

function errorEvent(err) {
  if (err instanceof repl.Recoverable) err = err.err;
  if (err !== null && typeof err === 'object') {
    const name = String(err.name || (err.constructor && err.constructor.name) || 'Error');
    const message = err.message === undefined ? '' : String(err.message);
    const stack = typeof err.stack === 'string' ? err.stack : name + ': ' + message;
    // Frames of the REPL machinery that ran the cell are not the user's.
    const traceback = stack
      .split('\n')
      .filter((l) => !/^\s+at /.test(l) || !(l.includes(__filename) || /[( ]node:(vm|repl|domain|events|internal\/)/.test(l)))
      .join('\n');
    return { type: 'error', name, message, traceback };
  }
  const text = util.inspect(err);
  return { type: 'error', name: 'Error', message: 'Uncaught ' + text, traceback: 'Uncaught ' + text };
}

// The run in progress: its seq and how to end it (once).
let current = null;

function finish(run, err, value) {
  if (current !== run) return; // ended already (interrupted), a late callback
  current = null;
  if (err) {
    emit(errorEvent(err));
  } else if (value !== undefined) {
    emit(formatResult(value));
  }
  emit({ type: 'done', seq: run.seq });
  next();
}

process.on('SIGINT', () => {
  // An awaited promise cannot be cancelled; the run ends here and its promise is dropped.
  if (current !== null) {
    const err = new Error('Script execution was interrupted by SIGINT');
    err.name = 'KeyboardInterrupt';
    finish(current, err);
  }
});
// The REPL hands errors of evaluated code to its domain, not to the eval callback.
function uncaught(err) {
  if (current !== null) finish(current, err);
  else emit(errorEvent(err));
}
server._domain.on('error', uncaught);
process.on('uncaughtException', uncaught);
process.on('unhandledRejection', uncaught);

const queue = [];
function next() {
  if (current !== null || queue.length === 0) return;
  const req = queue.shift();
  const run = { seq: req.seq };
  current = run;
  let code = String(req.code || '');
  try {
    if (language === 'typescript') code = transpile(code);
  } catch (err) {
    finish(run, err);
    return;
  }
  if (code.trim() === '') {
    finish(run, null, undefined);
    return;
  }
  try {
    server.eval(code, server.context, 'cell-' + run.seq, (err, value) => finish(run, err, value));
  } catch (err) {
    finish(run, err);
  }
}

const requests = readline.createInterface({ input: fs.createReadStream(null, { fd: 3 }) });
requests.on('line', (line) => {
  let req;
  try {
    req = JSON.parse(line);
  } catch (_) {
    return;
  }
  queue.push(req);
  next();
});
requests.on('close', () => process.exit(0));

if (language === 'typescript') {
  try {
    ts = require('typescript');
  } catch (e) {
    emit({
      type: 'fatal',
      message: 'typescript needs the node package `typescript`, which this image does not have (' + e.message.split('\n')[0] + ')',
    });
    process.exit(3);
  }
}
emit({ type: 'ready', pid: process.pid });
