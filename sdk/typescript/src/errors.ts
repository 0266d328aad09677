// Typed errors carrying the API's error body ({code, message, retryable, details}).

/** Every error code of the API (docs/api.md, "Conventions"). */
export type ErrorCode =
  | 'INVALID_ARGUMENT'
  | 'UNAUTHORIZED'
  | 'FORBIDDEN'
  | 'SANDBOX_NOT_FOUND'
  | 'FILE_NOT_FOUND'
  | 'PROCESS_NOT_FOUND'
  | 'CONTEXT_NOT_FOUND'
  | 'SNAPSHOT_NOT_FOUND'
  | 'INVALID_TOKEN'
  | 'NOT_FOUND'
  | 'READY_TIMEOUT'
  | 'CONFLICT'
  | 'PROCESS_EXITED'
  | 'IS_A_DIRECTORY'
  | 'NOT_A_DIRECTORY'
  | 'ALREADY_EXISTS'
  | 'SESSION_TERMINATED'
  | 'PAYLOAD_TOO_LARGE'
  | 'EGRESS_DENIED'
  | 'GIT_FAILED'
  | 'UNSUPPORTED_LANGUAGE'
  | 'UPGRADE_REQUIRED'
  | 'RATE_LIMITED'
  | 'INTERNAL'
  | 'PORT_NOT_LISTENING'
  | 'BAD_GATEWAY'
  | 'UNAVAILABLE'
  | 'CAPACITY_EXHAUSTED'
  | 'UPSTREAM_TIMEOUT'
  /** Not an API code: the connection failed before any answer came. */
  | 'NETWORK_ERROR'
  /** Not an API code: the SDK's own deadline (a stream or wait) passed. */
  | 'TIMEOUT'
  /** Not an API code: the server answered something the SDK cannot read. */
  | 'PROTOCOL_ERROR';

/** HTTP status of each API code (api.md). */
export const STATUS_BY_CODE: Readonly<Record<string, number>> = Object.freeze({
  INVALID_ARGUMENT: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  EGRESS_DENIED: 403,
  SANDBOX_NOT_FOUND: 404,
  FILE_NOT_FOUND: 404,
  PROCESS_NOT_FOUND: 404,
  CONTEXT_NOT_FOUND: 404,
  SNAPSHOT_NOT_FOUND: 404,
  INVALID_TOKEN: 404,
  NOT_FOUND: 404,
  READY_TIMEOUT: 408,
  CONFLICT: 409,
  PROCESS_EXITED: 409,
  IS_A_DIRECTORY: 409,
  NOT_A_DIRECTORY: 409,
  ALREADY_EXISTS: 409,
  SESSION_TERMINATED: 410,
  PAYLOAD_TOO_LARGE: 413,
  GIT_FAILED: 422,
  UNSUPPORTED_LANGUAGE: 422,
  UPGRADE_REQUIRED: 426,
  RATE_LIMITED: 429,
  INTERNAL: 500,
  PORT_NOT_LISTENING: 502,
  BAD_GATEWAY: 502,
  UNAVAILABLE: 503,
  CAPACITY_EXHAUSTED: 503,
  UPSTREAM_TIMEOUT: 504,
});

/** The JSON body of every non-2xx answer. */
export interface ApiErrorBody {
  code: string;
  message: string;
  retryable?: boolean;
  details?: Record<string, unknown>;
}

export interface WarrenErrorInit {
  code: string;
  message: string;
  status?: number;
  retryable?: boolean;
  details?: Record<string, unknown>;
  requestId?: string;
  node?: string;
  cause?: unknown;
}

/** Base class of every error the SDK throws. */
export class WarrenError extends Error {
  /** The API's error code (`FILE_NOT_FOUND`, ...), or NETWORK_ERROR / TIMEOUT / PROTOCOL_ERROR. */
  readonly code: string;
  /** HTTP status (0 when no answer came). */
  readonly status: number;
  /** Whether the server says the same request may succeed later. */
  readonly retryable: boolean;
  /** The API's `details` object (e.g. `{exit_code}`), when given. */
  readonly details?: Record<string, unknown>;
  /** The `x-request-id` of the answer, when there was one. */
  readonly requestId?: string;
  /** The `x-warren-node` of the answer, when there was one. */
  readonly node?: string;

  constructor(init: WarrenErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.status = init.status ?? STATUS_BY_CODE[init.code] ?? 0;
    this.retryable = init.retryable ?? isRetryableCode(init.code);
    this.details = init.details;
    this.requestId = init.requestId;
    this.node = init.node;
  }

  /** The error body as the API sent it. */
  toJSON(): ApiErrorBody & { status: number; requestId?: string } {
    return {
      code: this.code,
      message: this.message,
      retryable: this.retryable,
      ...(this.details ? { details: this.details } : {}),
      status: this.status,
      ...(this.requestId ? { requestId: this.requestId } : {}),
    };
  }
}

export class InvalidArgumentError extends WarrenError {}
export class UnauthorizedError extends WarrenError {}
export class ForbiddenError extends WarrenError {}
export class EgressDeniedError extends WarrenError {}
/** Any 404. */
export class NotFoundError extends WarrenError {}
export class SandboxNotFoundError extends NotFoundError {}
export class FileNotFoundError extends NotFoundError {}
export class ProcessNotFoundError extends NotFoundError {}
export class ContextNotFoundError extends NotFoundError {}
export class SnapshotNotFoundError extends NotFoundError {}
export class InvalidTokenError extends NotFoundError {}
export class ReadyTimeoutError extends WarrenError {}
/** Any 409. */
export class ConflictError extends WarrenError {}
export class ProcessExitedError extends ConflictError {
  /** The exit code of the process that ended before the wait was satisfied. */
  get exitCode(): number | undefined {
    const c = this.details?.['exit_code'];
    return typeof c === 'number' ? c : undefined;
  }
}
export class IsADirectoryError extends ConflictError {}
export class NotADirectoryError extends ConflictError {}
export class AlreadyExistsError extends ConflictError {}
/** The session's shell ended (`exit N`): `exitCode`, and in JSON mode `stdout`/`stderr`. */
export class SessionTerminatedError extends WarrenError {
  get exitCode(): number | undefined {
    const c = this.details?.['exit_code'];
    return typeof c === 'number' ? c : undefined;
  }
  get stdout(): string | undefined {
    const s = this.details?.['stdout'];
    return typeof s === 'string' ? s : undefined;
  }
  get stderr(): string | undefined {
    const s = this.details?.['stderr'];
    return typeof s === 'string' ? s : undefined;
  }
}
export class PayloadTooLargeError extends WarrenError {}
export class GitFailedError extends WarrenError {}
export class UnsupportedLanguageError extends WarrenError {}
export class UpgradeRequiredError extends WarrenError {}
export class RateLimitedError extends WarrenError {}
export class InternalError extends WarrenError {}
export class PortNotListeningError extends WarrenError {}
export class BadGatewayError extends WarrenError {}
export class UnavailableError extends WarrenError {}
export class CapacityExhaustedError extends UnavailableError {}
export class UpstreamTimeoutError extends WarrenError {}
export class NetworkError extends WarrenError {}
export class TimeoutError extends WarrenError {}
export class ProtocolError extends WarrenError {}

type ErrorClass = new (init: WarrenErrorInit) => WarrenError;

/** The class each code maps to. */
export const ERROR_CLASSES: Readonly<Record<string, ErrorClass>> = Object.freeze({
  INVALID_ARGUMENT: InvalidArgumentError,
  UNAUTHORIZED: UnauthorizedError,
  FORBIDDEN: ForbiddenError,
  EGRESS_DENIED: EgressDeniedError,
  SANDBOX_NOT_FOUND: SandboxNotFoundError,
  FILE_NOT_FOUND: FileNotFoundError,
  PROCESS_NOT_FOUND: ProcessNotFoundError,
  CONTEXT_NOT_FOUND: ContextNotFoundError,
  SNAPSHOT_NOT_FOUND: SnapshotNotFoundError,
  INVALID_TOKEN: InvalidTokenError,
  NOT_FOUND: NotFoundError,
  READY_TIMEOUT: ReadyTimeoutError,
  CONFLICT: ConflictError,
  PROCESS_EXITED: ProcessExitedError,
  IS_A_DIRECTORY: IsADirectoryError,
  NOT_A_DIRECTORY: NotADirectoryError,
  ALREADY_EXISTS: AlreadyExistsError,
  SESSION_TERMINATED: SessionTerminatedError,
  PAYLOAD_TOO_LARGE: PayloadTooLargeError,
  GIT_FAILED: GitFailedError,
  UNSUPPORTED_LANGUAGE: UnsupportedLanguageError,
  UPGRADE_REQUIRED: UpgradeRequiredError,
  RATE_LIMITED: RateLimitedError,
  INTERNAL: InternalError,
  PORT_NOT_LISTENING: PortNotListeningError,
  BAD_GATEWAY: BadGatewayError,
  UNAVAILABLE: UnavailableError,
  CAPACITY_EXHAUSTED: CapacityExhaustedError,
  UPSTREAM_TIMEOUT: UpstreamTimeoutError,
  NETWORK_ERROR: NetworkError,
  TIMEOUT: TimeoutError,
  PROTOCOL_ERROR: ProtocolError,
});

/** Codes the API marks retryable. */
export function isRetryableCode(code: string): boolean {
  return (
    code === 'UNAVAILABLE' ||
    code === 'CAPACITY_EXHAUSTED' ||
    code === 'UPSTREAM_TIMEOUT' ||
    code === 'RATE_LIMITED'
  );
}

/** A class for statuses without a readable body (a proxy's HTML page, say). */
function classForStatus(status: number): { code: string; cls: ErrorClass } {
  switch (status) {
    case 400:
      return { code: 'INVALID_ARGUMENT', cls: InvalidArgumentError };
    case 401:
      return { code: 'UNAUTHORIZED', cls: UnauthorizedError };
    case 403:
      return { code: 'FORBIDDEN', cls: ForbiddenError };
    case 404:
      return { code: 'NOT_FOUND', cls: NotFoundError };
    case 408:
      return { code: 'READY_TIMEOUT', cls: ReadyTimeoutError };
    case 409:
      return { code: 'CONFLICT', cls: ConflictError };
    case 413:
      return { code: 'PAYLOAD_TOO_LARGE', cls: PayloadTooLargeError };
    case 429:
      return { code: 'RATE_LIMITED', cls: RateLimitedError };
    case 502:
      return { code: 'BAD_GATEWAY', cls: BadGatewayError };
    case 503:
      return { code: 'UNAVAILABLE', cls: UnavailableError };
    case 504:
      return { code: 'UPSTREAM_TIMEOUT', cls: UpstreamTimeoutError };
    default:
      return { code: 'INTERNAL', cls: InternalError };
  }
}

/** Builds the typed error of an API error body (also of an SSE `error` event). */
export function errorFromBody(
  body: Partial<ApiErrorBody> & Record<string, unknown>,
  status?: number,
  meta: { requestId?: string; node?: string } = {},
): WarrenError {
  const code = typeof body.code === 'string' ? body.code : classForStatus(status ?? 500).code;
  const cls = ERROR_CLASSES[code] ?? (status ? classForStatus(status).cls : WarrenError);
  let details = body.details as Record<string, unknown> | undefined;
  // The egress proxy puts host/sandbox beside the message, not in details.
  if (!details && code === 'EGRESS_DENIED') {
    const { host, sandbox } = body as { host?: unknown; sandbox?: unknown };
    if (host !== undefined || sandbox !== undefined) details = { host, sandbox };
  }
  return new cls({
    code,
    message: typeof body.message === 'string' ? body.message : `HTTP ${status ?? '?'}`,
    status: status ?? STATUS_BY_CODE[code],
    retryable: typeof body.retryable === 'boolean' ? body.retryable : undefined,
    details,
    requestId: meta.requestId,
    node: meta.node,
  });
}

/** Builds the typed error of a non-2xx answer from its status, body text and headers. */
export function errorFromResponse(
  status: number,
  bodyText: string,
  headers?: { get(name: string): string | null },
): WarrenError {
  const meta = {
    requestId: headers?.get('x-request-id') ?? undefined,
    node: headers?.get('x-warren-node') ?? undefined,
  };
  try {
    const body = JSON.parse(bodyText);
    if (body && typeof body === 'object' && typeof body.code === 'string') {
      return errorFromBody(body, status, meta);
    }
  } catch {
    // not JSON: fall through
  }
  const { code, cls } = classForStatus(status);
  const text = bodyText.trim().slice(0, 512);
  return new cls({
    code,
    message: `HTTP ${status}${text ? `: ${text}` : ''}`,
    status,
    ...meta,
  });
}
