/**
 * A request as data: its method, its path (a template of the api's OpenAPI document, so a path or a field
 * the server no longer has fails to compile), its query, its body and its `Idempotency-Key`. Built once,
 * sent once plus once per retry, always with the same key.
 */

import { randomUUID } from "node:crypto";

import type { paths } from "./schema.js";

type Method = "get" | "post" | "put" | "delete";
/** A path template of the api (`/v1/runs/{run_id}`). */
export type Path = keyof paths;
/** The methods the api serves on a path. */
export type MethodOf<P extends Path> = { [M in Method]: paths[P][M] extends undefined ? never : M }[Method];
type Operation<P extends Path, M extends MethodOf<P>> = NonNullable<paths[P][M]>;

type JsonOf<R> = R extends { content: { "application/json": infer T } } ? T : undefined;
type Success = 200 | 201 | 202 | 204;
/** What an operation answers on success (the union of its 2xx JSON bodies; undefined for 204). */
export type Answer<O> = O extends { responses: infer R } ? JsonOf<R[Extract<keyof R, Success>]> : never;
type Parts<O> = {
  path?: O extends { parameters: { path: infer X } } ? X : never;
  query?: O extends { parameters: { query?: infer X } } ? X : never;
  json?: O extends { requestBody?: { content: { "application/json": infer X } } } ? X : never;
  idempotencyKey?: string;
};

/** One logical request; `T` is the type of its answer. */
export interface ApiRequest<T> {
  readonly method: string;
  /** The path, each segment percent-encoded. */
  readonly path: string;
  readonly query: Record<string, unknown>;
  readonly json: unknown;
  readonly idempotencyKey: string | null;
  /** Never set: carries the answer's type. */
  readonly answer?: T;
}

/**
 * A request of one operation of the api.
 *
 * @param method The operation's method (`"get"`).
 * @param template The operation's path template (`"/v1/runs/{run_id}"`).
 * @param parts Its path parameters, query, JSON body and Idempotency-Key.
 */
export function request<P extends Path, M extends MethodOf<P>>(
  method: M,
  template: P,
  parts: Parts<Operation<P, M>> = {},
): ApiRequest<Answer<Operation<P, M>>> {
  const params = (parts.path ?? {}) as Record<string, string>;
  const path = template.replace(/\{(\w+)\}/g, (_, name: string) => segment(name, String(params[name])));
  return {
    method: method.toUpperCase(),
    path,
    query: (parts.query ?? {}) as Record<string, unknown>,
    json: parts.json,
    idempotencyKey: parts.idempotencyKey ?? null,
  };
}

/**
 * One path segment, percent-encoded so that no `/`, `?` or `#` in it changes the path.
 *
 * @throws RangeError for `.` and `..`, which a URL resolves as dot segments even when encoded.
 */
export function segment(name: string, value: string): string {
  if (value === "." || value === "..") throw new RangeError(`${name} may not be ${JSON.stringify(value)}`);
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** A fresh key for one logical request that was given none, so its retries are the same request. */
export function newIdempotencyKey(): string {
  return `b3os-sdk-${randomUUID().replaceAll("-", "")}`;
}
