/** `b3os.routines`: store a routine's YAML, read the organization's routines, start a run. */

import type { Send } from "./actions.js";
import * as endpoints from "./endpoints.js";
import type { Routine, Run } from "./types.js";

/** The routines of a `B3OS` client's organization. */
export class Routines {
  readonly #send: Send;

  constructor(send: Send) {
    this.#send = send;
  }

  /**
   * Store a routine under the name its YAML gives (a new version when it exists).
   *
   * @throws InvalidRequest the YAML is not a valid routine (`body.problems`, with lines), or a `uses:` does not resolve.
   */
  async create(yaml: string): Promise<Routine> {
    return this.#send(endpoints.createRoutine(yaml));
  }

  /** One stored routine by name. */
  async get(name: string): Promise<Routine> {
    return this.#send(endpoints.getRoutine(name));
  }

  /** The organization's stored routines. */
  async list(): Promise<Routine[]> {
    return (await this.#send(endpoints.listRoutines())).routines;
  }

  /**
   * Start a run of a stored routine: the run as `runs.get` reads it (`run_id`, `status`, ...).
   *
   * The same Idempotency-Key gives the same run; without one, the SDK makes one for this start, so a
   * start retried after a 429 or 503 never starts two runs.
   *
   * @throws NotFound no routine of that name.
   * @throws InvalidRequest an input does not fit the routine's inputs.
   */
  async run(name: string, inputs?: Record<string, unknown>, options: { idempotencyKey?: string } = {}): Promise<Run> {
    return this.#send(endpoints.runRoutine(name, inputs, options.idempotencyKey));
  }
}
