// Retry decisions for retryable answers (503 UNAVAILABLE / CAPACITY_EXHAUSTED, 504
// UPSTREAM_TIMEOUT, 429 RATE_LIMITED) and failed connections: exponential backoff with
// jitter, within a deadline, only for requests that are safe to repeat.

export interface RetryPolicy {
  /** Total time budget for one call, retries included, ms (0: never retry). Default 30 000. */
  retryTimeoutMs: number;
  /** First backoff delay, ms. Default 200. */
  initialDelayMs: number;
  /** Largest backoff delay, ms. Default 5 000. */
  maxDelayMs: number;
  /** Growth factor per attempt. Default 2. */
  multiplier: number;
  /** Relative random spread of each delay (0.2: ±20 %). Default 0.2. */
  jitter: number;
}

export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = Object.freeze({
  retryTimeoutMs: 30_000,
  initialDelayMs: 200,
  maxDelayMs: 5_000,
  multiplier: 2,
  jitter: 0.2,
});

/** The delay before retry number `attempt` (0 for the first retry). */
export function backoffDelay(
  attempt: number,
  policy: Pick<RetryPolicy, 'initialDelayMs' | 'maxDelayMs' | 'multiplier' | 'jitter'> = DEFAULT_RETRY_POLICY,
  random: () => number = Math.random,
): number {
  const base = Math.min(policy.maxDelayMs, policy.initialDelayMs * policy.multiplier ** attempt);
  const spread = base * policy.jitter * (2 * random() - 1);
  return Math.max(0, Math.round(base + spread));
}

/** Statuses whose answers may be retried (when the request may be repeated). */
export function isRetryableStatus(status: number): boolean {
  return status === 503 || status === 504 || status === 429;
}

export interface RetryInput {
  /** Whether the request may be sent again without changing the outcome. */
  idempotent: boolean;
  /** The answer's status, when one came. */
  status?: number;
  /** The answer's `retryable` flag, when its body said. */
  retryable?: boolean;
  /** True when no answer came (connection refused or reset). */
  networkError?: boolean;
  /** ms since the call started. */
  elapsedMs: number;
  /** The delay the next retry would wait. */
  delayMs: number;
  /** The policy's budget. */
  retryTimeoutMs: number;
}

/**
 * Whether to retry: only a request that may be repeated, only for a retryable answer
 * (or no answer), and only if the retry would start within the deadline.
 */
export function shouldRetry(i: RetryInput): boolean {
  if (!i.idempotent || i.retryTimeoutMs <= 0) return false;
  let retryable: boolean;
  if (i.networkError) retryable = true;
  else if (i.status !== undefined && isRetryableStatus(i.status)) retryable = i.retryable !== false;
  else retryable = false;
  if (!retryable) return false;
  return i.elapsedMs + i.delayMs < i.retryTimeoutMs;
}

/** The `retry-after` header in ms (seconds or an HTTP date), when present. */
export function retryAfterMs(value: string | null | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  if (/^\d+(\.\d+)?$/.test(value.trim())) return Math.round(Number(value) * 1000);
  const t = Date.parse(value);
  return Number.isNaN(t) ? undefined : Math.max(0, t - now);
}
