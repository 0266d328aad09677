// Small pure helpers: durations, paths, bytes.

import { randomBytes } from 'node:crypto';
import { InvalidArgumentError } from './errors.js';

const UNIT_SECONDS: Record<string, number> = {
  ms: 0.001,
  s: 1,
  sec: 1,
  secs: 1,
  second: 1,
  seconds: 1,
  m: 60,
  min: 60,
  mins: 60,
  minute: 60,
  minutes: 60,
  h: 3600,
  hr: 3600,
  hrs: 3600,
  hour: 3600,
  hours: 3600,
  d: 86400,
  day: 86400,
  days: 86400,
};

/**
 * Seconds of a `sleepAfter` value: a number of seconds, or text such as `"30s"`, `"5m"`,
 * `"1h"`, `"1h30m"`, `"90"`. Throws InvalidArgumentError for anything else or for less than
 * one second (the API's range is 1 s to 30 days).
 */
export function parseSleepAfter(value: string | number): number {
  let secs: number;
  if (typeof value === 'number') {
    secs = value;
  } else {
    const t = value.trim().toLowerCase();
    if (/^\d+(\.\d+)?$/.test(t)) {
      secs = Number(t);
    } else {
      const re = /(\d+(?:\.\d+)?)\s*([a-z]+)/g;
      let total = 0;
      let consumed = '';
      let m: RegExpExecArray | null;
      while ((m = re.exec(t)) !== null) {
        const unit = UNIT_SECONDS[m[2]!];
        if (unit === undefined) {
          throw invalidDuration(value, `unknown unit "${m[2]}"`);
        }
        total += Number(m[1]) * unit;
        consumed += m[0];
      }
      if (!consumed || consumed.replace(/\s+/g, '') !== t.replace(/\s+/g, '')) {
        throw invalidDuration(value, 'use e.g. "30s", "5m", "1h" or seconds');
      }
      secs = total;
    }
  }
  if (!Number.isFinite(secs) || secs < 1) {
    throw invalidDuration(value, 'it must be at least 1 second');
  }
  if (secs > 30 * 86400) {
    throw invalidDuration(value, 'it must be at most 30 days');
  }
  return Math.round(secs);
}

function invalidDuration(value: unknown, why: string): InvalidArgumentError {
  return new InvalidArgumentError({
    code: 'INVALID_ARGUMENT',
    message: `invalid sleepAfter ${JSON.stringify(value)}: ${why}`,
  });
}

/** `/v1/sandboxes/{id}/files/{path}` with each segment percent-encoded and `/` kept. */
export function filePath(sandboxId: string, path: string): string {
  const p = path.replace(/^\/+/, '');
  return `/v1/sandboxes/${encodeURIComponent(sandboxId)}/files/${p
    .split('/')
    .map((s) => encodeURIComponent(s))
    .join('/')}`;
}

/** A path made absolute under `/workspace` when relative (the API wants absolute paths). */
export function absPath(path: string, base = '/workspace'): string {
  if (path.startsWith('/')) return path;
  return `${base.replace(/\/+$/, '')}/${path}`;
}

export function sleepMs(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export function base64ToBytes(b64: string): Uint8Array {
  return new Uint8Array(Buffer.from(b64, 'base64'));
}

export function bytesToBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

export function concatBytes(parts: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.byteLength;
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.byteLength;
  }
  return out;
}

const strictDecoder = new TextDecoder('utf-8', { fatal: true });
const lossyDecoder = new TextDecoder('utf-8');

/** UTF-8 text of bytes, or undefined when they are not valid UTF-8. */
export function utf8OrUndefined(bytes: Uint8Array): string | undefined {
  try {
    return strictDecoder.decode(bytes);
  } catch {
    return undefined;
  }
}

export function utf8Lossy(bytes: Uint8Array): string {
  return lossyDecoder.decode(bytes);
}

/** A random lowercase hex string of `n` bytes. */
export function randomHex(n = 4): string {
  // node:crypto, not globalThis.crypto: Node 18 has no global Web Crypto without a flag.
  return randomBytes(n).toString('hex');
}

/** The Rust regex inline-flag prefix for a JS RegExp's flags (i, m, s; others have no meaning there). */
export function regexSource(re: RegExp): string {
  const flags = [...re.flags].filter((f) => f === 'i' || f === 'm' || f === 's').join('');
  return flags ? `(?${flags})${re.source}` : re.source;
}

/** Longest exec timeout answered in JSON mode (Node's fetch gives up waiting for headers at 300 s). */
export const JSON_EXEC_MAX_MS = 240_000;
/** What JSON mode keeps of each output stream. */
export const OUTPUT_LIMIT = 16 * 1024 * 1024;
/** Longest single server-side wait: longer waits are made of several (same 300 s reason). */
export const WAIT_CHUNK_MS = 240_000;
/** The API's default wait. */
export const DEFAULT_WAIT_MS = 300_000;
