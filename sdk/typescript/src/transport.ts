/**
 * Sending a request until it is answered for good, and the judgement of each answer: the method's value,
 * a typed error, or a wait of exactly `Retry-After` before the same request (the same `Idempotency-Key`)
 * goes again.
 */

import { apiError, ConnectionFailed } from "./errors.js";
import type { Retry, Settings } from "./options.js";
import type { ApiRequest } from "./request.js";

export const VERSION = "0.1.0";
const RETRIED_STATUSES = [429, 503];

/** An answer, read whole. */
interface Answer {
  status: number;
  statusText: string;
  headers: Record<string, string>;
  text: string;
}

/**
 * Send a request until it is answered for good.
 *
 * A 429 or 503 with a `Retry-After`, and a 409 `idempotency_in_progress` (the key's first request still
 * runs), are sent again after exactly `Retry-After` while fewer than `maxRetries` retries were made and
 * the wait is at most `maxRetryWaitS`; any other error answer is thrown at once.
 *
 * @returns The answer's JSON (undefined for an empty answer).
 * @throws APIError (a subclass by status and code) for an error answer; ConnectionFailed when none came.
 */
export async function send<T>(settings: Settings, request: ApiRequest<T>): Promise<T> {
  for (let retries = 0; ; retries++) {
    const answer = await exchange(settings, request);
    const verdict = judge(settings, request, answer, retries);
    if (!("waitS" in verdict)) return verdict.value as T;
    await settings.onRetry?.(verdict);
    await settings.sleep(verdict.waitS);
  }
}

/** What an answer means: the request's value, or a wait before it goes again; an error is thrown. */
export function judge<T>(
  settings: Settings,
  request: ApiRequest<T>,
  answer: Answer,
  retries: number,
): { value: unknown } | Retry {
  const { status } = answer;
  if (status >= 200 && status < 300) return { value: answer.text ? JSON.parse(answer.text) : undefined };
  const error = apiError(
    status,
    answer.statusText,
    answer.headers,
    jsonOrUndefined(answer.text),
    request.idempotencyKey,
  );
  const waitS = error.retryAfter;
  const retried = RETRIED_STATUSES.includes(status) || (status === 409 && error.code === "idempotency_in_progress");
  if (!retried || waitS === null || retries >= settings.maxRetries || waitS > settings.maxRetryWaitS) throw error;
  return {
    attempt: retries + 1,
    maxRetries: settings.maxRetries,
    waitS,
    error,
    method: request.method,
    path: request.path,
    idempotencyKey: request.idempotencyKey,
  };
}

/** One exchange with the api: the request sent, its answer read whole. */
async function exchange<T>(settings: Settings, request: ApiRequest<T>): Promise<Answer> {
  const headers: Record<string, string> = {
    Authorization: `Bearer ${settings.apiKey}`,
    Accept: "application/json",
    "User-Agent": `b3os-typescript/${VERSION}`,
  };
  if (request.idempotencyKey !== null) headers["Idempotency-Key"] = request.idempotencyKey;
  let body: string | undefined;
  if (request.json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(request.json);
  }
  const signal = AbortSignal.timeout(settings.timeoutMs);
  try {
    const response = await settings.fetch(url(settings.apiUrl, request), {
      method: request.method,
      headers,
      body,
      signal,
    });
    const text = await response.text();
    return {
      status: response.status,
      statusText: response.statusText,
      headers: Object.fromEntries(response.headers),
      text,
    };
  } catch (error) {
    const timedOut = signal.aborted;
    const why = timedOut ? `no answer in ${settings.timeoutMs} ms` : causeOf(error);
    throw new ConnectionFailed(settings.apiUrl, why, {
      idempotencyKey: request.idempotencyKey,
      timedOut,
      cause: error,
    });
  }
}

function url<T>(apiUrl: string, request: ApiRequest<T>): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(request.query)) {
    if (value !== undefined && value !== null) query.set(name, String(value));
  }
  const search = query.toString();
  return apiUrl + request.path + (search ? `?${search}` : "");
}

/** The transport's reason, such as `ECONNREFUSED`, from fetch's `TypeError: fetch failed` and its cause. */
function causeOf(error: unknown): string {
  let current: unknown = error;
  while (current instanceof Error && current.cause instanceof Error) current = current.cause;
  if (current instanceof Error) return (current as { code?: string }).code ?? current.message;
  return String(current);
}

function jsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
