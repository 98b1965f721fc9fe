// Types of delayd-client (src/index.js).
import type { Redis } from 'ioredis';

/** add()'s arguments: Python's Client.add keywords (camelCase names are read as the snake_case ones). */
export interface Task {
  topic: string | number;
  id: string | number;
  /** exactly one of call, url, push */
  call?: string;
  url?: string;
  push?: string;
  /** seconds from now (on Redis's clock), or an absolute time: Unix seconds, a Date, an ISO 8601 string */
  delay?: number;
  at?: number | Date | string;
  /** run this many seconds after the last such add: a task that has not started yet gets the new
   * arguments and is put off (not with delay, at or nx) */
  debounce?: number;
  /** with debounce: never put the run off more than this many seconds after its first add (maxWait too) */
  max_wait?: number;
  method?: 'GET' | 'POST' | 'get' | 'post';
  body?: 'form' | 'json';
  params?: Record<string, unknown>;
  intervals?: number | string | Array<number | string>;
  persistent?: boolean;
  priority?: 1 | 2 | 3;
  callback?: string;
  timeout?: number;
  every?: number;
  cron?: string;
  tz?: string;
  retries?: number;
  /** a url task: the daemon's url_signing_keys entry that signs its requests (signingKey too) */
  signing_key?: string;
  /** the W3C trace context its runs link to: 00-<32 hex>-<16 hex>-<2 hex> (with an optional tracestate) */
  traceparent?: string;
  tracestate?: string;
  /** insert only: leave an existing task as it is (add() then resolves false) */
  nx?: boolean;
  [camelCaseName: string]: unknown;
}

/** A delivery-log entry (`get --json`'s `attempts`). */
export interface Attempt {
  run: number;
  at: number | null;
  ms: number;
  outcome: string;
  status: number | null;
  error: string;
}

/** A task as `delayd get --json` prints it. */
export interface StoredTask {
  topic: string;
  id: string;
  key: string;
  call: string | null;
  url: string | null;
  push: string | null;
  method: 'GET' | 'POST';
  body: 'form' | 'json';
  params: Record<string, unknown>;
  intervals: number[];
  persistent: boolean;
  priority: 1 | 2 | 3;
  callback: string | null;
  timeout: number | null;
  every: number | null;
  cron: string | null;
  tz: string | null;
  retries: number | null;
  signing_key: string | null;
  traceparent: string | null;
  status: 'delayed' | 'running' | 'ok' | 'failed' | 'deleted';
  created_at: number | null;
  due_at: number | null;
  last_run_at: number | null;
  last_due_at: number | null;
  runs: number;
  last_error: string | null;
  attempts: Attempt[];
}

export interface ClientOptions {
  /** key prefix (default 'delayd:') */
  prefix?: string;
  /** bucket count recorded for a store used for the first time (default 4; a store's own count is read from Redis) */
  buckets?: number;
  /** bytes of JSON params a task may carry (default 65536) */
  paramsLimit?: number;
  /** the daemon's `retries` setting, shown by get() for a task without its own (default 20) */
  retries?: number;
  /** seconds a soft-deleted task stays readable (default 604800) */
  retention?: number;
  /** module prefixes call/callback targets may name (default: any) */
  allowedModules?: string[] | null;
}

/** Invalid input: a one-line message; nothing was written. */
export class TaskError extends Error {}

/** The store's meta hash is unreadable or of another layout/protocol version (one line). */
export class StoreError extends Error {}

/** This package's version (delayd's), and the protocol (docs/protocol.md) it speaks. */
export const VERSION: string;
export const PROTOCOL: number;
/** What delete() resolves to for a task deleted after a run of it was claimed. */
export const CLAIMED: 'claimed';

export function bucketOf(member: string, buckets: number): number;

export class Client {
  constructor(redis: Redis, options?: ClientOptions);
  /** true if written, false if `nx` found the task */
  add(task: Task, options?: { nx?: boolean }): Promise<boolean>;
  /** how many were written; every task is validated before anything is written */
  addMany(tasks: Task[], options?: { nx?: boolean }): Promise<number>;
  /**
   * true: deleted in time, no run of it starts after this resolved; false: no such task; CLAIMED: deleted, but
   * too late for a run already claimed (its handler may be starting or running). Compare with `=== true`.
   */
  delete(topic: string | number, id: string | number, hard?: boolean): Promise<boolean | typeof CLAIMED>;
  get(topic: string | number, id: string | number): Promise<StoredTask | null>;
}
