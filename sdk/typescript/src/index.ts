/** `@b3os/sdk`: the TypeScript client of the b3os api. */

export { Actions, type Send } from "./actions.js";
export { B3OS } from "./client.js";
export type { CallOptions, CancelTarget } from "./endpoints.js";
export {
  ActionFailed,
  APIError,
  type APIErrorFields,
  apiError,
  B3OSError,
  ConfigError,
  Conflict,
  ConnectionFailed,
  errorClass,
  Forbidden,
  IdempotencyKeyReused,
  InvalidRequest,
  NotFound,
  PayloadTooLarge,
  RateLimited,
  ServerError,
  TimedOut,
  Unauthorized,
  Unavailable,
  WaitTimedOut,
} from "./errors.js";
export { type FileInput, type FileOutput, type FileValue, fileBytes, fileValue } from "./files.js";
export type { ClientOptions, Retry } from "./options.js";
export { retryAfterSeconds } from "./retryAfter.js";
export { Routines } from "./routines.js";
export { MAX_WAIT_S, newlyFinished, type OnStep, Runs, type WaitOptions } from "./runs.js";
export type { components, operations, paths } from "./schema.js";
export { VERSION } from "./transport.js";
export type * from "./types.js";
