// Terminals over WebSocket (Node: the `ws` package, which can send the Authorization header).
// Binary frames are keystrokes/output; text frames JSON control. On connect the server
// replays kept output (from `since`), sends `ready {cursor}`, then live output. A dropped
// socket reconnects from the cursor of the last byte received: nothing twice, nothing lost.

import { EventEmitter } from 'node:events';
import WebSocket from 'ws';
import type { Warren } from './client.js';
import { NetworkError, TimeoutError, WarrenError, errorFromResponse } from './errors.js';
import { sleepMs } from './util.js';
import { backoffDelay, shouldRetry } from './retry.js';

export interface TerminalOptions {
  cols?: number;
  rows?: number;
  /** Shell program of a new terminal (default bash). */
  shell?: string;
  /** Replay from this cursor (default: all kept output). */
  since?: number;
  /** Reconnect by itself when the socket drops (default true). */
  reconnect?: boolean;
  /** Largest reconnect backoff, ms (default 8000). */
  maxBackoffMs?: number;
  /** How long connect() waits for `ready`, ms (default 30 000). */
  connectTimeoutMs?: number;
}

/**
 * One attachment to a sandbox terminal. Events: `data` (Uint8Array output), `ready`
 * (cursor), `exit` (code), `error` (WarrenError or the server's error message), `reconnect`
 * (attempt), `close`.
 */
export class Terminal extends EventEmitter {
  /** Bytes of output produced up to the last byte received (null before the first ready). */
  cursor: number | null;
  cols: number;
  rows: number;
  /** Every output byte received on this object, decoded (lossy) as text. */
  output = '';
  /** What the last connection replayed before its `ready`. */
  lastReplay = '';
  /** The shell's exit code once it ended. */
  exitCode: number | null = null;
  private ws: WebSocket | null = null;
  private closedByUser = false;
  private attempts = 0;
  private decoder = new TextDecoder('utf-8');

  constructor(
    private readonly client: Warren,
    readonly sandboxId: string,
    readonly name: string,
    private readonly options: TerminalOptions = {},
  ) {
    super();
    this.cursor = options.since ?? null;
    this.cols = options.cols ?? 80;
    this.rows = options.rows ?? 24;
  }

  /** The WebSocket URL (ws:// or wss://) with cols, rows, shell and since. */
  url(): string {
    const base = this.client.url.replace(/^http:/, 'ws:').replace(/^https:/, 'wss:');
    const q = new URLSearchParams({ cols: String(this.cols), rows: String(this.rows) });
    if (this.options.shell) q.set('shell', this.options.shell);
    if (this.cursor !== null) q.set('since', String(this.cursor));
    return `${base}/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/terminals/${encodeURIComponent(this.name)}?${q}`;
  }

  get connected(): boolean {
    return this.ws?.readyState === WebSocket.OPEN;
  }

  /**
   * Opens the socket; resolves at `ready` (after the replay). Retryable refusals (503, 504,
   * 429) and failed connections are retried with backoff within the client's retry budget.
   */
  async connect(): Promise<void> {
    const policy = this.client.retryPolicy;
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.connectOnce();
      } catch (e) {
        const err = e as WarrenError;
        const delayMs = backoffDelay(attempt, policy);
        const retry = shouldRetry({
          idempotent: true,
          status: err.code === 'NETWORK_ERROR' ? undefined : err.status,
          networkError: err.code === 'NETWORK_ERROR',
          retryable: err.retryable,
          elapsedMs: Date.now() - started,
          delayMs,
          retryTimeoutMs: policy.retryTimeoutMs,
        });
        if (!retry || this.closedByUser) throw e;
        await sleepMs(delayMs);
      }
    }
  }

  private connectOnce(): Promise<void> {
    this.closedByUser = false;
    const timeoutMs = this.options.connectTimeoutMs ?? 30_000;
    return new Promise<void>((resolve, reject) => {
      const ws = new WebSocket(this.url(), { headers: { authorization: this.client.authorization() } });
      ws.binaryType = 'nodebuffer';
      this.ws = ws;
      let ready = false;
      let replay = '';
      const replayDecoder = new TextDecoder('utf-8');
      const timer = setTimeout(() => {
        if (!ready) {
          ws.terminate();
          reject(new TimeoutError({ code: 'TIMEOUT', message: `terminal ${this.name}: no ready within ${timeoutMs} ms` }));
        }
      }, timeoutMs);
      ws.on('unexpected-response', (req, res) => {
        // The server answered HTTP instead of upgrading: its body is the API's error. The
        // request must be ended here (ws leaves it open when this event has a listener).
        const chunks: Buffer[] = [];
        const socket = res.socket;
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          clearTimeout(timer);
          const headers = { get: (n: string) => (res.headers[n.toLowerCase()] as string | undefined) ?? null };
          req.destroy();
          // A keep-alive socket outlives its request: close it, or it keeps the process up.
          socket?.destroy();
          if (this.ws === ws) this.ws = null;
          reject(errorFromResponse(res.statusCode ?? 0, Buffer.concat(chunks).toString('utf8'), headers));
        });
      });
      ws.on('message', (data: Buffer, isBinary: boolean) => {
        if (isBinary) {
          const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
          const text = this.decoder.decode(bytes, { stream: true });
          this.output += text;
          if (!ready) replay += replayDecoder.decode(bytes, { stream: true });
          else if (this.cursor !== null) this.cursor += bytes.byteLength;
          this.emit('data', bytes);
          return;
        }
        let msg: { type: string; cursor?: number; code?: number; message?: string };
        try {
          msg = JSON.parse(data.toString('utf8'));
        } catch {
          return;
        }
        if (msg.type === 'ready') {
          ready = true;
          clearTimeout(timer);
          this.cursor = msg.cursor ?? this.cursor;
          this.lastReplay = replay;
          this.attempts = 0;
          this.emit('ready', this.cursor);
          resolve();
        } else if (msg.type === 'exit') {
          this.exitCode = msg.code ?? null;
          this.emit('exit', this.exitCode);
        } else if (msg.type === 'error') {
          this.emitError(new WarrenError({ code: 'INTERNAL', message: msg.message ?? 'terminal error' }));
        }
      });
      ws.on('error', (e) => {
        if (!ready) {
          clearTimeout(timer);
          reject(new NetworkError({ code: 'NETWORK_ERROR', message: `terminal ${this.name}: ${e.message}`, cause: e }));
        }
      });
      ws.on('close', () => {
        if (this.ws !== ws) return;
        this.ws = null;
        if (!ready) return;
        if (this.closedByUser || this.exitCode !== null || this.options.reconnect === false) {
          this.emit('close');
          return;
        }
        void this.reconnectLoop();
      });
    });
  }

  /** 'error' events only when someone listens (an EventEmitter throws otherwise). */
  private emitError(e: unknown): void {
    if (this.listenerCount('error') > 0) this.emit('error', e);
  }

  private async reconnectLoop(): Promise<void> {
    const max = this.options.maxBackoffMs ?? 8000;
    while (!this.closedByUser && this.exitCode === null) {
      const delay = Math.min(max, 250 * 2 ** this.attempts++);
      this.emit('reconnect', this.attempts);
      await sleepMs(delay);
      if (this.closedByUser) return;
      try {
        await this.connect();
        return;
      } catch (e) {
        if (e instanceof WarrenError && e.status >= 400 && e.status < 500 && e.status !== 408 && e.status !== 429) {
          this.emitError(e);
          this.emit('close');
          return;
        }
      }
    }
  }

  /** Drops the socket and attaches again from the cursor (as after a network failure). */
  async reconnect(): Promise<void> {
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.terminate();
    await this.connect();
  }

  /** Sends keystrokes. */
  write(data: string | Uint8Array): void {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
      throw new NetworkError({ code: 'NETWORK_ERROR', message: `terminal ${this.name} is not connected` });
    }
    this.ws.send(typeof data === 'string' ? Buffer.from(data, 'utf8') : data, { binary: true });
  }

  /** Resizes the terminal (the shell sees the new size). */
  resize(cols: number, rows: number): void {
    this.cols = cols;
    this.rows = rows;
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify({ type: 'resize', cols, rows }));
    }
  }

  /**
   * Waits until the output received from `from` (an offset into `output`, default 0)
   * contains `pattern`; resolves the output from `from`.
   */
  waitFor(pattern: string | RegExp, options: { timeout?: number; from?: number } = {}): Promise<string> {
    const from = options.from ?? 0;
    const test = () => {
      const text = this.output.slice(from);
      return (typeof pattern === 'string' ? text.includes(pattern) : pattern.test(text)) ? text : null;
    };
    const hit = test();
    if (hit !== null) return Promise.resolve(hit);
    const timeout = options.timeout ?? 20_000;
    return new Promise((resolve, reject) => {
      const onData = () => {
        const t = test();
        if (t !== null) {
          cleanup();
          resolve(t);
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(
          new TimeoutError({
            code: 'TIMEOUT',
            message: `terminal ${this.name}: ${String(pattern)} not seen within ${timeout} ms; output: ${JSON.stringify(this.output.slice(from).slice(-500))}`,
          }),
        );
      }, timeout);
      const cleanup = () => {
        clearTimeout(timer);
        this.off('data', onData);
      };
      this.on('data', onData);
    });
  }

  /** Closes the socket (the shell keeps running; reconnecting resumes it). */
  close(): void {
    this.closedByUser = true;
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close();
    this.emit('close');
  }
}
