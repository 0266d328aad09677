// @warren/sandbox/xterm: an xterm.js addon that attaches a Terminal to a warren sandbox
// terminal over the browser's WebSocket, with resize, reconnect (exponential backoff) and
// replay from the cursor of the last byte shown, so nothing is printed twice or lost.
// Browser code: no Node imports. xterm.js is not a dependency; the addon uses the
// structural shape of xterm's Terminal (write, onData, onBinary, onResize, cols, rows).

/** The parts of xterm.js's `Terminal` the addon uses. */
export interface XtermLike {
  readonly cols: number;
  readonly rows: number;
  write(data: string | Uint8Array, callback?: () => void): void;
  onData(listener: (data: string) => void): { dispose(): void };
  onBinary?(listener: (data: string) => void): { dispose(): void };
  onResize(listener: (size: { cols: number; rows: number }) => void): { dispose(): void };
  reset?(): void;
}

export type ConnectionState = 'disconnected' | 'connecting' | 'connected';

export interface ConnectionTarget {
  sandboxId: string;
  /** The terminal's name (each name is its own shell). Default `main`. */
  name?: string;
  /** Alias of name (the hosted SDK's word). */
  sessionId?: string;
}

export interface WebSocketUrlParams {
  sandboxId: string;
  name: string;
  sessionId: string;
  /** ws(s)://host of the page (`location`), for same-origin setups. */
  origin: string;
  cols: number;
  rows: number;
  /** Cursor to replay from (null on the first connection: the whole kept output). */
  cursor: number | null;
}

export interface SandboxAddonOptions {
  /**
   * The WebSocket URL of the terminal (called on every attempt, may be async — e.g. to
   * fetch a single-use ticket from your server). `cols`, `rows` and `since` are added to
   * it when it lacks them. See `warrenTerminalUrl`.
   */
  getWebSocketUrl: (params: WebSocketUrlParams) => string | Promise<string>;
  /** Reconnect by itself when the socket drops (default true). */
  reconnect?: boolean;
  /** Largest backoff between attempts, ms (default 8000). */
  maxBackoffMs?: number;
  /** Gives up after this many failed attempts in a row (default: never). */
  maxAttempts?: number;
  onStateChange?: (state: ConnectionState, error?: Error) => void;
  /** The shell ended with `code` (the next connect() starts a new one). */
  onExit?: (code: number) => void;
  /** The server sent an `error` message (e.g. output lost by a slow socket). */
  onServerError?: (message: string) => void;
  /** Show server errors in the terminal (default true). */
  printErrors?: boolean;
}

/**
 * The terminal URL on a warren node: `{base}/v1/sandboxes/{id}/terminals/{name}` with
 * `ticket` (from `POST /v1/tickets`, scope `terminal`): browsers cannot send headers.
 */
export function warrenTerminalUrl(p: {
  baseUrl: string;
  sandboxId: string;
  name?: string;
  ticket?: string;
  cols?: number;
  rows?: number;
  since?: number | null;
  shell?: string;
}): string {
  const base = p.baseUrl.replace(/\/+$/, '').replace(/^http:/, 'ws:').replace(/^https:/, 'wss:');
  const q = new URLSearchParams();
  if (p.cols !== undefined) q.set('cols', String(p.cols));
  if (p.rows !== undefined) q.set('rows', String(p.rows));
  if (p.since !== undefined && p.since !== null) q.set('since', String(p.since));
  if (p.shell) q.set('shell', p.shell);
  if (p.ticket) q.set('ticket', p.ticket);
  const qs = q.toString();
  return `${base}/v1/sandboxes/${encodeURIComponent(p.sandboxId)}/terminals/${encodeURIComponent(p.name ?? 'main')}${qs ? `?${qs}` : ''}`;
}

type Disposable = { dispose(): void };

/** An xterm.js addon (`terminal.loadAddon(addon)`, then `addon.connect({sandboxId})`). */
export class SandboxAddon {
  private terminal: XtermLike | null = null;
  private socket: WebSocket | null = null;
  private termListeners: Disposable[] = [];
  private timer: ReturnType<typeof setTimeout> | null = null;
  private attempts = 0;
  private intentional = false;
  private exited = false;
  private target: { sandboxId: string; name: string } | null = null;
  private _state: ConnectionState = 'disconnected';
  /** Bytes of terminal output up to the last byte written to the terminal. */
  cursor: number | null = null;
  private encoder = new TextEncoder();

  constructor(private readonly options: SandboxAddonOptions) {}

  get state(): ConnectionState {
    return this._state;
  }

  get sandboxId(): string | undefined {
    return this.target?.sandboxId;
  }

  get name(): string | undefined {
    return this.target?.name;
  }

  /** xterm's ITerminalAddon.activate. */
  activate(terminal: XtermLike): void {
    this.terminal = terminal;
    this.termListeners.push(
      terminal.onData((d) => this.send(this.encoder.encode(d))),
      terminal.onResize(({ cols, rows }) => this.sendControl({ type: 'resize', cols, rows })),
    );
    if (terminal.onBinary) {
      this.termListeners.push(
        terminal.onBinary((d) => this.send(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff))),
      );
    }
  }

  /** xterm's ITerminalAddon.dispose. */
  dispose(): void {
    this.disconnect();
    for (const d of this.termListeners) d.dispose();
    this.termListeners = [];
    this.terminal = null;
  }

  /** Attaches to terminal `name` (default `main`) of `sandboxId`. */
  connect(target: ConnectionTarget): void {
    const name = target.name ?? target.sessionId ?? 'main';
    const same = this.target && this.target.sandboxId === target.sandboxId && this.target.name === name;
    if (same && this._state !== 'disconnected') return;
    if (!same) {
      this.cursor = null;
      if (this._state !== 'disconnected') this.terminal?.reset?.();
    }
    this.target = { sandboxId: target.sandboxId, name };
    this.cancelTimer();
    this.closeSocket();
    this.attempts = 0;
    this.intentional = false;
    this.exited = false;
    void this.open();
  }

  /** Closes the socket (the shell keeps running; connect() again resumes it). */
  disconnect(): void {
    this.intentional = true;
    this.cancelTimer();
    this.closeSocket();
    this.setState('disconnected');
  }

  /** Drops the socket and reconnects from the cursor (what a network failure does). */
  reconnectNow(): void {
    this.cancelTimer();
    this.closeSocket();
    this.intentional = false;
    void this.open();
  }

  private setState(state: ConnectionState, error?: Error): void {
    if (this._state === state) return;
    this._state = state;
    this.options.onStateChange?.(state, error);
  }

  private send(bytes: Uint8Array): void {
    if (this.socket && this.socket.readyState === WebSocket.OPEN) this.socket.send(bytes);
  }

  private sendControl(msg: unknown): void {
    if (this.socket && this.socket.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(msg));
  }

  private async open(): Promise<void> {
    const term = this.terminal;
    const target = this.target;
    if (!term || !target) return;
    this.setState('connecting');
    let url: string;
    try {
      const origin =
        typeof location !== 'undefined' ? `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}` : '';
      url = await this.options.getWebSocketUrl({
        sandboxId: target.sandboxId,
        name: target.name,
        sessionId: target.name,
        origin,
        cols: term.cols,
        rows: term.rows,
        cursor: this.cursor,
      });
    } catch (e) {
      this.scheduleReconnect(e instanceof Error ? e : new Error(String(e)));
      return;
    }
    if (this.target !== target || this.intentional) return;
    const u = new URL(url, typeof location !== 'undefined' ? location.href : undefined);
    if (!u.searchParams.has('cols')) u.searchParams.set('cols', String(term.cols));
    if (!u.searchParams.has('rows')) u.searchParams.set('rows', String(term.rows));
    if (this.cursor !== null && !u.searchParams.has('since')) u.searchParams.set('since', String(this.cursor));
    const ws = new WebSocket(u.toString());
    ws.binaryType = 'arraybuffer';
    this.socket = ws;
    let ready = false;
    ws.onmessage = (ev: MessageEvent) => {
      if (this.socket !== ws) return;
      if (typeof ev.data === 'string') {
        let msg: { type?: string; cursor?: number; code?: number; message?: string };
        try {
          msg = JSON.parse(ev.data);
        } catch {
          return;
        }
        if (msg.type === 'ready') {
          ready = true;
          this.cursor = msg.cursor ?? this.cursor;
          this.attempts = 0;
          this.setState('connected');
        } else if (msg.type === 'exit') {
          this.exited = true;
          this.cursor = null;
          this.options.onExit?.(msg.code ?? 0);
        } else if (msg.type === 'error') {
          this.options.onServerError?.(msg.message ?? '');
          if (this.options.printErrors !== false) {
            this.terminal?.write(`\r\n\x1b[31m[warren: ${msg.message ?? 'error'}]\x1b[0m\r\n`);
          }
        }
        return;
      }
      const bytes = new Uint8Array(ev.data as ArrayBuffer);
      this.terminal?.write(bytes);
      // Replayed bytes are counted by the `ready` cursor; live bytes move it on.
      if (ready && this.cursor !== null) this.cursor += bytes.byteLength;
    };
    ws.onclose = () => {
      if (this.socket !== ws) return;
      this.socket = null;
      if (this.intentional) return;
      if (this.exited) {
        this.setState('disconnected');
        return;
      }
      this.scheduleReconnect(new Error(ready ? 'disconnected' : 'could not connect'));
    };
  }

  private scheduleReconnect(error: Error): void {
    if (this.options.reconnect === false || this.intentional) {
      this.setState('disconnected', error);
      return;
    }
    const max = this.options.maxAttempts;
    if (max !== undefined && this.attempts >= max) {
      this.setState('disconnected', error);
      return;
    }
    this.setState('connecting', error);
    const cap = this.options.maxBackoffMs ?? 8000;
    const base = Math.min(cap, 250 * 2 ** this.attempts++);
    const delay = Math.round(base * (0.9 + Math.random() * 0.2));
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.open();
    }, delay);
  }

  private cancelTimer(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private closeSocket(): void {
    const ws = this.socket;
    this.socket = null;
    if (ws) {
      ws.onmessage = null;
      ws.onclose = null;
      try {
        ws.close();
      } catch {
        // closing a socket that never opened
      }
    }
  }
}
