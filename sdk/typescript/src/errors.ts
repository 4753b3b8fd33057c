/**
 * Every error the SDK throws, under one root (the same tree as the Python SDK's `b3os.errors`).
 *
 * ```
 * B3OSError
 * ├── ConfigError               no api URL or no API key (option or B3OS_API_URL / B3OS_API_KEY)
 * ├── ConnectionFailed          the api could not be reached, or did not answer in time (`url`, `idempotencyKey`)
 * ├── WaitTimedOut              `runs.wait` gave up before the run ended (`runId`, `run`)
 * └── APIError                  the api answered an error: status, code, reason, message, retryAfter, body
 *     ├── InvalidRequest        400 invalid_request (`body.field` names what is wrong)
 *     ├── Unauthorized          401 unauthorized
 *     ├── Forbidden             403 forbidden (`body.missing_scope`)
 *     ├── NotFound              404 not_found
 *     ├── Conflict              409 conflict, idempotency_in_progress (retried after Retry-After)
 *     ├── PayloadTooLarge       413 payload_too_large
 *     ├── IdempotencyKeyReused  422 idempotency_key_reused (the key was sent with another request)
 *     ├── RateLimited           429 rate_limited, concurrency_limited, quota_exceeded (retried)
 *     └── ServerError           5xx (500 internal, and any other the classes below do not name)
 *         ├── ActionFailed      502 tool_failed, action_failed (`body.retryable`, `body.pack_error`, ...)
 *         ├── Unavailable       503 unavailable, tool_, pack_, action_unavailable (retried)
 *         └── TimedOut          504 tool_timed_out, action_timed_out
 * ```
 *
 * An `APIError` is built from the api's one error body, `{"error": {"code", "message", "reason"?, ...}}`:
 * `message` is the api's sentence (`input.text: 5 is not of type 'string'`), and the error object's other
 * fields (`field`, `missing_scope`, `retryable`, `call_id`, `cost`, ...) are in `body`.
 */

import { retryAfterSeconds } from "./retryAfter.js";

/** The root of every error of the SDK. */
export class B3OSError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The client lacks its api URL or its API key, or an option is out of range. */
export class ConfigError extends B3OSError {}

/**
 * The api could not be reached, or did not answer in time; nothing was read from it. The request may
 * still have run: send it again with the same `idempotencyKey` to get its one answer.
 */
export class ConnectionFailed extends B3OSError {
  /** The api's base URL. */
  readonly url: string;
  /** The `Idempotency-Key` the request was sent with (given, or made by the SDK), or null. */
  readonly idempotencyKey: string | null;
  /** True when the api did not answer within `timeoutMs`. */
  readonly timedOut: boolean;

  constructor(url: string, why: string, options: { idempotencyKey: string | null; timedOut: boolean; cause: unknown }) {
    super(
      options.timedOut
        ? `The api at ${url} did not answer in time (${why})`
        : `Cannot reach the api at ${url} (${why})`,
      { cause: options.cause },
    );
    this.url = url;
    this.idempotencyKey = options.idempotencyKey;
    this.timedOut = options.timedOut;
  }
}

/** A run was still running when `runs.wait` reached its `timeoutS`. */
export class WaitTimedOut extends B3OSError {
  /** The run waited for. */
  readonly runId: string;
  /** The run as last read (`status` is still `running`). */
  readonly run: unknown;

  constructor(runId: string, run: unknown, timeoutS: number) {
    super(`run ${runId} was still running after ${timeoutS} s`);
    this.runId = runId;
    this.run = run;
  }
}

/** The fields of an error answer. */
export interface APIErrorFields {
  code: string | null;
  message: string;
  reason?: string | null;
  retryAfter?: number | null;
  body?: Record<string, unknown>;
  headers?: Record<string, string>;
  idempotencyKey?: string | null;
}

/** An error answer of the api. */
export class APIError extends B3OSError {
  /** The HTTP status. */
  readonly status: number;
  /** The error's stable code (`invalid_request`, `rate_limited`, ...), or null when the body was not the api's error shape. */
  readonly code: string | null;
  /** The finer reason some codes carry (`connection_missing`, `upstream`, ...), or null. */
  readonly reason: string | null;
  /** Seconds to wait before sending the request again (the `Retry-After` header, else the body's `retry_after`), or null. */
  readonly retryAfter: number | null;
  /** The error object (`{code, message, ...}`); {} when the answer had none. */
  readonly body: Record<string, unknown>;
  /** The answer's headers, names in lowercase. */
  readonly headers: Record<string, string>;
  /** The `Idempotency-Key` the request was sent with, or null. */
  readonly idempotencyKey: string | null;

  constructor(status: number, fields: APIErrorFields) {
    super(fields.message);
    this.status = status;
    this.code = fields.code;
    this.reason = fields.reason ?? null;
    this.retryAfter = fields.retryAfter ?? null;
    this.body = { ...fields.body };
    this.headers = { ...fields.headers };
    this.idempotencyKey = fields.idempotencyKey ?? null;
  }

  /** The api's sentence with its status and code, as the CLI prints it: `input.name: 'B' is too short (400 invalid_request)`. */
  override toString(): string {
    return this.code ? `${this.message} (${this.status} ${this.code})` : this.message;
  }
}

/** 400: the request is wrong; `body.field` names what. */
export class InvalidRequest extends APIError {}
/** 401: no key, an unknown key or a revoked key. */
export class Unauthorized extends APIError {}
/** 403: the key lacks a scope (`body.missing_scope`) or the organization a right. */
export class Forbidden extends APIError {}
/** 404: absent, or another organization's. */
export class NotFound extends APIError {}
/** 409: already exists, immutable, ended; or the Idempotency-Key's first request still runs. */
export class Conflict extends APIError {}
/** 413: the body is larger than the api takes. */
export class PayloadTooLarge extends APIError {}
/** 422: the Idempotency-Key was already sent with another request. */
export class IdempotencyKeyReused extends APIError {}
/** 429: a rate, concurrency or quota limit; wait `retryAfter` seconds. */
export class RateLimited extends APIError {}
/** 5xx the other classes do not name (500 internal). */
export class ServerError extends APIError {}
/** 502: the tool or the upstream failed (`reason`; `body.retryable` says whether trying again may help). */
export class ActionFailed extends ServerError {}
/** 503: the api, a node, the pack or the upstream cannot serve now; wait `retryAfter` seconds. */
export class Unavailable extends ServerError {}
/** 504: the tool or the upstream did not finish within the call's time. */
export class TimedOut extends ServerError {}

type APIErrorClass = new (status: number, fields: APIErrorFields) => APIError;

const BY_STATUS: Record<number, APIErrorClass> = {
  400: InvalidRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  413: PayloadTooLarge,
  429: RateLimited,
  502: ActionFailed,
  503: Unavailable,
  504: TimedOut,
};

/** The class of an error answer, by its status (and code where a status holds several kinds). */
export function errorClass(status: number, code: string | null): APIErrorClass {
  if (status === 422 && code === "idempotency_key_reused") return IdempotencyKeyReused;
  return BY_STATUS[status] ?? (status >= 500 ? ServerError : APIError);
}

/**
 * The typed error of an error answer.
 *
 * @param status The HTTP status.
 * @param statusText The status's phrase (`Bad Gateway`), for a body without a sentence.
 * @param headers The answer's headers, names in lowercase.
 * @param body The decoded JSON body, or undefined when it was not JSON.
 * @param idempotencyKey The key the request was sent with.
 */
export function apiError(
  status: number,
  statusText: string,
  headers: Record<string, string>,
  body: unknown,
  idempotencyKey: string | null,
): APIError {
  const inner = isObject(body) ? body["error"] : undefined;
  const detail = isObject(inner) ? inner : {};
  const text = (key: string): string | null => (typeof detail[key] === "string" ? (detail[key] as string) : null);
  const message = text("message") || `The api answered ${status} ${statusText}.`;
  let retryAfter = retryAfterSeconds(headers["retry-after"]);
  const fromBody = detail["retry_after"];
  if (retryAfter === null && typeof fromBody === "number") retryAfter = Math.max(fromBody, 0);
  const code = text("code");
  const Class = errorClass(status, code);
  return new Class(status, {
    code,
    message,
    reason: text("reason"),
    retryAfter,
    body: detail,
    headers,
    idempotencyKey,
  });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
