/**
 * The api's shapes by name, each a schema of the OpenAPI document `schema.ts` was generated from
 * (`npm run generate`): a field the server renames or drops fails to compile where it is used.
 */

import type { components } from "./schema.js";

type Schemas = components["schemas"];

/** A pack's version: `pack`, `version`, `content_hash`, `kid`, `title`, `description`, `publisher`, `actions`. */
export type Pack = Schemas["PackSummary"];
/** An action of a pack: `key`, `title`, `description`, `ref` (the exact pin). */
export type ActionSummary = Schemas["ActionSummary"];
/** A published version: `version`, `content_hash`, `kid`, `published_at`. */
export type PackVersion = Schemas["VersionSummary"];
/** An action as an MCP tool (`{pack}__{action}`). */
export type Tool = Schemas["ToolList"]["tools"][number];
/** What a ref runs now: `ref`, `pin`, `pack`, `version`, `kind`, `action`. */
export type ResolvedAction = Schemas["ResolvedAction"];
/** A call's answer: `call_id`, `ref` (the exact pin), `tier`, `output`, `cost`, `timings`. */
export type CallAnswer<Output = unknown> = Omit<Schemas["CallAnswer"], "output"> & { output: Output };
/** A cancelled call: `call_id`, `state`, `node`. */
export type Cancelled = Schemas["Cancelled"];
/** A stored routine: `name`, `version`, `description`, `steps`, `inputs`, ... */
export type Routine = Schemas["RoutinePublic"];
/** A run: `run_id`, `routine`, `status`, `inputs`, `outputs`, `steps`, `error`, ... */
export type Run = Schemas["RunPublic"];
/** The most a run can cost, per step and in all (`POST /v1/routines/{name}/estimate`). */
export type RoutineEstimate = Schemas["RoutineEstimate"];
/** A run's step: `status`, `attempts`, `ref`, `output` or `error`, ... */
export type Step = Schemas["StepResult"];
/** A run in a list. */
export type RunSummary = Schemas["RunSummary"];
/** A cancelled run: `{ run_id, status: "cancelling" }`. */
export type CancelAccepted = Schemas["CancelAccepted"];
