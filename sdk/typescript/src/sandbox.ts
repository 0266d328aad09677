// A sandbox: get-or-create by id, and every operation of the API on it.

import type { SandboxInfo, SnapshotInfo, Warren } from './client.js';
import {
  ContextNotFoundError,
  FileNotFoundError,
  InvalidArgumentError,
  NotFoundError,
  ProtocolError,
  errorFromBody,
} from './errors.js';
import { Process, ProcessInfo, normalizeLogEvent } from './process.js';
import { SSEReader, mapSSEStream } from './sse.js';
import { Terminal, TerminalOptions } from './terminal.js';
import {
  JSON_EXEC_MAX_MS,
  OUTPUT_LIMIT,
  absPath,
  base64ToBytes,
  concatBytes,
  filePath,
  parseSleepAfter,
  randomHex,
  utf8Lossy,
  utf8OrUndefined,
} from './util.js';

// ---- options and results ---------------------------------------------------------------

export type InstanceType = 'lite' | 'basic' | 'standard-1' | 'standard-2' | 'standard-3' | 'standard-4';

/** What survives sleep: the whole disk (default), some directories, or nothing. */
export type PersistOption = { type: 'disk' } | { type: 'dirs'; dirs: string[] } | { type: 'none' };

export interface EgressRule {
  host: string;
  methods?: string[];
  path_prefix?: string;
  set_headers?: Record<string, string>;
  remove_headers?: string[];
}

/** A sandbox's egress policy (api.md, "Egress and credentials"). */
export interface EgressPolicy {
  default?: 'allow' | 'deny';
  allow_hosts?: string[];
  deny_hosts?: string[];
  rules?: EgressRule[];
}

export interface SandboxOptions {
  /** Idle time before the sandbox sleeps: `"30s"`, `"5m"`, `"1h"` or seconds. Default 10 m. */
  sleepAfter?: string | number;
  /** Never sleep while idle. */
  keepAlive?: boolean;
  /** What survives sleep. Default `{type: "disk"}`. */
  persistAcrossSessions?: PersistOption;
  labels?: Record<string, string>;
  instanceType?: InstanceType;
  /** Explicit resources (override the instance type's). */
  resources?: { cpus?: number; memory_mb?: number; disk_mb?: number; pids?: number };
  /** Environment of every session, process and context (fixed at creation). */
  env?: Record<string, string>;
  /** Placement hint for a new sandbox. */
  region?: string;
  egress?: EgressPolicy;
  image?: string;
  isolation?: 'container' | 'gvisor';
  /** Lower-case the id (ids are DNS labels: `[a-z0-9-]`). */
  normalizeId?: boolean;
}

/** The body of `PUT /v1/sandboxes/{id}` for these options. */
export function createRequestBody(opts: SandboxOptions, fromSnapshot?: string): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  if (opts.image !== undefined) body['image'] = opts.image;
  if (opts.instanceType !== undefined) body['instance_type'] = opts.instanceType;
  if (opts.resources !== undefined) body['resources'] = opts.resources;
  if (opts.sleepAfter !== undefined) body['sleep_after'] = parseSleepAfter(opts.sleepAfter);
  if (opts.keepAlive !== undefined) body['keep_alive'] = opts.keepAlive;
  if (opts.env !== undefined) body['env'] = opts.env;
  if (opts.labels !== undefined) body['labels'] = opts.labels;
  if (opts.region !== undefined) body['region'] = opts.region;
  if (opts.persistAcrossSessions !== undefined) {
    const p = opts.persistAcrossSessions;
    if (p.type === 'disk') body['persist'] = 'disk';
    else if (p.type === 'none') body['persist'] = 'none';
    else if (p.type === 'dirs') body['persist'] = { dirs: p.dirs };
    else throw invalid(`unknown persistAcrossSessions type ${JSON.stringify((p as { type: unknown }).type)}`);
  }
  if (opts.egress !== undefined) body['egress'] = opts.egress;
  if (opts.isolation !== undefined) body['isolation'] = opts.isolation;
  if (fromSnapshot !== undefined) body['from_snapshot'] = fromSnapshot;
  return body;
}

function invalid(message: string): InvalidArgumentError {
  return new InvalidArgumentError({ code: 'INVALID_ARGUMENT', message });
}

const SANDBOX_ID = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

export function validateSandboxId(id: string): void {
  if (!SANDBOX_ID.test(id)) {
    throw invalid(`invalid sandbox id ${JSON.stringify(id)}: 1-63 of [a-z0-9], inner '-' allowed`);
  }
}

export interface ExecOptions {
  /** Working directory of this call only. */
  cwd?: string;
  /** Environment of this call only (undefined values are skipped). */
  env?: Record<string, string | undefined>;
  /** ms; the process tree is killed after it (exit code 124, `timedOut`). */
  timeout?: number;
  /** Session (default `"default"`): its shell keeps cd/export between calls. */
  sessionId?: string;
  /** Alias of sessionId. */
  session?: string;
  /** Bytes or text on stdin (otherwise stdin is empty). */
  stdin?: string | Uint8Array;
  /** Return the SSE stream instead of the result. */
  stream?: boolean;
  /** Called for every output chunk as it arrives (the command is streamed). */
  onOutput?: (stream: 'stdout' | 'stderr', data: string) => void;
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  /** Called with the result when the command completes. */
  onComplete?: (result: ExecResult) => void;
  /** Called when the command fails (before the promise rejects). */
  onError?: (error: Error) => void;
  signal?: AbortSignal;
}

/** Options that make exec resolve the SSE stream (stream: true, no result callbacks). */
export type StreamExecOptions = ExecOptions & {
  stream: true;
  onOutput?: undefined;
  onStdout?: undefined;
  onStderr?: undefined;
  onComplete?: undefined;
};

export interface ExecResult {
  success: boolean;
  exitCode: number;
  stdout: string;
  stderr: string;
  command: string;
  /** ms */
  duration: number;
  /** When the call started (ISO). */
  timestamp: string;
  timedOut: boolean;
  /** JSON mode keeps at most 16 MiB of each stream. */
  truncated: boolean;
  /** Exact bytes when stdout was not valid UTF-8 (then `stdout` is a lossy rendering). */
  stdoutBase64?: string;
  stderrBase64?: string;
  sessionId?: string;
}

/** One event of an exec stream (parsed with `parseSSEStream`). */
export interface ExecEvent {
  type: 'start' | 'stdout' | 'stderr' | 'complete' | 'error';
  timestamp: string;
  /** Output text (stdout/stderr); lossy when the chunk was not UTF-8 (see data_base64). */
  data?: string;
  data_base64?: string;
  command?: string;
  pid?: number;
  exitCode?: number;
  exit_code?: number;
  duration_ms?: number;
  timed_out?: boolean;
  timedOut?: boolean;
  /** `error` events: the API's code, message and details. */
  code?: string;
  message?: string;
  error?: string;
  details?: Record<string, unknown>;
  sessionId?: string;
}

export interface ProcessOptions {
  cwd?: string;
  env?: Record<string, string | undefined>;
  /** A fixed id (default: generated, `p-…`); an ended process's id may be reused. */
  id?: string;
  /** Alias of id (the hosted SDK's name). */
  processId?: string;
  sessionId?: string;
  session?: string;
}

export interface WriteFileOptions {
  /** `base64`: `content` is base64 text to decode. Default: text as UTF-8. */
  encoding?: 'utf-8' | 'utf8' | 'base64';
  /** Octal mode such as `"0755"`. */
  mode?: string;
  signal?: AbortSignal;
}

export interface WriteFileResult {
  success: true;
  path: string;
  size: number;
  sha256: string;
  timestamp: string;
}

export interface ReadFileResult {
  success: true;
  path: string;
  /** Text (encoding utf-8) or base64 (binary content, or when asked). */
  content: string;
  encoding: 'utf-8' | 'base64';
  isBinary: boolean;
  mimeType: string;
  size: number;
  timestamp: string;
}

export interface FileInfo {
  name: string;
  absolutePath: string;
  relativePath: string;
  type: 'file' | 'directory' | 'symlink' | 'other';
  size: number;
  mode: string;
  modifiedAt: string;
}

export interface ListFilesResult {
  success: true;
  path: string;
  files: FileInfo[];
  count: number;
  truncated: boolean;
  timestamp: string;
}

export interface GitCheckoutResult {
  success: true;
  repoUrl: string;
  branch: string;
  targetDir: string;
  commit: string;
  timestamp: string;
}

export interface ExposedPort {
  port: number;
  url: string;
  token: string;
  name?: string;
  /** Opened without a token (`url` is then `{port}-{id}-public.{domain}`). */
  public?: boolean;
}

export interface WatchOptions {
  /** Default true. */
  recursive?: boolean;
  /** Globs of paths to report (matched against the relative path and the file name). */
  include?: string[];
  /** Globs of paths to skip (an excluded directory is not watched at all). */
  exclude?: string[];
  signal?: AbortSignal;
}

export type FileWatchEventType = 'create' | 'modify' | 'delete' | 'move_from' | 'move_to' | 'attrib';

/** Events of a `watch` stream. A file event's `type` is its kind, as is `eventType`. */
export type FileWatchSSEEvent =
  | { type: 'watching'; path: string }
  | {
      type: FileWatchEventType;
      eventType: FileWatchEventType;
      path: string;
      isDirectory: boolean;
      timestamp: string;
    }
  | { type: 'error'; error: string; message: string };

/** A progress report of a snapshot, restore, fork or sleep. */
export interface TransferProgress {
  /** `archive` (out of the sandbox), `fetch` (into the node's cache), `unpack`. */
  phase: string;
  bytes: number;
  totalBytes?: number;
}

export interface SnapshotOptions {
  name?: string;
  /** Only these directories (default: everything the sandbox changed). */
  dirs?: string[];
  onProgress?: (p: TransferProgress) => void;
}

export interface CodeContext {
  readonly id: string;
  readonly language: 'python' | 'javascript' | 'typescript';
  readonly cwd: string;
  readonly createdAt: Date;
}

export interface CreateContextOptions {
  /** Default python. */
  language?: 'python' | 'javascript' | 'typescript';
  cwd?: string;
  env?: Record<string, string>;
  /** Alias of env (the hosted SDK's name). */
  envVars?: Record<string, string>;
}

export interface OutputMessage {
  text: string;
  /** ms since the epoch, when the client received it. */
  timestamp: number;
}

export interface ExecutionError {
  name: string;
  message: string;
  /** Lines of the traceback. */
  traceback: string[];
  /** Set when the platform (not the code) failed: the API's error code. */
  code?: string;
}

export interface Result {
  text?: string;
  html?: string;
  markdown?: string;
  json?: unknown;
  png?: string;
  jpeg?: string;
  svg?: string;
  latex?: string;
  /** The representations this result has. */
  formats(): string[];
}

export interface RunCodeOptions {
  /** The context (from createCodeContext); default: one default context per language. */
  context?: CodeContext | string;
  language?: 'python' | 'javascript' | 'typescript';
  /** ms */
  timeout?: number;
  onStdout?: (output: OutputMessage) => void | Promise<void>;
  onStderr?: (output: OutputMessage) => void | Promise<void>;
  onResult?: (result: Result) => void | Promise<void>;
  onError?: (error: ExecutionError) => void | Promise<void>;
  signal?: AbortSignal;
}

export interface Execution {
  code: string;
  logs: { stdout: string[]; stderr: string[] };
  results: Result[];
  error?: ExecutionError;
  executionCount?: number;
}

const RESULT_FORMATS = ['text', 'html', 'markdown', 'json', 'png', 'jpeg', 'svg', 'latex'] as const;

function makeResult(raw: Record<string, unknown>): Result {
  const r: Record<string, unknown> = {};
  for (const f of RESULT_FORMATS) if (raw[f] !== undefined && raw[f] !== null) r[f] = raw[f];
  Object.defineProperty(r, 'formats', {
    value: () => RESULT_FORMATS.filter((f) => r[f] !== undefined),
    enumerable: false,
  });
  return r as unknown as Result;
}

function makeExecutionError(raw: Record<string, any>): ExecutionError {
  const tb = raw.traceback;
  const e: ExecutionError = {
    name: raw.name ?? 'Error',
    message: raw.message ?? '',
    traceback: Array.isArray(tb) ? tb : typeof tb === 'string' && tb ? tb.split('\n') : [],
  };
  if (raw.code) e.code = raw.code;
  return e;
}

function cleanEnv(env?: Record<string, string | undefined>): Record<string, string> | undefined {
  if (!env) return undefined;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined) out[k] = v;
  return out;
}

/** Warren's exec event in the SDK's shape (camelCase aliases beside the API's fields). */
export function normalizeExecEvent(ev: Record<string, any>, command?: string, sessionId?: string): ExecEvent {
  const out: ExecEvent = { ...ev, timestamp: new Date().toISOString() } as ExecEvent;
  if (sessionId !== undefined) out.sessionId = sessionId;
  switch (ev.type) {
    case 'start':
      if (command !== undefined) out.command = command;
      break;
    case 'stdout':
    case 'stderr':
      if (ev.data === undefined && ev.data_base64 !== undefined) out.data = utf8Lossy(base64ToBytes(ev.data_base64));
      break;
    case 'complete':
      out.exitCode = ev.exit_code;
      out.timedOut = ev.timed_out;
      break;
    case 'error':
      out.error = ev.message;
      if (ev.details && typeof ev.details.exit_code === 'number') out.exitCode = ev.details.exit_code;
      break;
  }
  return out;
}

/** Warren's watch event in the SDK's shape. */
export function normalizeWatchEvent(ev: Record<string, any>): FileWatchSSEEvent {
  if (ev.type === 'event') {
    return {
      type: ev.event,
      eventType: ev.event,
      path: ev.path,
      isDirectory: !!ev.is_dir,
      timestamp: ev.timestamp,
    };
  }
  if (ev.type === 'error') return { type: 'error', error: ev.message, message: ev.message };
  return ev as FileWatchSSEEvent;
}

function responseMeta(resp: Response): { requestId?: string; node?: string } {
  return {
    requestId: resp.headers.get('x-request-id') ?? undefined,
    node: resp.headers.get('x-warren-node') ?? undefined,
  };
}

function chunkBytes(ev: Record<string, any>): Uint8Array {
  // data_base64 first: a normalized event also has a lossy `data` beside it.
  if (typeof ev.data_base64 === 'string') return base64ToBytes(ev.data_base64);
  if (typeof ev.data === 'string') return new TextEncoder().encode(ev.data);
  return new Uint8Array(0);
}

function textAndBase64(parts: Uint8Array[]): { text: string; base64?: string } {
  const bytes = concatBytes(parts);
  const strict = utf8OrUndefined(bytes);
  if (strict !== undefined) return { text: strict };
  return { text: utf8Lossy(bytes), base64: Buffer.from(bytes).toString('base64') };
}


// ---- the sandbox ------------------------------------------------------------------------

/**
 * A handle on sandbox `id`. Creating the handle sends nothing; the first call creates the
 * sandbox (with the handle's options) if it does not exist and wakes it if it sleeps.
 */
export class Sandbox {
  readonly id: string;
  readonly client: Warren;
  readonly options: SandboxOptions;
  private ensured: Promise<void> | null = null;
  private defaultContexts = new Map<string, Promise<CodeContext>>();

  constructor(client: Warren, id: string, options: SandboxOptions = {}) {
    this.id = options.normalizeId ? id.toLowerCase() : id;
    validateSandboxId(this.id);
    this.client = client;
    this.options = options;
    createRequestBody(options); // validates sleepAfter and persist early
  }

  private p(rest: string): string {
    return `/v1/sandboxes/${encodeURIComponent(this.id)}${rest}`;
  }

  private hasConfig(): boolean {
    const { normalizeId: _n, ...rest } = this.options;
    return Object.values(rest).some((v) => v !== undefined);
  }

  /**
   * Makes sure the sandbox exists with this handle's options before the first operation
   * (once per handle; with no options the first operation creates it with defaults).
   */
  async ready(): Promise<void> {
    if (!this.hasConfig()) return;
    if (!this.ensured) {
      this.ensured = this.start().then(
        () => undefined,
        (e) => {
          this.ensured = null;
          throw e;
        },
      );
    }
    return this.ensured;
  }

  // ---- lifecycle ------------------------------------------------------------------------

  /**
   * `PUT /v1/sandboxes/{id}` with the handle's options: ensures the sandbox exists and runs
   * (and updates labels, sleepAfter, keepAlive, persist of an existing one). With
   * `snapshot`, a new sandbox starts from that snapshot.
   */
  async start(options: { snapshot?: string; signal?: AbortSignal } = {}): Promise<SandboxInfo> {
    const info = await this.client.json<SandboxInfo>('PUT', this.p(''), {
      json: createRequestBody(this.options, options.snapshot),
      idempotent: true,
      signal: options.signal,
    });
    if (!this.ensured) this.ensured = Promise.resolve();
    return info;
  }

  /** `GET /v1/sandboxes/{id}`: never creates or wakes; SandboxNotFoundError when absent. */
  getInfo(): Promise<SandboxInfo> {
    return this.client.json('GET', this.p(''), { idempotent: true });
  }

  /** The sandbox's info, or null when it does not exist (never creates or wakes). */
  async info(): Promise<SandboxInfo | null> {
    try {
      return await this.getInfo();
    } catch (e) {
      if (e instanceof NotFoundError) return null;
      throw e;
    }
  }

  /** Persists per its persist setting, stops it: state `sleeping`. The next call wakes it. */
  async sleep(options: { onProgress?: (p: TransferProgress) => void } = {}): Promise<SandboxInfo> {
    return this.transfer('/sleep', undefined, options.onProgress, true);
  }

  /** Deletes the sandbox: container, disk and processes (named snapshots stay). */
  async destroy(): Promise<void> {
    await this.client.request('DELETE', this.p(''), { idempotent: true });
    this.ensured = null;
    this.defaultContexts.clear();
  }

  // ---- exec -----------------------------------------------------------------------------

  exec(command: string, options: StreamExecOptions): Promise<ReadableStream<Uint8Array>>;
  exec(file: string, args: string[], options: StreamExecOptions): Promise<ReadableStream<Uint8Array>>;
  exec(command: string, options?: ExecOptions): Promise<ExecResult>;
  exec(file: string, args: string[], options?: ExecOptions): Promise<ExecResult>;
  /**
   * Runs a bash script in the session's shell (`exec("ls -la")`), or a program with its
   * arguments without a shell (`exec("npm", ["test"])`). Resolves the result; with
   * `{stream: true}` (and no callbacks), the SSE stream of ExecEvents; with output callbacks
   * (`onOutput`, `onStdout`, `onStderr`, `onComplete`; with or without `stream: true`, as in
   * the hosted SDK), streams, calls them as output arrives, then resolves the result.
   */
  async exec(
    commandOrFile: string,
    argsOrOptions?: string[] | ExecOptions,
    maybeOptions?: ExecOptions,
  ): Promise<ExecResult | ReadableStream<Uint8Array>> {
    const argv = Array.isArray(argsOrOptions) ? [commandOrFile, ...argsOrOptions] : undefined;
    const options = (Array.isArray(argsOrOptions) ? maybeOptions : argsOrOptions) ?? {};
    const display = argv ? argv.join(' ') : commandOrFile;
    const body = this.execBody(argv ? { argv } : { command: commandOrFile }, options);
    const sessionId = options.sessionId ?? options.session;
    const wantsCallbacks = !!(options.onOutput || options.onStdout || options.onStderr || options.onComplete);
    await this.ready();
    if (options.stream && !wantsCallbacks) {
      return this.execStreamRaw(body, display, sessionId, options);
    }
    const timestamp = new Date().toISOString();
    // JSON mode only for calls that surely answer within Node fetch's 300 s headers
    // timeout (undici's default): longer or unbounded commands are collected from the
    // stream, whose keepalives keep the connection alive.
    const jsonMode = !wantsCallbacks && options.timeout !== undefined && options.timeout <= JSON_EXEC_MAX_MS;
    if (jsonMode) {
      try {
        const r = await this.client.json<Record<string, any>>('POST', this.p('/exec'), {
          json: body,
          signal: options.signal,
        });
        const result: ExecResult = {
          success: r.success,
          exitCode: r.exit_code,
          stdout: r.stdout,
          stderr: r.stderr,
          command: display,
          duration: r.duration_ms,
          timestamp,
          timedOut: r.timed_out,
          truncated: r.truncated,
          ...(r.stdout_base64 !== undefined ? { stdoutBase64: r.stdout_base64 } : {}),
          ...(r.stderr_base64 !== undefined ? { stderrBase64: r.stderr_base64 } : {}),
          ...(sessionId !== undefined ? { sessionId } : {}),
        };
        return result;
      } catch (e) {
        options.onError?.(e as Error);
        throw e;
      }
    }
    const resp = await this.client.request('POST', this.p('/exec'), { json: body, sse: true, signal: options.signal });
    const meta = responseMeta(resp);
    const stream = mapSSEStream(new SSEReader(resp), (raw: Record<string, any>) => normalizeExecEvent(raw, display, sessionId));
    const out: Uint8Array[] = [];
    const err: Uint8Array[] = [];
    const outBytes = { n: 0 };
    const errBytes = { n: 0 };
    let truncated = false;
    const reader = new SSEReader(stream);
    try {
      for (;;) {
        const ev = await reader.next<ExecEvent>();
        if (ev === null) {
          throw new ProtocolError({ code: 'PROTOCOL_ERROR', message: 'the exec stream ended without complete' });
        }
        if (ev.type === 'stdout' || ev.type === 'stderr') {
          const bytes = chunkBytes(ev);
          const sink = ev.type === 'stdout' ? out : err;
          const kept = ev.type === 'stdout' ? outBytes : errBytes;
          // As JSON mode: keep at most 16 MiB of each stream, say so with `truncated`.
          const room = OUTPUT_LIMIT - kept.n;
          if (bytes.byteLength > room) truncated = true;
          if (room > 0) {
            sink.push(room >= bytes.byteLength ? bytes : bytes.subarray(0, room));
            kept.n += Math.min(room, bytes.byteLength);
          }
          const text = ev.data ?? '';
          options.onOutput?.(ev.type, text);
          if (ev.type === 'stdout') options.onStdout?.(text);
          else options.onStderr?.(text);
        } else if (ev.type === 'complete') {
          const o = textAndBase64(out);
          const e = textAndBase64(err);
          const result: ExecResult = {
            success: ev.exit_code === 0 && !ev.timed_out,
            exitCode: ev.exit_code!,
            stdout: o.text,
            stderr: e.text,
            command: display,
            duration: ev.duration_ms ?? 0,
            timestamp,
            timedOut: !!ev.timed_out,
            truncated,
            ...(o.base64 !== undefined ? { stdoutBase64: o.base64 } : {}),
            ...(e.base64 !== undefined ? { stderrBase64: e.base64 } : {}),
            ...(sessionId !== undefined ? { sessionId } : {}),
          };
          options.onComplete?.(result);
          return result;
        } else if (ev.type === 'error') {
          // As JSON mode's 410: the output so far goes in details.
          const details: Record<string, unknown> = { ...(ev.details ?? {}) };
          if (ev.code === 'SESSION_TERMINATED') {
            // The stream's error event carries empty stdout/stderr: they came as events.
            details['stdout'] = textAndBase64(out).text;
            details['stderr'] = textAndBase64(err).text;
          }
          throw errorFromBody({ ...(ev as any), details }, undefined, meta);
        }
      }
    } catch (e) {
      options.onError?.(e as Error);
      throw e;
    } finally {
      await reader.cancel();
    }
  }

  /** Runs a command (or `file, args`) and resolves its SSE stream of ExecEvents. */
  execStream(command: string, options?: ExecOptions): Promise<ReadableStream<Uint8Array>>;
  execStream(file: string, args: string[], options?: ExecOptions): Promise<ReadableStream<Uint8Array>>;
  execStream(
    commandOrFile: string,
    argsOrOptions?: string[] | ExecOptions,
    maybeOptions?: ExecOptions,
  ): Promise<ReadableStream<Uint8Array>> {
    // Callbacks are observers here: the stream is always returned.
    const argv = Array.isArray(argsOrOptions) ? [commandOrFile, ...argsOrOptions] : undefined;
    const options = (Array.isArray(argsOrOptions) ? maybeOptions : argsOrOptions) ?? {};
    const body = this.execBody(argv ? { argv } : { command: commandOrFile }, options);
    return this.ready().then(() =>
      this.execStreamRaw(body, argv ? argv.join(' ') : commandOrFile, options.sessionId ?? options.session, options),
    );
  }

  private execBody(cmd: { command: string } | { argv: string[] }, o: ExecOptions): Record<string, unknown> {
    const body: Record<string, unknown> = { ...cmd };
    if (o.cwd !== undefined) body['cwd'] = o.cwd;
    const env = cleanEnv(o.env);
    if (env) body['env'] = env;
    if (o.timeout !== undefined) body['timeout_ms'] = o.timeout;
    const session = o.sessionId ?? o.session;
    if (session !== undefined) body['session'] = session;
    if (typeof o.stdin === 'string') body['stdin'] = o.stdin;
    else if (o.stdin instanceof Uint8Array) body['stdin_base64'] = Buffer.from(o.stdin).toString('base64');
    return body;
  }

  private async execStreamRaw(
    body: Record<string, unknown>,
    command: string,
    sessionId: string | undefined,
    observers: ExecOptions,
  ): Promise<ReadableStream<Uint8Array>> {
    const resp = await this.client.request('POST', this.p('/exec'), {
      json: body,
      sse: true,
      signal: observers.signal,
    });
    const meta = responseMeta(resp);
    return mapSSEStream(new SSEReader(resp), (raw: Record<string, any>) => {
      const ev = normalizeExecEvent(raw, command, sessionId);
      if (ev.type === 'stdout' || ev.type === 'stderr') {
        observers.onOutput?.(ev.type, ev.data ?? '');
        if (ev.type === 'stdout') observers.onStdout?.(ev.data ?? '');
        else observers.onStderr?.(ev.data ?? '');
      } else if (ev.type === 'error') {
        observers.onError?.(errorFromBody(raw as any, undefined, meta));
      }
      return ev;
    });
  }

  // ---- sessions and env -----------------------------------------------------------------

  /**
   * Creates (or returns, when `id` exists) a session: its own shell, env and cwd over the
   * shared filesystem. The returned object runs calls in that session.
   */
  async createSession(options: { id?: string; env?: Record<string, string | undefined>; cwd?: string } = {}): Promise<ExecutionSession> {
    await this.ready();
    const body: Record<string, unknown> = {};
    if (options.id !== undefined) body['id'] = options.id;
    const env = cleanEnv(options.env);
    if (env) body['env'] = env;
    if (options.cwd !== undefined) body['cwd'] = options.cwd;
    const r = await this.client.json<{ id: string; cwd: string }>('POST', this.p('/sessions'), {
      json: body,
      idempotent: options.id !== undefined,
    });
    return new ExecutionSession(this, r.id, r.cwd);
  }

  /** The sandbox's sessions. */
  async listSessions(): Promise<{ id: string; cwd: string }[]> {
    await this.ready();
    const r = await this.client.json<{ sessions: { id: string; cwd: string }[] }>('GET', this.p('/sessions'), { idempotent: true });
    return r.sessions;
  }

  /** A session object for an existing (or to-be-created-on-use) session id. */
  getSession(id: string): ExecutionSession {
    return new ExecutionSession(this, id, undefined);
  }

  /** Kills the session's shell and its processes (idempotent). */
  async deleteSession(sessionId: string): Promise<void> {
    await this.ready();
    await this.client.request('DELETE', this.p(`/sessions/${encodeURIComponent(sessionId)}`), { idempotent: true });
  }

  /**
   * Sets (or, with `undefined`/`null`, unsets) environment variables: of every session and
   * later ones, or of `sessionId` (and later sessions).
   */
  async setEnvVars(env: Record<string, string | undefined | null>, options: { sessionId?: string } = {}): Promise<{ sessions: string[] }> {
    await this.ready();
    const patch: Record<string, string | null> = {};
    for (const [k, v] of Object.entries(env)) patch[k] = v ?? null;
    return this.client.json('PATCH', this.p('/env'), {
      json: { env: patch, ...(options.sessionId !== undefined ? { session: options.sessionId } : {}) },
      idempotent: true,
    });
  }

  // ---- processes ------------------------------------------------------------------------

  /** Starts a background process (`bash -c command`, or `argv` without a shell). */
  async startProcess(command: string | string[], options: ProcessOptions = {}): Promise<Process> {
    await this.ready();
    const body: Record<string, unknown> = Array.isArray(command) ? { argv: command } : { command };
    if (options.cwd !== undefined) body['cwd'] = options.cwd;
    const env = cleanEnv(options.env);
    if (env) body['env'] = env;
    const id = options.id ?? options.processId;
    if (id !== undefined) body['id'] = id;
    const session = options.sessionId ?? options.session;
    if (session !== undefined) body['session'] = session;
    const info = await this.client.json<ProcessInfo>('POST', this.p('/processes'), { json: body });
    return new Process(this, info, session);
  }

  async listProcesses(): Promise<Process[]> {
    await this.ready();
    const r = await this.client.json<{ processes: ProcessInfo[] }>('GET', this.p('/processes'), { idempotent: true });
    return r.processes.map((i) => new Process(this, i));
  }

  /** The process, or null when there is no such id. */
  async getProcess(id: string): Promise<Process | null> {
    await this.ready();
    try {
      const info = await this.client.json<ProcessInfo>('GET', this.p(`/processes/${encodeURIComponent(id)}`), {
        idempotent: true,
      });
      return new Process(this, info);
    } catch (e) {
      if (e instanceof NotFoundError && e.code === 'PROCESS_NOT_FOUND') return null;
      throw e;
    }
  }

  /** Signals a process tree (default TERM, SIGKILL after the grace). */
  async killProcess(id: string, signal = 'TERM', options: { graceMs?: number } = {}): Promise<Process> {
    await this.ready();
    const info = await this.client.json<ProcessInfo>('DELETE', this.p(`/processes/${encodeURIComponent(id)}`), {
      query: { signal, grace_ms: options.graceMs },
      idempotent: true,
    });
    return new Process(this, info);
  }

  /** Kills every running process; resolves how many were running. */
  async killAllProcesses(signal = 'TERM', options: { graceMs?: number } = {}): Promise<number> {
    const running = (await this.listProcesses()).filter((p) => p.status === 'running');
    await Promise.all(running.map((p) => p.kill(signal, options)));
    return running.length;
  }

  async getProcessLogs(id: string, options: { since?: number } = {}): Promise<{ stdout: string; stderr: string; cursor: number; processId: string }> {
    await this.ready();
    const r = await this.client.json<{ stdout: string; stderr: string; cursor: number }>(
      'GET',
      this.p(`/processes/${encodeURIComponent(id)}/logs`),
      { query: { since: options.since }, idempotent: true },
    );
    return { ...r, processId: id };
  }

  /** The SSE stream of a process's log (replay, then follow until it exits). */
  async streamProcessLogs(id: string, options: { since?: number; follow?: boolean; signal?: AbortSignal } = {}): Promise<ReadableStream<Uint8Array>> {
    await this.ready();
    const resp = await this.client.request('GET', this.p(`/processes/${encodeURIComponent(id)}/logs`), {
      query: { since: options.since, follow: options.follow ?? true },
      sse: true,
      idempotent: true,
      signal: options.signal,
    });
    return mapSSEStream(new SSEReader(resp), (ev: Record<string, any>) => normalizeLogEvent(ev, id));
  }

  // ---- files ----------------------------------------------------------------------------

  /**
   * Writes a file (parents are created; atomic). `content`: text, bytes, a Blob, a
   * ReadableStream or an async iterable of chunks (streamed, never buffered whole).
   */
  async writeFile(
    path: string,
    content: string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array | string>,
    options: WriteFileOptions = {},
  ): Promise<WriteFileResult> {
    await this.ready();
    const abs = absPath(path);
    let body: Uint8Array | Blob | ReadableStream<Uint8Array>;
    if (typeof content === 'string') {
      body = options.encoding === 'base64' ? base64ToBytes(content) : new TextEncoder().encode(content);
    } else if (content instanceof Uint8Array) {
      body = content;
    } else if (content instanceof ArrayBuffer) {
      body = new Uint8Array(content);
    } else if (typeof Blob !== 'undefined' && content instanceof Blob) {
      body = content;
    } else if (content instanceof ReadableStream) {
      body = content;
    } else if (content && typeof (content as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function') {
      const it = (content as AsyncIterable<Uint8Array | string>)[Symbol.asyncIterator]();
      const enc = new TextEncoder();
      body = new ReadableStream<Uint8Array>({
        async pull(ctrl) {
          const r = await it.next();
          if (r.done) ctrl.close();
          else ctrl.enqueue(typeof r.value === 'string' ? enc.encode(r.value) : r.value);
        },
        async cancel() {
          await it.return?.();
        },
      });
    } else {
      throw invalid('writeFile content must be a string, bytes, a Blob, a ReadableStream or an async iterable');
    }
    const r = await this.client.json<{ path: string; size: number; sha256: string }>('PUT', filePath(this.id, abs), {
      body: body as BodyInit,
      query: { mode: options.mode },
      headers: { 'content-type': 'application/octet-stream' },
      idempotent: true,
      signal: options.signal,
    });
    return { success: true, ...r, timestamp: new Date().toISOString() };
  }

  /**
   * Reads a file. Text content comes as `encoding: 'utf-8'`; content that is not UTF-8 text
   * (or `{encoding: 'base64'}`) as base64. For bytes use readFileBytes, for large files
   * readFileStream.
   */
  async readFile(path: string, options: { encoding?: 'utf-8' | 'utf8' | 'base64'; signal?: AbortSignal } = {}): Promise<ReadFileResult> {
    const resp = await this.fileResponse(path, options.signal);
    const bytes = new Uint8Array(await resp.arrayBuffer());
    const mimeType = resp.headers.get('content-type') ?? 'application/octet-stream';
    const text = options.encoding === 'base64' ? undefined : utf8OrUndefined(bytes);
    const isBinary = utf8OrUndefined(bytes) === undefined;
    return {
      success: true,
      path: absPath(path),
      content: text !== undefined ? text : Buffer.from(bytes).toString('base64'),
      encoding: text !== undefined ? 'utf-8' : 'base64',
      isBinary,
      mimeType,
      size: bytes.byteLength,
      timestamp: new Date().toISOString(),
    };
  }

  /** A file's bytes. */
  async readFileBytes(path: string, options: { signal?: AbortSignal } = {}): Promise<Uint8Array> {
    const resp = await this.fileResponse(path, options.signal);
    return new Uint8Array(await resp.arrayBuffer());
  }

  /** A file's bytes as a stream (any size; nothing is buffered whole). */
  async readFileStream(path: string, options: { signal?: AbortSignal } = {}): Promise<ReadableStream<Uint8Array>> {
    const resp = await this.fileResponse(path, options.signal);
    return resp.body ?? new ReadableStream({ start: (c) => c.close() });
  }

  /**
   * The directory `path` as a tar stream (entries relative to it; modes, times, symbolic
   * links). Not a directory: `WarrenError` with code `NOT_A_DIRECTORY`.
   */
  async downloadDir(path: string, options: { signal?: AbortSignal } = {}): Promise<ReadableStream<Uint8Array>> {
    await this.ready();
    const resp = await this.client.request('GET', this.p('/fs/archive'), {
      query: { path: absPath(path) },
      idempotent: true,
      signal: options.signal,
    });
    return resp.body ?? new ReadableStream({ start: (c) => c.close() });
  }

  /**
   * Unpacks a tar (bytes, a Blob or a ReadableStream: streamed) into the **new** directory
   * `path`, all or nothing → `{path, entries, bytes}`. Something already at `path`:
   * `ALREADY_EXISTS`; an entry that leaves the directory: `INVALID_ARGUMENT`.
   */
  async uploadDir(
    path: string,
    tar: Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>,
    options: { signal?: AbortSignal } = {},
  ): Promise<{ path: string; entries: number; bytes: number }> {
    await this.ready();
    const body = tar instanceof ArrayBuffer ? new Uint8Array(tar) : tar;
    return this.client.json('PUT', this.p('/fs/archive'), {
      body: body as BodyInit,
      query: { path: absPath(path) },
      headers: { 'content-type': 'application/x-tar' },
      // A second try after an answer that was lost would find the directory made.
      idempotent: false,
      signal: options.signal,
    });
  }

  private async fileResponse(path: string, signal?: AbortSignal): Promise<Response> {
    await this.ready();
    return this.client.request('GET', filePath(this.id, absPath(path)), { idempotent: true, signal });
  }

  /** `{path, type, size, mode, modified_at}`; FileNotFoundError when missing. */
  async stat(path: string): Promise<{ path: string; type: FileInfo['type']; size: number; mode: string; modified_at: string }> {
    await this.ready();
    return this.client.json('GET', this.p('/fs/stat'), { query: { path: absPath(path) }, idempotent: true });
  }

  async exists(path: string): Promise<{ success: true; path: string; exists: boolean; timestamp: string }> {
    const timestamp = new Date().toISOString();
    try {
      await this.stat(path);
      return { success: true, path: absPath(path), exists: true, timestamp };
    } catch (e) {
      if (e instanceof FileNotFoundError) return { success: true, path: absPath(path), exists: false, timestamp };
      throw e;
    }
  }

  async mkdir(path: string, options: { recursive?: boolean } = {}): Promise<{ success: true; path: string; recursive: boolean; created: boolean; timestamp: string }> {
    await this.ready();
    const recursive = options.recursive ?? false;
    const resp = await this.client.request('POST', this.p('/fs/mkdir'), {
      json: { path: absPath(path), recursive },
      idempotent: recursive,
    });
    const r = (await resp.json()) as { path: string };
    return { success: true, path: r.path, recursive, created: resp.status === 201, timestamp: new Date().toISOString() };
  }

  async listFiles(path = '/workspace', options: { recursive?: boolean; includeHidden?: boolean } = {}): Promise<ListFilesResult> {
    await this.ready();
    const r = await this.client.json<{ entries: Record<string, any>[]; truncated?: boolean }>('GET', this.p('/fs/list'), {
      query: { path: absPath(path), recursive: options.recursive ?? false, hidden: options.includeHidden ?? false },
      idempotent: true,
    });
    const files: FileInfo[] = r.entries.map((e) => ({
      name: e.name,
      absolutePath: e.path,
      relativePath: e.relative_path,
      type: e.type,
      size: e.size,
      mode: e.mode,
      modifiedAt: e.modified_at,
    }));
    return {
      success: true,
      path: absPath(path),
      files,
      count: files.length,
      truncated: !!r.truncated,
      timestamp: new Date().toISOString(),
    };
  }

  /** Moves (or renames) a file or directory; the destination's parents are created. */
  async moveFile(from: string, to: string, options: { overwrite?: boolean } = {}): Promise<{ success: true; path: string; newPath: string; timestamp: string }> {
    await this.ready();
    await this.client.json('POST', this.p('/fs/move'), {
      json: { from: absPath(from), to: absPath(to), overwrite: options.overwrite ?? false },
    });
    return { success: true, path: absPath(from), newPath: absPath(to), timestamp: new Date().toISOString() };
  }

  renameFile(oldPath: string, newPath: string, options: { overwrite?: boolean } = {}) {
    return this.moveFile(oldPath, newPath, options);
  }

  /** Deletes a file (a directory needs `{recursive: true}`). */
  async deleteFile(path: string, options: { recursive?: boolean } = {}): Promise<{ success: true; path: string; timestamp: string }> {
    await this.ready();
    await this.client.request('DELETE', filePath(this.id, absPath(path)), {
      query: { recursive: options.recursive ?? false },
      idempotent: true,
    });
    return { success: true, path: absPath(path), timestamp: new Date().toISOString() };
  }

  // ---- git ------------------------------------------------------------------------------

  /** Clones `url` (default target `/workspace/<repo name>`); GitFailedError with git's message. */
  async gitCheckout(
    url: string,
    options: { branch?: string; targetDir?: string; depth?: number; timeout?: number; cloneTimeoutMs?: number } = {},
  ): Promise<GitCheckoutResult> {
    await this.ready();
    const body: Record<string, unknown> = { url };
    if (options.branch !== undefined) body['branch'] = options.branch;
    if (options.targetDir !== undefined) body['target_dir'] = options.targetDir;
    if (options.depth !== undefined) body['depth'] = options.depth;
    const t = options.timeout ?? options.cloneTimeoutMs;
    if (t !== undefined) body['timeout_ms'] = t;
    const r = await this.client.json<{ url: string; branch: string; target_dir: string; commit: string }>(
      'POST',
      this.p('/git/checkout'),
      { json: body },
    );
    return {
      success: true,
      repoUrl: r.url,
      branch: r.branch,
      targetDir: r.target_dir,
      commit: r.commit,
      timestamp: new Date().toISOString(),
    };
  }

  // ---- ports ----------------------------------------------------------------------------

  /**
   * Exposes `port` at a preview URL `http://{port}-{id}-{token}.{domain}[:port]/` (with
   * `public: true`, `http://{port}-{id}-public.{domain}[:port]/`, opened without a token).
   */
  async exposePort(
    port: number,
    options: { name?: string; token?: string; public?: boolean } = {},
  ): Promise<ExposedPort> {
    await this.ready();
    return this.client.json('POST', this.p('/ports'), {
      json: {
        port,
        ...(options.name !== undefined ? { name: options.name } : {}),
        ...(options.token !== undefined ? { token: options.token } : {}),
        ...(options.public ? { public: true } : {}),
      },
      // Exposing again keeps the token (and sets the given one): safe to repeat.
      idempotent: true,
    });
  }

  async unexposePort(port: number): Promise<void> {
    await this.ready();
    await this.client.request('DELETE', this.p(`/ports/${port}`), { idempotent: true });
  }

  async getExposedPorts(): Promise<ExposedPort[]> {
    await this.ready();
    const r = await this.client.json<{ ports: ExposedPort[] }>('GET', this.p('/ports'), { idempotent: true });
    return r.ports;
  }

  // ---- watch ----------------------------------------------------------------------------

  /**
   * Watches `path` (default `/workspace`); resolves once the watch is live, with an SSE
   * stream of FileWatchSSEEvents (`watching` first). Cancel the stream to end the watch.
   */
  async watch(path = '/workspace', options: WatchOptions = {}): Promise<ReadableStream<Uint8Array>> {
    await this.ready();
    const resp = await this.client.request('GET', this.p('/watch'), {
      query: {
        path: absPath(path),
        recursive: options.recursive ?? true,
        include: options.include,
        exclude: options.exclude,
      },
      sse: true,
      idempotent: true,
      signal: options.signal,
    });
    const reader = new SSEReader(resp);
    const first = await reader.next<Record<string, any>>();
    if (first === null) {
      throw new ProtocolError({ code: 'PROTOCOL_ERROR', message: 'the watch ended before it started' });
    }
    if (first.type === 'error') {
      await reader.cancel();
      throw errorFromBody({ code: 'INTERNAL', message: first.message });
    }
    return mapSSEStream(reader, normalizeWatchEvent, [normalizeWatchEvent(first)]);
  }

  // ---- code interpreter -----------------------------------------------------------------

  async createCodeContext(options: CreateContextOptions = {}): Promise<CodeContext> {
    await this.ready();
    const body: Record<string, unknown> = { language: options.language ?? 'python' };
    if (options.cwd !== undefined) body['cwd'] = options.cwd;
    const env = options.env ?? options.envVars;
    if (env !== undefined) body['env'] = env;
    const r = await this.client.json<{ id: string; language: CodeContext['language']; cwd: string; created_at: string }>(
      'POST',
      this.p('/contexts'),
      { json: body },
    );
    return { id: r.id, language: r.language, cwd: r.cwd, createdAt: new Date(r.created_at) };
  }

  async listCodeContexts(): Promise<CodeContext[]> {
    await this.ready();
    const r = await this.client.json<{ contexts: { id: string; language: CodeContext['language']; cwd: string; created_at: string }[] }>(
      'GET',
      this.p('/contexts'),
      { idempotent: true },
    );
    return r.contexts.map((c) => ({ id: c.id, language: c.language, cwd: c.cwd, createdAt: new Date(c.created_at) }));
  }

  async deleteCodeContext(context: CodeContext | string): Promise<void> {
    await this.ready();
    const id = typeof context === 'string' ? context : context.id;
    await this.client.request('DELETE', this.p(`/contexts/${encodeURIComponent(id)}`), { idempotent: true });
    for (const [lang, p] of this.defaultContexts) {
      const c = await p.catch(() => null);
      if (c?.id === id) this.defaultContexts.delete(lang);
    }
  }

  private async contextId(options: RunCodeOptions): Promise<{ id: string; isDefault: boolean; language: string }> {
    if (typeof options.context === 'string') return { id: options.context, isDefault: false, language: '' };
    if (options.context) return { id: options.context.id, isDefault: false, language: options.context.language };
    const language = options.language ?? 'python';
    let p = this.defaultContexts.get(language);
    if (!p) {
      p = this.createCodeContext({ language });
      this.defaultContexts.set(language, p);
      p.catch(() => this.defaultContexts.delete(language));
    }
    return { id: (await p).id, isDefault: true, language };
  }

  private async runResponse(code: string, options: RunCodeOptions): Promise<Response> {
    await this.ready();
    const ctx = await this.contextId(options);
    const send = (id: string) =>
      this.client.request('POST', this.p(`/contexts/${encodeURIComponent(id)}/run`), {
        json: { code, ...(options.timeout !== undefined ? { timeout_ms: options.timeout } : {}) },
        sse: true,
        signal: options.signal,
      });
    try {
      return await send(ctx.id);
    } catch (e) {
      // A default context is gone after sleep or a restore: make a new one, once.
      if (e instanceof ContextNotFoundError && ctx.isDefault) {
        this.defaultContexts.delete(ctx.language);
        return send((await this.contextId(options)).id);
      }
      throw e;
    }
  }

  /**
   * Runs code in a context (variables persist between runs, as in a notebook). Output and
   * results reach the callbacks as they happen; resolves the whole Execution.
   */
  async runCode(code: string, options: RunCodeOptions = {}): Promise<Execution> {
    const resp = await this.runResponse(code, options);
    const exec: Execution = { code, logs: { stdout: [], stderr: [] }, results: [] };
    const reader = new SSEReader(resp);
    try {
      for (;;) {
        const ev = await reader.next<Record<string, any>>();
        if (ev === null) break;
        switch (ev.type) {
          case 'stdout':
            exec.logs.stdout.push(ev.text);
            await options.onStdout?.({ text: ev.text, timestamp: Date.now() });
            break;
          case 'stderr':
            exec.logs.stderr.push(ev.text);
            await options.onStderr?.({ text: ev.text, timestamp: Date.now() });
            break;
          case 'result': {
            const { type: _t, ...raw } = ev;
            const r = makeResult(raw);
            exec.results.push(r);
            await options.onResult?.(r);
            break;
          }
          case 'error':
            exec.error = makeExecutionError(ev);
            await options.onError?.(exec.error);
            break;
          case 'complete':
            exec.executionCount = ev.execution_count;
            return exec;
        }
      }
    } finally {
      await reader.cancel();
    }
    if (exec.error?.code) return exec;
    throw new ProtocolError({ code: 'PROTOCOL_ERROR', message: 'the run ended without complete' });
  }

  /** Runs code; resolves the SSE stream of its events (stdout, stderr, result, error, complete). */
  async runCodeStream(code: string, options: RunCodeOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const resp = await this.runResponse(code, options);
    return mapSSEStream(new SSEReader(resp), (ev: Record<string, any>) => ({ ...ev, timestamp: Date.now() }));
  }

  // ---- snapshots, restore, fork ---------------------------------------------------------

  /**
   * A snapshot, restore, fork or sleep: as JSON, or (with `onProgress`) as the stream of
   * `progress {phase, bytes, total_bytes}` events ending with the same result.
   */
  private async transfer<T>(
    path: string,
    body: unknown,
    onProgress: ((p: TransferProgress) => void) | undefined,
    idempotent = false,
  ): Promise<T> {
    await this.ready();
    // Always streamed: progress events keep a long transfer's connection alive (a JSON
    // answer after 300 s would hit Node fetch's headers timeout).
    const resp = await this.client.request('POST', this.p(path), { json: body, sse: true, idempotent });
    const meta = responseMeta(resp);
    const reader = new SSEReader(resp);
    try {
      for (;;) {
        const ev = await reader.next<Record<string, any>>();
        if (ev === null) break;
        if (ev.type === 'progress') {
          onProgress?.({ phase: ev.phase, bytes: ev.bytes, totalBytes: ev.total_bytes });
        } else if (ev.type === 'complete') {
          return ev.result as T;
        } else if (ev.type === 'error') {
          throw errorFromBody(ev as any, undefined, meta);
        }
      }
    } finally {
      await reader.cancel();
    }
    throw new ProtocolError({ code: 'PROTOCOL_ERROR', message: `${path}: the stream ended before the operation did` });
  }

  /** Saves the filesystem (or `dirs`) to the object store; resolves the snapshot's id. */
  async snapshot(options: SnapshotOptions = {}): Promise<string> {
    return (await this.createSnapshot(options)).id;
  }

  /** Like snapshot(), resolving the whole Snapshot record. */
  async createSnapshot(options: SnapshotOptions = {}): Promise<SnapshotInfo> {
    const { onProgress, ...body } = options;
    return this.transfer('/snapshots', body, onProgress);
  }

  async listSnapshots(): Promise<SnapshotInfo[]> {
    return this.client.listSnapshots(this.id);
  }

  /** The sandbox's files become the snapshot's (a new container; processes do not survive). */
  async restore(snapshot: string | { id: string }, options: { onProgress?: (p: TransferProgress) => void } = {}): Promise<SandboxInfo> {
    const id = typeof snapshot === 'string' ? snapshot : snapshot.id;
    const info = await this.transfer<SandboxInfo>('/restore', { snapshot: id }, options.onProgress);
    this.defaultContexts.clear();
    return info;
  }

  /**
   * One snapshot, `count` new sandboxes started from it (ids default `{id}-fork-{i}`), all
   * or nothing. Resolves the snapshot id and handles on the new sandboxes.
   */
  async fork(
    count: number,
    options: { ids?: string[]; onProgress?: (p: TransferProgress) => void } = {},
  ): Promise<{ snapshot: string; sandboxes: Sandbox[]; infos: SandboxInfo[] }> {
    const r = await this.transfer<{ snapshot: SnapshotInfo; sandboxes: SandboxInfo[] }>(
      '/fork',
      { count, ...(options.ids ? { ids: options.ids } : {}) },
      options.onProgress,
    );
    return {
      snapshot: r.snapshot.id,
      sandboxes: r.sandboxes.map((s) => new Sandbox(this.client, s.id)),
      infos: r.sandboxes,
    };
  }

  // ---- egress ---------------------------------------------------------------------------

  /** Replaces the egress policy (effective at once). */
  async setEgress(policy: EgressPolicy): Promise<EgressPolicy> {
    await this.ready();
    return this.client.json('PUT', this.p('/egress'), { json: policy, idempotent: true });
  }

  async getEgress(): Promise<EgressPolicy> {
    await this.ready();
    return this.client.json('GET', this.p('/egress'), { idempotent: true });
  }

  // ---- terminals ------------------------------------------------------------------------

  /**
   * Opens terminal `name` (default `main`; each name is its own shell). Resolves once the
   * socket is attached (the replay of its kept output is delivered first).
   */
  async terminal(name = 'main', options: TerminalOptions = {}): Promise<Terminal> {
    await this.ready();
    const t = new Terminal(this.client, this.id, name, options);
    await t.connect();
    return t;
  }

  /** Ends terminal `name`'s shell (204 also when none runs). */
  async closeTerminal(name = 'main'): Promise<void> {
    await this.ready();
    await this.client.request('DELETE', this.p(`/terminals/${encodeURIComponent(name)}`), { idempotent: true });
  }

  async listTerminals(): Promise<{ name: string; pid: number; shell: string; cols: number; rows: number; cursor: number; attached: number }[]> {
    await this.ready();
    const r = await this.client.json<{ terminals: any[] }>('GET', this.p('/terminals'), { idempotent: true });
    return r.terminals;
  }
}

/** A session of a sandbox: exec, processes and env in that session's shell. */
export class ExecutionSession {
  constructor(
    readonly sandbox: Sandbox,
    readonly id: string,
    readonly cwd: string | undefined,
  ) {}

  exec(command: string, options: StreamExecOptions): Promise<ReadableStream<Uint8Array>>;
  exec(file: string, args: string[], options: StreamExecOptions): Promise<ReadableStream<Uint8Array>>;
  exec(command: string, options?: ExecOptions): Promise<ExecResult>;
  exec(file: string, args: string[], options?: ExecOptions): Promise<ExecResult>;
  exec(a: string, b?: string[] | ExecOptions, c?: ExecOptions): Promise<any> {
    if (Array.isArray(b)) return this.sandbox.exec(a, b, { ...c, sessionId: this.id });
    return this.sandbox.exec(a, { ...b, sessionId: this.id });
  }

  execStream(command: string, options?: ExecOptions): Promise<ReadableStream<Uint8Array>>;
  execStream(file: string, args: string[], options?: ExecOptions): Promise<ReadableStream<Uint8Array>>;
  execStream(a: string, b?: string[] | ExecOptions, c?: ExecOptions): Promise<ReadableStream<Uint8Array>> {
    if (Array.isArray(b)) return this.sandbox.execStream(a, b, { ...c, sessionId: this.id });
    return this.sandbox.execStream(a, { ...b, sessionId: this.id });
  }

  startProcess(command: string | string[], options: ProcessOptions = {}): Promise<Process> {
    return this.sandbox.startProcess(command, { ...options, sessionId: this.id });
  }

  setEnvVars(env: Record<string, string | undefined | null>): Promise<{ sessions: string[] }> {
    return this.sandbox.setEnvVars(env, { sessionId: this.id });
  }

  delete(): Promise<void> {
    return this.sandbox.deleteSession(this.id);
  }
}

/** A handle on sandbox `id` (get-or-create on first use, with `options`). */
export function getSandbox(client: Warren, id: string, options: SandboxOptions = {}): Sandbox {
  return new Sandbox(client, id, options);
}

