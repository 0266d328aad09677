// The connection to a warren node: base URL, API key, requests with typed errors and
// retries of retryable answers.

import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import {
  InvalidArgumentError,
  NetworkError,
  ProtocolError,
  WarrenError,
  errorFromResponse,
} from './errors.js';
import {
  DEFAULT_RETRY_POLICY,
  RetryPolicy,
  backoffDelay,
  retryAfterMs,
  shouldRetry,
} from './retry.js';
import { sleepMs, randomHex } from './util.js';
import { Sandbox, SandboxOptions } from './sandbox.js';

/** A tenant's quota and what it holds (`GET /v1/tenants/{tenant}`). */
export interface TenantView {
  tenant: string;
  quota: { max_sandboxes?: number; max_cpus?: number; max_memory_mb?: number; max_snapshot_bytes?: number };
  in_use: { sandboxes: number; cpus: number; memory_mb: number; snapshot_bytes: number };
}

/** A join token as made or listed (`/v1/cluster/join-tokens`); the value only when made. */
export interface JoinToken {
  id: string;
  single_use: boolean;
  name: string | null;
  created_at: string;
  expires_at: string;
}

/** Default address of `warren dev`. */
export const DEFAULT_URL = 'http://127.0.0.1:7070';

export interface WarrenOptions {
  /** Base URL of any node (`http://host:port`). Default: `WARREN_URL`, else the dev node. */
  url?: string;
  /** API key. Default: `WARREN_API_KEY`, else the dev node's key file. */
  apiKey?: string;
  /** Time budget of one call including its retries, ms (0: no retries). Default 30 000. */
  retryTimeoutMs?: number;
  /** Fine-tuning of the backoff. */
  retry?: Partial<Omit<RetryPolicy, 'retryTimeoutMs'>>;
  /** A fetch implementation (default: the global one). */
  fetch?: typeof fetch;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
}

export type Query = Record<string, string | number | boolean | undefined | null | (string | number)[]>;

export interface RequestOptions {
  query?: Query;
  /** A JSON body. */
  json?: unknown;
  /** A raw body (bytes or a stream). */
  body?: BodyInit | Uint8Array | ReadableStream<Uint8Array>;
  headers?: Record<string, string>;
  /** Ask for Server-Sent Events. */
  sse?: boolean;
  /** The request may be sent again (retries of 503/504/429 and failed connections). */
  idempotent?: boolean;
  signal?: AbortSignal;
  /** Override of the client's retry budget for this call, ms. */
  retryTimeoutMs?: number;
}

function devKeyFile(): string {
  const dataDir =
    process.env['WARREN_DATA_DIR'] ??
    join(process.env['XDG_DATA_HOME'] ?? join(homedir(), '.local/share'), 'warren/dev');
  return join(dataDir, 'api-key');
}

/** The connection to a warren cluster (any node). */
export class Warren {
  readonly url: string;
  readonly retryPolicy: RetryPolicy;
  private readonly apiKey: string;
  private readonly fetchImpl: typeof fetch;
  private readonly extraHeaders: Record<string, string>;

  constructor(options: WarrenOptions = {}) {
    const url = options.url ?? process.env['WARREN_URL'] ?? DEFAULT_URL;
    this.url = url.replace(/\/+$/, '');
    let key = options.apiKey ?? process.env['WARREN_API_KEY'];
    if (!key) {
      const file = devKeyFile();
      if (existsSync(file)) key = readFileSync(file, 'utf8').trim();
    }
    if (!key) {
      throw new InvalidArgumentError({
        code: 'INVALID_ARGUMENT',
        message: `no API key: pass {apiKey}, set WARREN_API_KEY, or start a dev node (it writes ${devKeyFile()})`,
      });
    }
    this.apiKey = key;
    this.retryPolicy = {
      ...DEFAULT_RETRY_POLICY,
      ...options.retry,
      retryTimeoutMs: options.retryTimeoutMs ?? DEFAULT_RETRY_POLICY.retryTimeoutMs,
    };
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.extraHeaders = options.headers ?? {};
  }

  /** The `Authorization` header value (for WebSockets the SDK opens itself). */
  authorization(): string {
    return `Bearer ${this.apiKey}`;
  }

  /** The full URL of `path` (below the base) with `query`. */
  urlOf(path: string, query?: Query): string {
    const u = new URL(this.url + path);
    if (query) {
      for (const [k, v] of Object.entries(query)) {
        if (v === undefined || v === null) continue;
        if (Array.isArray(v)) for (const x of v) u.searchParams.append(k, String(x));
        else u.searchParams.set(k, String(v));
      }
    }
    return u.toString();
  }

  /**
   * Sends a request; answers non-2xx with the typed error. Retryable answers (503, 504,
   * 429) and failed connections are retried with backoff within the retry budget, only when
   * `idempotent` and the body can be sent again.
   */
  async request(method: string, path: string, opts: RequestOptions = {}): Promise<Response> {
    const url = this.urlOf(path, opts.query);
    const headers: Record<string, string> = {
      ...this.extraHeaders,
      authorization: this.authorization(),
      ...opts.headers,
    };
    let body: BodyInit | undefined;
    let replayable = true;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers['content-type'] = 'application/json';
    } else if (opts.body !== undefined) {
      body = opts.body as BodyInit;
      if (typeof ReadableStream !== 'undefined' && opts.body instanceof ReadableStream) replayable = false;
    }
    if (opts.sse) headers['accept'] = 'text/event-stream';
    const budget = opts.retryTimeoutMs ?? this.retryPolicy.retryTimeoutMs;
    const idempotent = !!opts.idempotent && replayable;
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      let resp: Response;
      try {
        const init: RequestInit & { duplex?: 'half' } = { method, headers, body, signal: opts.signal };
        if (!replayable) init.duplex = 'half';
        resp = await this.fetchImpl(url, init);
      } catch (e) {
        if (opts.signal?.aborted) throw e;
        const delayMs = backoffDelay(attempt, this.retryPolicy);
        if (
          shouldRetry({
            idempotent,
            networkError: true,
            elapsedMs: Date.now() - started,
            delayMs,
            retryTimeoutMs: budget,
          })
        ) {
          await sleepMs(delayMs, opts.signal);
          continue;
        }
        const cause = (e as { cause?: unknown })?.cause ?? e;
        throw new NetworkError({
          code: 'NETWORK_ERROR',
          message: `${method} ${url}: ${(cause as Error)?.message ?? String(cause)}`,
          cause: e,
          retryable: true,
        });
      }
      if (resp.ok) return resp;
      const text = await resp.text().catch(() => '');
      const err = errorFromResponse(resp.status, text, resp.headers);
      let delayMs = backoffDelay(attempt, this.retryPolicy);
      const after = retryAfterMs(resp.headers.get('retry-after'));
      if (after !== undefined) delayMs = Math.max(delayMs, after);
      if (
        shouldRetry({
          idempotent,
          status: resp.status,
          retryable: err.retryable,
          elapsedMs: Date.now() - started,
          delayMs,
          retryTimeoutMs: budget,
        })
      ) {
        await sleepMs(delayMs, opts.signal);
        continue;
      }
      throw err;
    }
  }

  /** A request whose answer is JSON (or empty: undefined). */
  async json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const resp = await this.request(method, path, opts);
    const text = await resp.text();
    if (!text) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new ProtocolError({
        code: 'PROTOCOL_ERROR',
        message: `${method} ${path}: the answer is not JSON: ${text.slice(0, 200)}`,
        status: resp.status,
        requestId: resp.headers.get('x-request-id') ?? undefined,
      });
    }
  }

  // ---- sandboxes -----------------------------------------------------------------------

  /** A handle on sandbox `id` (created with `options` on first use; see getSandbox). */
  sandbox(id: string, options: SandboxOptions = {}): Sandbox {
    return new Sandbox(this, id, options);
  }

  /**
   * Starts a new sandbox, from `snapshot` when given, and resolves its handle. The id is
   * `options.id`, else `{prefix}-<random hex>` (prefix default `sb`).
   */
  async start(options: SandboxOptions & { snapshot?: string; id?: string; prefix?: string } = {}): Promise<Sandbox> {
    const { snapshot, id, prefix, ...opts } = options;
    const sb = new Sandbox(this, id ?? `${prefix ?? 'sb'}-${randomHex(6)}`, opts);
    await sb.start({ snapshot });
    return sb;
  }

  // ---- cluster-wide calls --------------------------------------------------------------

  /** `GET /healthz` (no auth needed). */
  async health(): Promise<Record<string, unknown>> {
    const resp = await this.fetchImpl(this.url + '/healthz');
    return (await resp.json()) as Record<string, unknown>;
  }

  /** `GET /v1/sandboxes` (one page). */
  async listSandboxes(
    filter: { state?: string; labels?: Record<string, string>; region?: string; limit?: number; cursor?: string } = {},
  ): Promise<{ sandboxes: SandboxInfo[]; nextCursor: string | null }> {
    const r = await this.json<{ sandboxes: SandboxInfo[]; next_cursor: string | null }>('GET', '/v1/sandboxes', {
      query: {
        state: filter.state,
        region: filter.region,
        limit: filter.limit,
        cursor: filter.cursor,
        label: filter.labels ? Object.entries(filter.labels).map(([k, v]) => `${k}=${v}`) : undefined,
      },
      idempotent: true,
    });
    return { sandboxes: r.sandboxes, nextCursor: r.next_cursor ?? null };
  }

  /** `GET /v1/snapshots?sandbox=`. */
  async listSnapshots(sandbox?: string): Promise<SnapshotInfo[]> {
    const r = await this.json<{ snapshots: SnapshotInfo[] }>('GET', '/v1/snapshots', {
      query: { sandbox },
      idempotent: true,
    });
    return r.snapshots;
  }

  /** `GET /v1/snapshots/{sid}`. */
  getSnapshot(snapshot: string): Promise<SnapshotInfo> {
    return this.json('GET', `/v1/snapshots/${encodeURIComponent(snapshot)}`, { idempotent: true });
  }

  /** `DELETE /v1/snapshots/{sid}`. */
  async deleteSnapshot(snapshot: string): Promise<void> {
    await this.request('DELETE', `/v1/snapshots/${encodeURIComponent(snapshot)}`, { idempotent: true });
  }

  /** `POST /v1/tickets`: a single-use credential for a browser's WebSocket or stream. */
  createTicket(
    sandbox: string,
    scope: 'terminal' | 'watch' | 'logs',
    ttlSeconds?: number,
  ): Promise<{ ticket: string; expires_at: string }> {
    return this.json('POST', '/v1/tickets', {
      json: { sandbox, scope, ...(ttlSeconds !== undefined ? { ttl_s: ttlSeconds } : {}) },
      idempotent: true,
    });
  }

  /** `PUT /v1/secrets/{name}`. */
  async setSecret(name: string, value: string): Promise<void> {
    await this.request('PUT', `/v1/secrets/${encodeURIComponent(name)}`, { json: { value }, idempotent: true });
  }

  /** `GET /v1/secrets` (names and times, never values). */
  async listSecrets(): Promise<{ name: string; created_at: string; updated_at: string }[]> {
    const r = await this.json<{ secrets: { name: string; created_at: string; updated_at: string }[] }>(
      'GET',
      '/v1/secrets',
      { idempotent: true },
    );
    return r.secrets;
  }

  /** `DELETE /v1/secrets/{name}`. */
  async deleteSecret(name: string): Promise<void> {
    await this.request('DELETE', `/v1/secrets/${encodeURIComponent(name)}`, { idempotent: true });
  }

  /** `POST /v1/keys` (admin key only): a new key, admin or scoped to `tenant`; its value is shown once. */
  async createKey(
    tenant: string,
    scope: 'admin' | 'tenant',
    name?: string,
  ): Promise<{ id: string; key: string; tenant: string; scope: 'admin' | 'tenant'; name: string | null; created_at: string }> {
    return this.json('POST', '/v1/keys', { json: { tenant, scope, ...(name !== undefined ? { name } : {}) } });
  }

  /** `GET /v1/keys` (admin key only): every key's id, tenant, scope and times, never a value. */
  async listKeys(): Promise<
    { id: string; tenant: string; scope: 'admin' | 'tenant'; name: string | null; created_at: string; last_used_at: string | null }[]
  > {
    const r = await this.json<{
      keys: { id: string; tenant: string; scope: 'admin' | 'tenant'; name: string | null; created_at: string; last_used_at: string | null }[];
    }>('GET', '/v1/keys', { idempotent: true });
    return r.keys;
  }

  /** `DELETE /v1/keys/{id}` (admin key only): answered once every node refuses the key. */
  async revokeKey(id: string): Promise<void> {
    await this.request('DELETE', `/v1/keys/${encodeURIComponent(id)}`, { idempotent: true });
  }

  /**
   * `POST /v1/cluster/join-tokens` (admin key only): a token a new node joins with, expiring
   * (default an hour) and single-use unless `singleUse` is false; its value is shown once.
   */
  async createJoinToken(
    opts: { ttlS?: number; singleUse?: boolean; name?: string } = {},
  ): Promise<JoinToken & { token: string }> {
    const json: Record<string, unknown> = {};
    if (opts.ttlS !== undefined) json.ttl_s = opts.ttlS;
    if (opts.singleUse !== undefined) json.single_use = opts.singleUse;
    if (opts.name !== undefined) json.name = opts.name;
    return this.json('POST', '/v1/cluster/join-tokens', { json });
  }

  /** `GET /v1/cluster/join-tokens` (admin key only): states, expiries and the nodes each admitted, never values. */
  async listJoinTokens(): Promise<(JoinToken & { used_by: string[]; state: 'valid' | 'used' | 'expired' })[]> {
    const r = await this.json<{ tokens: (JoinToken & { used_by: string[]; state: 'valid' | 'used' | 'expired' })[] }>(
      'GET',
      '/v1/cluster/join-tokens',
      { idempotent: true },
    );
    return r.tokens;
  }

  /** `DELETE /v1/cluster/join-tokens/{id}` (admin key only): it admits nobody from then on. */
  async revokeJoinToken(id: string): Promise<void> {
    await this.request('DELETE', `/v1/cluster/join-tokens/${encodeURIComponent(id)}`, { idempotent: true });
  }

  /** `GET /v1/cluster/join-policy` (admin key only): whether the cluster's own join token still admits nodes. */
  async getJoinPolicy(): Promise<{ cluster_token: boolean }> {
    return this.json('GET', '/v1/cluster/join-policy', { idempotent: true });
  }

  /**
   * `PUT /v1/cluster/join-policy` (admin key only): `clusterToken: false` turns the cluster's
   * own join token off (only issued join tokens admit nodes then); `true` turns it on again.
   */
  async setJoinPolicy(opts: { clusterToken: boolean }): Promise<{ cluster_token: boolean }> {
    return this.json('PUT', '/v1/cluster/join-policy', {
      json: { cluster_token: opts.clusterToken },
      idempotent: true,
    });
  }

  /** `PUT /v1/tenants/{tenant}` (admin key only): what the tenant may hold at once, cluster-wide (`{}` clears it). */
  async setTenantQuota(
    tenant: string,
    quota: { max_sandboxes?: number; max_cpus?: number; max_memory_mb?: number; max_snapshot_bytes?: number },
  ): Promise<TenantView> {
    return this.json('PUT', `/v1/tenants/${encodeURIComponent(tenant)}`, { json: quota, idempotent: true });
  }

  /** `GET /v1/tenants/{tenant}`: its quota and what it holds (admin, or the tenant's own key). */
  async getTenant(tenant: string): Promise<TenantView> {
    return this.json('GET', `/v1/tenants/${encodeURIComponent(tenant)}`, { idempotent: true });
  }

  /** `GET /v1/tenants` (admin key only). */
  async listTenants(): Promise<TenantView[]> {
    const r = await this.json<{ tenants: TenantView[] }>('GET', '/v1/tenants', { idempotent: true });
    return r.tenants;
  }

  /** `GET /v1/cluster`. */
  cluster(): Promise<Record<string, unknown>> {
    return this.json('GET', '/v1/cluster', { idempotent: true });
  }

  /** `GET /v1/usage`. */
  usage(query: { sandbox?: string; label?: string; from?: string; to?: string; group_by?: string } = {}): Promise<
    Record<string, unknown>
  > {
    return this.json('GET', '/v1/usage', { query, idempotent: true });
  }
}

/** A sandbox as the API describes it. */
export interface SandboxInfo {
  id: string;
  state: 'starting' | 'running' | 'sleeping' | 'migrating' | 'failed';
  node: string;
  region: string;
  image: string;
  resources: { cpus: number; memory_mb: number; disk_mb: number; pids: number };
  instance_type?: string;
  labels: Record<string, string>;
  persist: 'disk' | 'none' | { dirs: string[] };
  sleep_after_s: number;
  keep_alive: boolean;
  isolation: 'container' | 'gvisor';
  created_at: string;
  last_active_at: string;
}

/** A snapshot as the API describes it. */
export interface SnapshotInfo {
  id: string;
  sandbox: string;
  name: string | null;
  created_at: string;
  size_bytes: number;
  dirs: string[];
  image: string;
  origin: string;
  stored_bytes?: number;
  new_bytes?: number;
}

export { WarrenError };
