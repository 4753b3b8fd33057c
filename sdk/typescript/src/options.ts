/** A client's settings: its options first, then `B3OS_API_URL` and `B3OS_API_KEY`. */

import type { APIError } from "./errors.js";
import { ConfigError } from "./errors.js";

/** What `onRetry` is told before the client waits and sends a request again. */
export interface Retry {
  /** Which retry this is (1 for the first). */
  attempt: number;
  /** The most retries the client makes. */
  maxRetries: number;
  /** The seconds it now waits: the answer's `Retry-After`, exactly. */
  waitS: number;
  /** The answer that asked for the wait (`RateLimited`, `Unavailable` or `Conflict`). */
  error: APIError;
  /** The request's method. */
  method: string;
  /** The request's path. */
  path: string;
  /** The `Idempotency-Key` the request is sent again with, or null. */
  idempotencyKey: string | null;
}

/** The options of `new B3OS(...)`; each is optional. */
export interface ClientOptions {
  /** The api's base URL (default `B3OS_API_URL`). */
  apiUrl?: string;
  /** The API key, `b3_...` (default `B3OS_API_KEY`). */
  apiKey?: string;
  /** Milliseconds one request may take, its answer read (default 300000: a call may take 60 s). */
  timeoutMs?: number;
  /** How many times one request is sent again after a 429, a 503 or a 409 `idempotency_in_progress`; 0: never (default 5). */
  maxRetries?: number;
  /** The longest `Retry-After` waited, in seconds; a longer one is thrown at once (default 120). */
  maxRetryWaitS?: number;
  /** Called with a `Retry` before each wait (to log it or show it); awaited. */
  onRetry?: (retry: Retry) => unknown;
  /** The `fetch` to send with (default the global one). */
  fetch?: typeof globalThis.fetch;
  /** The function that waits `Retry-After` seconds (default a timer). */
  sleep?: (seconds: number) => Promise<unknown>;
}

/** The options of a client, complete. */
export type Settings = Required<Omit<ClientOptions, "onRetry">> & Pick<ClientOptions, "onRetry">;

export const DEFAULT_TIMEOUT_MS = 300_000;
export const DEFAULT_MAX_RETRIES = 5;
export const DEFAULT_MAX_RETRY_WAIT_S = 120;

/** Waits `seconds` on a timer. */
export function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}

/**
 * The settings of a new client: options first, then the environment.
 *
 * @throws ConfigError no URL or no key was given or set, the URL is not http(s), or a number is out of range.
 */
export function settingsOf(options: ClientOptions, env: Record<string, string | undefined> = process.env): Settings {
  const apiUrl = (options.apiUrl || env["B3OS_API_URL"] || "").trim().replace(/\/+$/, "");
  const apiKey = (options.apiKey || env["B3OS_API_KEY"] || "").trim();
  if (!apiUrl) throw new ConfigError("No api URL: pass apiUrl or set B3OS_API_URL (such as http://127.0.0.1:8700).");
  if (!/^https?:\/\//i.test(apiUrl))
    throw new ConfigError(`The api URL ${JSON.stringify(apiUrl)} is not http:// or https://.`);
  if (!apiKey) throw new ConfigError("No API key: pass apiKey or set B3OS_API_KEY.");
  const settings: Settings = {
    apiUrl,
    apiKey,
    timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    maxRetries: options.maxRetries ?? DEFAULT_MAX_RETRIES,
    maxRetryWaitS: options.maxRetryWaitS ?? DEFAULT_MAX_RETRY_WAIT_S,
    onRetry: options.onRetry,
    fetch: options.fetch ?? ((input, init) => globalThis.fetch(input, init)),
    sleep: options.sleep ?? sleep,
  };
  if (!Number.isInteger(settings.maxRetries) || settings.maxRetries < 0) {
    throw new ConfigError(`maxRetries must be a whole number, 0 or more, not ${settings.maxRetries}.`);
  }
  if (!(settings.maxRetryWaitS >= 0)) {
    throw new ConfigError(`maxRetryWaitS must be 0 or more, not ${settings.maxRetryWaitS}.`);
  }
  if (!(settings.timeoutMs > 0)) throw new ConfigError(`timeoutMs must be more than 0, not ${settings.timeoutMs}.`);
  return settings;
}
