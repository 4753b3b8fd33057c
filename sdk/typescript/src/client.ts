/**
 * `B3OS`: the client of the b3os api.
 *
 * ```ts
 * import { B3OS } from "@b3os/sdk";
 * const b3os = new B3OS(); // B3OS_API_URL and B3OS_API_KEY
 * const pack = await b3os.actions.getPack("io.b3os", "open-meteo");
 * ```
 */

import { Actions } from "./actions.js";
import * as endpoints from "./endpoints.js";
import { type ClientOptions, type Settings, settingsOf } from "./options.js";
import type { ApiRequest } from "./request.js";
import { Routines } from "./routines.js";
import { Runs } from "./runs.js";
import { send } from "./transport.js";

/** A client of one api with one key. */
export class B3OS {
  /** The registry, resolving refs, calling actions. */
  readonly actions: Actions;
  /** Storing routines and starting runs. */
  readonly routines: Routines;
  /** Reading, waiting for, cancelling and re-running runs. */
  readonly runs: Runs;
  readonly #settings: Settings;

  /**
   * Make a client.
   *
   * @throws ConfigError no URL or key was given or set.
   */
  constructor(options: ClientOptions = {}) {
    this.#settings = settingsOf(options);
    const sendIt = <T>(request: ApiRequest<T>) => send(this.#settings, request);
    this.actions = new Actions(sendIt);
    this.routines = new Routines(sendIt);
    this.runs = new Runs(sendIt);
  }

  /** The api's base URL. */
  get apiUrl(): string {
    return this.#settings.apiUrl;
  }

  /** A client like this one (same api and key) with some settings changed (those given and not undefined). */
  withOptions(changes: Omit<ClientOptions, "apiUrl" | "apiKey">): B3OS {
    const given = Object.entries(changes).filter(([, value]) => value !== undefined);
    return new B3OS({ ...this.#settings, ...Object.fromEntries(given) });
  }

  /**
   * The organization's metered `units`, `calls` and `cost` (micro-USD) for a month.
   *
   * @param month `YYYY-MM`; default the current one.
   */
  async usage(month?: string): Promise<Record<string, unknown>> {
    return send(this.#settings, endpoints.usage(month));
  }
}
