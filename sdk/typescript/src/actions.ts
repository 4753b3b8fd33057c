/**
 * `b3os.actions`: the pack registry, resolving a ref, calling an action and cancelling a call. Every
 * method returns the api's JSON answer (`docs/api.md`, `docs/calls.md`); the list methods the list itself.
 */

import * as endpoints from "./endpoints.js";
import type { CallOptions, CancelTarget } from "./endpoints.js";
import type { ApiRequest } from "./request.js";
import type { CallAnswer, Cancelled, Pack, PackVersion, ResolvedAction, Tool } from "./types.js";

/** Sends a request until it is answered for good. */
export type Send = <T>(request: ApiRequest<T>) => Promise<T>;

/** The registry and the call path of a `B3OS` client. */
export class Actions {
  readonly #send: Send;

  constructor(send: Send) {
    this.#send = send;
  }

  /** Every pack's newest version. */
  async listPacks(): Promise<Pack[]> {
    return (await this.#send(endpoints.listPacks())).packs;
  }

  /**
   * A pack's newest version: `pack`, `version`, `content_hash`, `kid`, `title`, `actions`, ...
   *
   * @throws NotFound no such pack.
   */
  async getPack(namespace: string, name: string): Promise<Pack> {
    return this.#send(endpoints.getPack(namespace, name));
  }

  /** Every published version of a pack. */
  async versions(namespace: string, name: string): Promise<PackVersion[]> {
    return (await this.#send(endpoints.listVersions(namespace, name))).versions;
  }

  /** The signed manifest (b3pack.json) of one version: `egress`, `connections`, `actions`, ... */
  async getPackManifest(namespace: string, name: string, version: string): Promise<Record<string, unknown>> {
    return this.#send(endpoints.getPackManifest(namespace, name, version));
  }

  /** A version's actions as MCP tools (`{pack}__{action}`); the newest version by default. */
  async tools(namespace: string, name: string, version?: string): Promise<Tool[]> {
    return (await this.#send(endpoints.listTools(namespace, name, version))).tools;
  }

  /**
   * The exact pin and action a call of `ref` runs now.
   *
   * @throws NotFound the pack, version or action is missing (`error.body.missing` says which).
   */
  async resolve(ref: string): Promise<ResolvedAction> {
    return this.#send(endpoints.resolve(ref));
  }

  /**
   * Call an action and return its answer: `call_id`, `ref` (the exact pin), `tier`, `output`, `cost`.
   *
   * A 429 or 503 answer is sent again after exactly its Retry-After, with the same Idempotency-Key (the
   * given one, else one made for this call), so a retry never runs or bills the call twice.
   *
   * @param ref `ns/pack/action@1` (the newest 1.x.y) or `@1.0.0` (exact).
   * @param input The action's input.
   * @param options `files` (file fields of the input), `idempotencyKey`, `timeoutMs`.
   * @throws InvalidRequest the input does not fit the action (`body.field`), or a connection is missing.
   * @throws ActionFailed the tool or the upstream failed (`reason`, `body.retryable`).
   * @throws RateLimited, Unavailable still refused after the retries (`retryAfter`).
   * @throws ConnectionFailed no answer came; its `idempotencyKey` sends the same call again safely.
   */
  async call<Output = unknown>(
    ref: string,
    input?: Record<string, unknown>,
    options: CallOptions = {},
  ): Promise<CallAnswer<Output>> {
    return (await this.#send(await endpoints.call(ref, input, options))) as CallAnswer<Output>;
  }

  /**
   * Cancel a running call of your organization by its id or its Idempotency-Key (exactly one):
   * `{ call_id, state: "cancelled", node }`, or `{ state: "finished" }` when it had ended.
   */
  async cancel(target: CancelTarget): Promise<Cancelled> {
    return this.#send(endpoints.cancelCall(target));
  }
}
