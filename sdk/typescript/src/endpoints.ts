/**
 * Every api operation the SDK calls, as a function that builds its request: the one place that knows
 * paths, bodies and which requests carry an Idempotency-Key (the priced and starting ones: a call, a
 * run's start, a re-run; the given key, else one made for that request).
 */

import { type FileInput, fileValue } from "./files.js";
import { newIdempotencyKey, request } from "./request.js";

const PACK = "/v1/actions/packs/{namespace}/{name}" as const;

// --- the registry -------------------------------------------------------------------------------------

export const listPacks = () => request("get", "/v1/actions/packs");

export const getPack = (namespace: string, name: string) => request("get", PACK, { path: { namespace, name } });

export const listVersions = (namespace: string, name: string) =>
  request("get", `${PACK}/versions`, { path: { namespace, name } });

export const getPackManifest = (namespace: string, name: string, version: string) =>
  request("get", `${PACK}/versions/{version}/manifest`, { path: { namespace, name, version } });

export const listTools = (namespace: string, name: string, version?: string) =>
  request("get", `${PACK}/tools`, { path: { namespace, name }, query: { version } });

export const resolve = (ref: string) => request("get", "/v1/actions/resolve", { query: { ref } });

// --- calls --------------------------------------------------------------------------------------------

/** How a call is made: its files, its key, its time limit. */
export interface CallOptions {
  /** File fields of the input, by name. */
  files?: Record<string, FileInput>;
  /** The same key and request give the stored answer, billed once (default: one made for this call). */
  idempotencyKey?: string;
  /** The call's time limit (the action's and the api's limits still apply). */
  timeoutMs?: number;
}

export async function call(ref: string, input: Record<string, unknown> | undefined, options: CallOptions) {
  const withFiles: Record<string, unknown> = { ...input };
  for (const [field, value] of Object.entries(options.files ?? {})) withFiles[field] = await fileValue(field, value);
  const json = { ref, input: withFiles, timeout_ms: options.timeoutMs };
  return request("post", "/v1/actions/call", { json, idempotencyKey: options.idempotencyKey ?? newIdempotencyKey() });
}

/** Which call to cancel: exactly one of its id and its Idempotency-Key. */
export type CancelTarget =
  { callId: string; idempotencyKey?: undefined } | { idempotencyKey: string; callId?: undefined };

export function cancelCall(target: CancelTarget) {
  if ((target.callId === undefined) === (target.idempotencyKey === undefined)) {
    throw new TypeError("cancel takes exactly one of callId and idempotencyKey");
  }
  if (target.callId !== undefined) {
    return request("post", "/v1/actions/calls/{call_id}/cancel", { path: { call_id: target.callId } });
  }
  return request("post", "/v1/actions/call/cancel", { json: { idempotency_key: target.idempotencyKey } });
}

// --- routines and runs --------------------------------------------------------------------------------

export const createRoutine = (yaml: string) => request("post", "/v1/routines", { json: { yaml } });

export const getRoutine = (name: string) => request("get", "/v1/routines/{name}", { path: { name } });

export const listRoutines = () => request("get", "/v1/routines");

export const runRoutine = (
  name: string,
  inputs: Record<string, unknown> | undefined,
  idempotencyKey?: string,
  maxCostMicrousd?: number,
) =>
  request("post", "/v1/routines/{name}/runs", {
    path: { name },
    json:
      maxCostMicrousd === undefined
        ? { inputs: { ...inputs } }
        : { inputs: { ...inputs }, max_cost_microusd: maxCostMicrousd },
    idempotencyKey: idempotencyKey ?? newIdempotencyKey(),
  });

export const estimateRoutine = (name: string, inputs: Record<string, unknown> | undefined, yaml?: string) =>
  request("post", "/v1/routines/{name}/estimate", {
    path: { name },
    json: yaml === undefined ? { inputs: { ...inputs } } : { inputs: { ...inputs }, yaml },
  });

export const getRun = (runId: string, waitS?: number) =>
  request("get", "/v1/runs/{run_id}", { path: { run_id: runId }, query: { wait_s: waitS } });

export const listRuns = (routine?: string, limit?: number) => request("get", "/v1/runs", { query: { routine, limit } });

export const cancelRun = (runId: string) => request("post", "/v1/runs/{run_id}/cancel", { path: { run_id: runId } });

export const rerun = (runId: string, fromStep?: string, idempotencyKey?: string) =>
  request("post", "/v1/runs/{run_id}/rerun", {
    path: { run_id: runId },
    json: fromStep === undefined ? {} : { from: fromStep },
    idempotencyKey: idempotencyKey ?? newIdempotencyKey(),
  });

// --- usage --------------------------------------------------------------------------------------------

export const usage = (month?: string) => request("get", "/v1/usage", { query: { month } });
