// @warren/sandbox: the TypeScript SDK of warren (docs/api.md).

export { Warren, DEFAULT_URL } from './client.js';
export type { JoinToken, TenantView } from './client.js';
export type { WarrenOptions, RequestOptions, Query, SandboxInfo, SnapshotInfo } from './client.js';
export { Sandbox, ExecutionSession, getSandbox, createRequestBody, validateSandboxId, normalizeExecEvent, normalizeWatchEvent } from './sandbox.js';
export type {
  SandboxOptions,
  PersistOption,
  InstanceType,
  EgressPolicy,
  EgressRule,
  ExecOptions,
  StreamExecOptions,
  ExecResult,
  ExecEvent,
  ProcessOptions,
  WriteFileOptions,
  WriteFileResult,
  ReadFileResult,
  FileInfo,
  ListFilesResult,
  GitCheckoutResult,
  ExposedPort,
  WatchOptions,
  FileWatchEventType,
  FileWatchSSEEvent,
  CodeContext,
  CreateContextOptions,
  RunCodeOptions,
  OutputMessage,
  Execution,
  ExecutionError,
  Result,
  TransferProgress,
  SnapshotOptions,
} from './sandbox.js';
export { Process, normalizeLogEvent } from './process.js';
export type { ProcessInfo, ProcessStatus, WaitForLogResult, WaitForPortOptions, LogEvent } from './process.js';
export { Terminal } from './terminal.js';
export type { TerminalOptions } from './terminal.js';
export { parseSSEStream, SSEParser, SSEReader, encodeSSE, mapSSEStream } from './sse.js';
export type { RawSSEEvent } from './sse.js';
export * from './errors.js';
export { DEFAULT_RETRY_POLICY, backoffDelay, shouldRetry, isRetryableStatus, retryAfterMs } from './retry.js';
export type { RetryPolicy, RetryInput } from './retry.js';
export { parseSleepAfter } from './util.js';
