// Background processes: a handle with waits, logs and kill.

import type { Sandbox } from './sandbox.js';
import { SSEReader, mapSSEStream } from './sse.js';
import { DEFAULT_WAIT_MS, WAIT_CHUNK_MS, base64ToBytes, regexSource, utf8Lossy } from './util.js';
import { ReadyTimeoutError } from './errors.js';

/**
 * A wait of `timeout` ms (default the API's 5 minutes) made of server-side waits of at most
 * 240 s each: Node's fetch stops waiting for an answer's headers at 300 s.
 */
async function chunkedWait<T>(timeout: number | undefined, send: (timeoutMs: number) => Promise<T>): Promise<T> {
  const total = timeout ?? DEFAULT_WAIT_MS;
  const deadline = Date.now() + total;
  for (;;) {
    const remaining = Math.max(1, deadline - Date.now());
    try {
      return await send(Math.min(remaining, WAIT_CHUNK_MS));
    } catch (e) {
      if (e instanceof ReadyTimeoutError && deadline - Date.now() > 0) continue;
      throw e;
    }
  }
}

export type ProcessStatus = 'running' | 'completed' | 'failed' | 'killed';

/** A process as the API describes it. */
export interface ProcessInfo {
  id: string;
  pid: number;
  command: string;
  status: ProcessStatus;
  exit_code: number | null;
  started_at: string;
  ended_at: string | null;
}

export interface WaitForLogResult {
  /** The whole matching line (stdout or stderr). */
  line: string;
  /** For a RegExp: its match array on the line (capture groups); for a string: `[pattern]`. */
  match?: RegExpMatchArray;
}

export interface WaitForPortOptions {
  /** `http` (GET `path`, status in range; the default, as in the hosted SDK) or `tcp`. */
  mode?: 'http' | 'tcp';
  /** HTTP path (mode http). Default `/`. */
  path?: string;
  /** Accepted status: one code or a range. Default 200–399. */
  status?: number | { min: number; max: number };
  /** ms (default: the API's 5 minutes). */
  timeout?: number;
}

/** One event of `streamLogs` / `streamProcessLogs` (parsed with `parseSSEStream`). */
export interface LogEvent {
  type: 'stdout' | 'stderr' | 'exit' | 'error';
  /** Output text (lossy UTF-8 when the chunk was not valid UTF-8: see `data_base64`). */
  data?: string;
  data_base64?: string;
  /** Byte cursor after this chunk: resume with `streamLogs({since: cursor})`. */
  cursor?: number;
  exitCode?: number;
  exit_code?: number;
  code?: string;
  message?: string;
  processId: string;
  timestamp: string;
}

/** A background process of a sandbox. Its fields are as of the last call that saw it. */
export class Process {
  id: string;
  pid: number;
  command: string;
  status: ProcessStatus;
  exitCode?: number;
  startTime: Date;
  endTime?: Date;
  readonly sessionId?: string;

  constructor(
    private readonly sandbox: Sandbox,
    info: ProcessInfo,
    sessionId?: string,
  ) {
    this.id = info.id;
    this.pid = info.pid;
    this.command = info.command;
    this.status = info.status;
    this.startTime = new Date(info.started_at);
    this.sessionId = sessionId;
    this.update(info);
  }

  /** @internal */
  update(info: ProcessInfo): this {
    this.pid = info.pid;
    this.status = info.status;
    this.exitCode = info.exit_code ?? undefined;
    this.endTime = info.ended_at ? new Date(info.ended_at) : undefined;
    return this;
  }

  private path(rest = ''): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandbox.id)}/processes/${encodeURIComponent(this.id)}${rest}`;
  }

  /** Fetches the process again (`GET …/processes/{id}`). */
  async refresh(): Promise<this> {
    await this.sandbox.ready();
    const info = await this.sandbox.client.json<ProcessInfo>('GET', this.path(), { idempotent: true });
    return this.update(info);
  }

  async getStatus(): Promise<ProcessStatus> {
    return (await this.refresh()).status;
  }

  /**
   * Signals the process tree (`TERM` by default), SIGKILLs what is left after `graceMs`
   * (default 5000). Resolves with the process, status `killed`.
   */
  async kill(signal = 'TERM', options: { graceMs?: number } = {}): Promise<this> {
    await this.sandbox.ready();
    const info = await this.sandbox.client.json<ProcessInfo>('DELETE', this.path(), {
      query: { signal, grace_ms: options.graceMs },
      idempotent: true,
    });
    return this.update(info);
  }

  /**
   * Waits until a whole line of stdout or stderr contains `pattern` (string) or matches it
   * (RegExp; flags i, m, s are passed on), from the start of the log. Rejects with
   * ReadyTimeoutError after `timeout` ms, ProcessExitedError if the process ends first.
   */
  async waitForLog(pattern: string | RegExp, timeout?: number): Promise<WaitForLogResult> {
    await this.sandbox.ready();
    const body: Record<string, unknown> =
      typeof pattern === 'string' ? { pattern } : { regex: regexSource(pattern) };
    const r = await chunkedWait(timeout, (t) =>
      this.sandbox.client.json<{ line: string }>('POST', this.path('/wait/log'), {
        json: { ...body, timeout_ms: t },
        idempotent: true,
      }),
    );
    if (typeof pattern === 'string') {
      const match = [pattern] as unknown as RegExpMatchArray;
      match.index = r.line.indexOf(pattern);
      match.input = r.line;
      return { line: r.line, match };
    }
    // The server matched with its own regex engine; the JS match gives the capture groups.
    const re = new RegExp(pattern.source, pattern.flags.replace('g', '').replace('y', ''));
    return { line: r.line, match: r.line.match(re) ?? undefined };
  }

  /**
   * Waits until `port` accepts connections (`mode: 'tcp'`) or answers HTTP in the status
   * range (`mode: 'http'`, the default).
   */
  async waitForPort(port: number, options: WaitForPortOptions = {}): Promise<{ port: number; status?: number }> {
    await this.sandbox.ready();
    const mode = options.mode ?? 'http';
    const body: Record<string, unknown> = { port, mode };
    if (mode === 'http') {
      if (options.path !== undefined) body['path'] = options.path;
      if (typeof options.status === 'number') {
        body['status_min'] = options.status;
        body['status_max'] = options.status;
      } else if (options.status) {
        body['status_min'] = options.status.min;
        body['status_max'] = options.status.max;
      }
    }
    return chunkedWait(options.timeout, (t) =>
      this.sandbox.client.json<{ port: number; status?: number }>('POST', this.path('/wait/port'), {
        json: { ...body, timeout_ms: t },
        idempotent: true,
      }),
    );
  }

  /** Waits for the process to end; resolves `{exitCode}`. */
  async waitForExit(timeout?: number): Promise<{ exitCode: number }> {
    await this.sandbox.ready();
    const r = await chunkedWait(timeout, (t) =>
      this.sandbox.client.json<{ exit_code: number }>('POST', this.path('/wait/exit'), {
        json: { timeout_ms: t },
        idempotent: true,
      }),
    );
    this.exitCode = r.exit_code;
    return { exitCode: r.exit_code };
  }

  /** Output so far (from `since`, a cursor of an earlier call or event). */
  async getLogs(options: { since?: number } = {}): Promise<{ stdout: string; stderr: string; cursor: number; processId: string }> {
    await this.sandbox.ready();
    const r = await this.sandbox.client.json<{ stdout: string; stderr: string; cursor: number }>(
      'GET',
      this.path('/logs'),
      { query: { since: options.since }, idempotent: true },
    );
    return { stdout: r.stdout, stderr: r.stderr, cursor: r.cursor, processId: this.id };
  }

  /**
   * Replays the log (from `since`, or the start), then follows it until the process exits:
   * an SSE stream of LogEvents (`parseSSEStream`), ending with `exit`.
   */
  async streamLogs(options: { since?: number; follow?: boolean; signal?: AbortSignal } = {}): Promise<ReadableStream<Uint8Array>> {
    await this.sandbox.ready();
    const resp = await this.sandbox.client.request('GET', this.path('/logs'), {
      query: { since: options.since, follow: options.follow ?? true },
      sse: true,
      idempotent: true,
      signal: options.signal,
    });
    const processId = this.id;
    return mapSSEStream(new SSEReader(resp), (ev: Record<string, any>) => normalizeLogEvent(ev, processId));
  }
}

/** Warren's log event in the SDK's shape (camelCase aliases beside the API's fields). */
export function normalizeLogEvent(ev: Record<string, any>, processId: string): LogEvent {
  const out: LogEvent = { ...ev, processId, timestamp: new Date().toISOString() } as LogEvent;
  if ((ev.type === 'stdout' || ev.type === 'stderr') && ev.data === undefined && ev.data_base64 !== undefined) {
    out.data = utf8Lossy(base64ToBytes(ev.data_base64));
  }
  if (ev.type === 'exit') out.exitCode = ev.exit_code;
  return out;
}
