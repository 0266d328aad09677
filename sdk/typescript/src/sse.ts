// Server-Sent Events: an incremental parser, `parseSSEStream`, and re-encoding of the
// API's streams into the SDK's event shapes (so that a stream the SDK hands out is still
// SSE bytes: it can be returned as a `Response` body as is).

import { ProtocolError } from './errors.js';

/** One SSE event as framed on the wire (`comment` for `: ...` lines). */
export interface RawSSEEvent {
  data?: string;
  event?: string;
  id?: string;
  retry?: number;
  /** Set (to the text after `:`) when this item is a comment line such as `: keepalive`. */
  comment?: string;
}

/**
 * Incremental SSE parser (the WHATWG rules that matter here): lines end with LF, CRLF or
 * CR, in any chunking (a chunk may end inside a line, a CRLF pair, or a UTF-8 character);
 * `data:` lines of one event are joined with `\n`; a blank line dispatches; comments are
 * reported as `{comment}` items; unknown fields are ignored.
 */
export class SSEParser {
  private decoder = new TextDecoder('utf-8');
  private buf = '';
  private pendingCR = false;
  private data: string[] | null = null;
  private event: string | undefined;
  private id: string | undefined;
  private retry: number | undefined;

  /** Feeds bytes (or text); returns the events and comments completed by them. */
  push(chunk: Uint8Array | string): RawSSEEvent[] {
    let text = typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
    if (this.pendingCR) {
      // A CR ended the previous chunk: an LF right after it belongs to the same line end.
      if (text.startsWith('\n')) text = text.slice(1);
      this.pendingCR = false;
    }
    this.buf += text;
    const out: RawSSEEvent[] = [];
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buf);
      if (!m) break;
      if (m[0] === '\r' && m.index === this.buf.length - 1) {
        // Could be the first half of CRLF: take the line, remember to drop a leading LF.
        this.pendingCR = true;
      }
      const line = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      this.line(line, out);
    }
    return out;
  }

  /** Ends the input: an event without its final blank line is dispatched. */
  end(): RawSSEEvent[] {
    const out: RawSSEEvent[] = [];
    const rest = this.buf + this.decoder.decode();
    this.buf = '';
    if (rest) this.line(rest, out);
    this.line('', out);
    return out;
  }

  private line(line: string, out: RawSSEEvent[]): void {
    if (line === '') {
      if (this.data !== null) {
        const ev: RawSSEEvent = { data: this.data.join('\n') };
        if (this.event !== undefined) ev.event = this.event;
        if (this.id !== undefined) ev.id = this.id;
        if (this.retry !== undefined) ev.retry = this.retry;
        out.push(ev);
      }
      this.data = null;
      this.event = undefined;
      this.retry = undefined;
      return;
    }
    if (line.startsWith(':')) {
      out.push({ comment: line.slice(1).replace(/^ /, '') });
      return;
    }
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data':
        (this.data ??= []).push(value);
        break;
      case 'event':
        this.event = value;
        break;
      case 'id':
        this.id = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
      default:
        break;
    }
  }
}

type ByteSource = ReadableStream<Uint8Array> | Response | AsyncIterable<Uint8Array | string>;

function chunksOf(source: ByteSource): {
  next(): Promise<IteratorResult<Uint8Array | string>>;
  cancel(reason?: unknown): Promise<void>;
} {
  if (typeof Response !== 'undefined' && source instanceof Response) {
    if (!source.body) {
      return { next: async () => ({ done: true, value: undefined }), cancel: async () => {} };
    }
    source = source.body;
  }
  const rs = source as ReadableStream<Uint8Array>;
  if (typeof rs.getReader === 'function') {
    const reader = rs.getReader();
    return {
      next: () => reader.read() as Promise<IteratorResult<Uint8Array>>,
      cancel: async (reason?: unknown) => {
        try {
          await reader.cancel(reason);
        } catch {
          // already closed
        }
      },
    };
  }
  const it = (source as AsyncIterable<Uint8Array | string>)[Symbol.asyncIterator]();
  return {
    next: () => it.next(),
    cancel: async () => {
      await it.return?.();
    },
  };
}

/** Reads raw SSE items (events and comments) from a byte stream, one at a time. */
export class SSEReader {
  private parser = new SSEParser();
  private queue: RawSSEEvent[] = [];
  private done = false;
  private src: ReturnType<typeof chunksOf>;

  constructor(source: ByteSource) {
    this.src = chunksOf(source);
  }

  /** The next event or comment, or null at the end of the stream. */
  async nextRaw(): Promise<RawSSEEvent | null> {
    while (this.queue.length === 0) {
      if (this.done) return null;
      const r = await this.src.next();
      if (r.done) {
        this.done = true;
        this.queue.push(...this.parser.end());
      } else {
        this.queue.push(...this.parser.push(r.value));
      }
    }
    return this.queue.shift()!;
  }

  /** The next event's JSON (comments skipped), or null at the end of the stream. */
  async next<T = unknown>(): Promise<T | null> {
    for (;;) {
      const raw = await this.nextRaw();
      if (raw === null) return null;
      if (raw.data === undefined) continue;
      return parseEventData<T>(raw.data);
    }
  }

  async cancel(reason?: unknown): Promise<void> {
    this.done = true;
    await this.src.cancel(reason);
  }
}

function parseEventData<T>(data: string): T {
  try {
    return JSON.parse(data) as T;
  } catch {
    throw new ProtocolError({
      code: 'PROTOCOL_ERROR',
      message: `an SSE event is not JSON: ${data.slice(0, 200)}`,
    });
  }
}

/**
 * Reads an SSE stream (a `ReadableStream` of bytes such as `exec(..., {stream: true})`,
 * `execStream`, `watch`, `streamLogs` or `runCodeStream` return, a `Response`, or any async
 * iterable of chunks) as an async iterable of its events' parsed JSON. Keepalive comments
 * are skipped. Breaking out of the loop (or aborting `signal`) cancels the stream.
 */
export async function* parseSSEStream<T = any>(
  stream: ByteSource,
  signal?: AbortSignal,
): AsyncGenerator<T, void, undefined> {
  const reader = new SSEReader(stream);
  const onAbort = () => {
    void reader.cancel(signal?.reason);
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    for (;;) {
      if (signal?.aborted) return;
      const ev = await reader.next<T>();
      if (ev === null) return;
      yield ev;
    }
  } finally {
    signal?.removeEventListener('abort', onAbort);
    await reader.cancel();
  }
}

const encoder = new TextEncoder();

/** One event as SSE bytes: `data: <json>\n\n`. */
export function encodeSSE(event: unknown): Uint8Array {
  return encoder.encode(`data: ${JSON.stringify(event)}\n\n`);
}

/**
 * A new SSE byte stream of `reader`'s events passed through `map` (which may return one
 * event, several, or null to drop it), keepalive comments kept. `prefix` events are sent
 * first (events already read from `reader`). Cancelling the result cancels the source.
 */
export function mapSSEStream(
  reader: SSEReader,
  map: (event: any) => unknown | unknown[] | null,
  prefix: unknown[] = [],
  onEnd?: (error?: unknown) => void,
): ReadableStream<Uint8Array> {
  const queue: Uint8Array[] = prefix.map(encodeSSE);
  let ended = false;
  const finish = (err?: unknown) => {
    if (ended) return;
    ended = true;
    onEnd?.(err);
  };
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      try {
        while (queue.length === 0) {
          const raw = await reader.nextRaw();
          if (raw === null) {
            finish();
            ctrl.close();
            return;
          }
          if (raw.comment !== undefined) {
            queue.push(encoder.encode(`: ${raw.comment}\n\n`));
            continue;
          }
          if (raw.data === undefined) continue;
          const mapped = map(parseEventData(raw.data));
          if (mapped === null || mapped === undefined) continue;
          for (const m of Array.isArray(mapped) ? mapped : [mapped]) queue.push(encodeSSE(m));
        }
        ctrl.enqueue(queue.shift()!);
      } catch (e) {
        finish(e);
        ctrl.error(e);
      }
    },
    async cancel(reason) {
      finish();
      await reader.cancel(reason);
    },
  });
}
